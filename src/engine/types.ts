// Engine-level request and event types (EngineRequest, SeqEvent, EngineStats), shared by the scheduler, the Engine
// of each worker (engine.ts) and EnginePool (pool/pool.ts), and re-exported for other layers by index.ts. Plain
// data only: these cross worker threads by structured clone. The engine's own: the node maps its HTTP contract
// onto them.
// Imports: shared, and the engine's prompt and sampling input types.
import type { ErrorData } from '../shared/errors.js'
import type { SamplingInput } from '../shared/sampling.js'
import type { ToolChoice } from '../shared/tools.js'
import type { PromptInput } from './tokenizer/prompt.js'

/**
 * What a caller submits: the model it asks for, exactly one of `messages`, `prompt` or `input_ids`, and the raw
 * sampling fields (validated and defaulted into a sequence inside the worker).
 */
export interface EngineRequest extends PromptInput, SamplingInput {
  model: string
  request_id: string
  /** With `tools`: `required` or a named function constrains the output to one call (Hermes's form). */
  tool_choice?: ToolChoice
  /** Whose request this is, an opaque id (the facade's: the API key): waiting requests are admitted tenant by tenant in turn. */
  tenant?: string
  /** Which choice of one client request's prompt this is (n > 1; 0 the first): later ones leave the prompt out of the metrics. */
  choice?: number
}

/** `stop`: an EOS token, a token of `stop_token_ids` or a stop string; `length`: max_tokens or the context filled. */
export type FinishReason = 'stop' | 'length'

export interface Usage {
  prompt_tokens: number
  completion_tokens: number
  /** As OpenAI reports it: the prompt tokens whose KV rows came from the prefix cache instead of being computed. */
  prompt_tokens_details?: { cached_tokens: number }
}

/** Milliseconds: time waiting for admission, to the first token, and end to end. */
export interface Timings {
  queue_ms: number
  ttft_ms: number
  total_ms: number
}

/**
 * When a sequence's phases ended, for the node's traces: epoch milliseconds with sub-millisecond precision, read in
 * the replica's thread as `performance.timeOrigin + performance.now()` (the process's origin, the same in every
 * thread). `arrival`: the replica took the request (its prompt tokenized); `admitted`: it joined a prefill group, the
 * end of queueing; `firstToken`: its first token was sampled, the end of prefill; `end`: done or failed. Null: not
 * (yet) reached.
 */
export interface PhaseMarks {
  arrival: number
  admitted: number | null
  firstToken: number | null
  end: number | null
}

/**
 * Events of one sequence, in order: accepted, then token deltas, then exactly one of done or error. Every event
 * carries only what is new: `done` has the last delta (text held back until the end, and the last token id and its
 * logprobs), so the whole completion is the concatenation of all token events and `done`.
 */
export type SeqEvent =
  | { type: 'accepted'; promptTokens: number; queueMs?: number; /** The engine replica's thread (set by the pool's workers). */ threadId?: number }
  /** `marks`: on a sequence's first token only (queueing and prefill are over). */
  | { type: 'token'; text: string; tokens: number; ids: number[]; logprobs?: TokenLogprob[]; marks?: PhaseMarks }
  /** `stopSequence`: the stop string that ended it, when one did. */
  | { type: 'done'; text: string; ids: number[]; logprobs?: TokenLogprob[]; finishReason: FinishReason; stopSequence?: string; usage: Usage; timings: Timings; marks?: PhaseMarks }
  /** `marks`: when the sequence had reached a replica. */
  | { type: 'error'; error: ErrorData; marks?: PhaseMarks }

/** A token as logprobs report it (OpenAI's shape): its text, its bytes, its raw log-probability. */
export interface TokenAlternative {
  token: string
  logprob: number
  bytes: number[]
}

/** One generated token's log-probability, and the most likely tokens at its step (with `top_logprobs`). */
export interface TokenLogprob extends TokenAlternative {
  top_logprobs: TokenAlternative[]
}

/** Per-step and per-request observations, for metrics (reported by value; the node turns them into Prometheus). */
export interface StepObservation {
  phase: 'prefill' | 'decode'
  /** The forward pass alone (ORT's run, the graph's argmax included): not the planning, cache copies or sampling. */
  seconds: number
  batch: number
  tokens: number
  /** Bytes copied into the step's inputs, and out of its outputs (model/step-io.ts StepTraffic). */
  bytesIn: number
  bytesOut: number
  /** Speculative decoding (a decode step that carried drafts): draft tokens fed, and those the model's picks confirmed. */
  drafted?: number
  accepted?: number
  /** The step ran as the captured graph (WebGPU graph capture). */
  replayed?: boolean
}

export interface FinishObservation {
  finishReason: FinishReason | 'abort' | 'error'
  promptTokens: number
  completionTokens: number
  /** Prompt tokens looked up in the prefix cache (0 when it is off or the sequence never got admitted). */
  prefixQueryTokens: number
  /** ... and those found there, whose KV rows were reused. */
  prefixHitTokens: number
  /** A later choice of one client request (n > 1): its prompt was counted with the first choice. */
  laterChoice?: boolean
  queueSeconds: number
  ttftSeconds: number | null
  e2eSeconds: number
  /** Mean seconds per output token after the first. */
  tpotSeconds: number | null
  /** Gaps between consecutive output tokens, seconds. */
  interTokenSeconds: number[]
}

export interface EngineStats {
  running: number
  waiting: number
  prefilling: number
  kvUsedBytes: number
  /** Bytes of the prefix cache: within the budget, beside kvUsedBytes, and given back whenever admitted requests need them. */
  prefixCacheBytes: number
  kvBudgetBytes: number
  maxRunning: number
  maxWaiting: number
  /** Date.now() of the step loop's last sign of life (a step, or an idle tick). */
  heartbeat: number
}
