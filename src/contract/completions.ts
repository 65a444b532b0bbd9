// The worker node's internal HTTP contract (DESIGN "Node internal contract"): request, response and stream
// event shapes of POST /internal/v1/completions. Shared by the node (server side) and the facade (client side).
// Imports: typebox, shared (the sampling field definitions).
import { Type, type Static } from '@sinclair/typebox'
import { samplingContractProperties } from '../shared/sampling.js'
import { FunctionTool, MAX_TOOLS, ToolChoice } from '../shared/tools.js'

export const COMPLETIONS_PATH = '/internal/v1/completions'

export const ChatMessage = Type.Object(
  { role: Type.String({ minLength: 1 }), content: Type.String() },
  { additionalProperties: true },
)
export type ChatMessage = Static<typeof ChatMessage>

/** A request id: it goes back in the `x-request-id` header of a streamed answer, so only header-safe characters. */
export const REQUEST_ID_PATTERN = '^[\\w.:@-]{1,128}$'

export const CompletionRequest = Type.Object(
  {
    model: Type.String({ minLength: 1 }),
    messages: Type.Optional(Type.Array(ChatMessage, { minItems: 1 })),
    prompt: Type.Optional(Type.String()),
    input_ids: Type.Optional(Type.Array(Type.Integer({ minimum: 0 }), { minItems: 1 })),
    // Sampling: types only. Their bounds are the engine's 422s, checked against the same definition.
    ...samplingContractProperties(),
    // Rendered by the chat template with `messages`; a required or named tool_choice constrains the output to one call.
    tools: Type.Optional(Type.Array(FunctionTool, { maxItems: MAX_TOOLS })),
    tool_choice: Type.Optional(ToolChoice),
    stream: Type.Optional(Type.Boolean()),
    request_id: Type.Optional(Type.String({ pattern: REQUEST_ID_PATTERN })),
    // Whose request this is, an opaque id (the facade sends the API key's): a node admits waiting requests tenant by
    // tenant in turn, so that one tenant's burst cannot hold everyone else's back. Absent: one shared tenant.
    tenant: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
    // Which choice of its client request this is, where that request asks several of one prompt (n > 1; 0 the
    // first): a node counts the prompt in its prompt-token metrics with the first choice only, as usage counts it once.
    choice: Type.Optional(Type.Integer({ minimum: 0, maximum: 63 })),
  },
  { additionalProperties: false },
)
export type CompletionRequest = Static<typeof CompletionRequest>

export const FinishReason = Type.Union([Type.Literal('stop'), Type.Literal('length')])
export type FinishReason = Static<typeof FinishReason>

export const Usage = Type.Object({
  prompt_tokens: Type.Integer(),
  completion_tokens: Type.Integer(),
  /** The prompt tokens whose KV rows came from the node's prefix cache (OpenAI's field). */
  prompt_tokens_details: Type.Optional(Type.Object({ cached_tokens: Type.Integer() })),
})
export type Usage = Static<typeof Usage>

/** Milliseconds: time waiting for admission, to the first token, and end to end. */
export const Timings = Type.Object({ queue_ms: Type.Number(), ttft_ms: Type.Number(), total_ms: Type.Number() })
export type Timings = Static<typeof Timings>

/** A token as logprobs report it (OpenAI's shape): its text, its bytes and its log-probability. */
const TokenAlternative = Type.Object({ token: Type.String(), logprob: Type.Number(), bytes: Type.Array(Type.Integer()) })

/** A generated token's log-probability (log-softmax of the raw logits) and, with top_logprobs, the likeliest tokens. */
export const TokenLogprob = Type.Object({ token: Type.String(), logprob: Type.Number(), bytes: Type.Array(Type.Integer()), top_logprobs: Type.Array(TokenAlternative) })
export type TokenLogprob = Static<typeof TokenLogprob>

export const CompletionResponse = Type.Object({
  id: Type.String(),
  model: Type.String(),
  text: Type.String(),
  finish_reason: FinishReason,
  /** The stop string (of the request's `stop`) that ended the completion, when one did. */
  stop_sequence: Type.Optional(Type.String()),
  usage: Usage,
  timings: Timings,
  /** Token ids of the completion (the same tokens as `text`), for callers that detokenize or audit themselves. */
  output_ids: Type.Optional(Type.Array(Type.Integer())),
  /** With `logprobs`: one entry per generated token, in order. */
  logprobs: Type.Optional(Type.Array(TokenLogprob)),
  /** What the tokens depend on besides the request (model, runtime, provider): with the same fingerprint and seed, the same tokens. */
  system_fingerprint: Type.Optional(Type.String()),
})
export type CompletionResponse = Static<typeof CompletionResponse>

/**
 * One SSE `data:` event of a streamed completion. Deltas carry `text` (and the delta's token `ids`, and with
 * `logprobs` one entry per id); the last event carries finish and usage.
 */
export type StreamEvent =
  /** A delta. `usage` is the running count, so a stream cut short can still be billed for its prompt. */
  | { id: string; text: string; ids?: number[]; logprobs?: TokenLogprob[]; usage?: Usage }
  | { id: string; text: ''; finish_reason: FinishReason; stop_sequence?: string; usage: Usage; timings: Timings; system_fingerprint?: string }
  /** An error after the stream began; `usage` counts what was produced before it (billing a stream that ends early). */
  | { error: { message: string; type: string; code: number }; usage?: Usage }
