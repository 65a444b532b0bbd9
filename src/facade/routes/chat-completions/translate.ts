// OpenAI chat shapes ⇄ the node's internal contract: the node request (only the fields it knows), the
// `chat.completion` answer and `chat.completion.chunk` stream events. Imports: contract, shared (sampling fields).
import type { ChatMessage, CompletionRequest, CompletionResponse, FinishReason, TokenLogprob, Usage } from '../../../contract/completions.js'
import type { ChatCompletion, ChatLogprobs, ChatParams } from './schema.js'
import { sseFrame } from '../../../shared/sse.js'
import { openAiUsage, sumUsage, type ChunkFormat } from '../completion-flow.js'
import { samplingFields, withChoices } from '../openai-fields.js'

function contentText(content: ChatParams['messages'][number]['content']): string {
  return typeof content === 'string' ? content : content.map((p) => p.text).join('')
}

/** One node request per choice (`n`). */
export const toNodeRequests = (p: ChatParams, requestId: string): CompletionRequest[] => withChoices([toNodeRequest(p, requestId)], p.n ?? 1)

/** The node request: the contract is closed (additionalProperties: false), so only its own fields are copied. */
export function toNodeRequest(p: ChatParams, requestId: string): CompletionRequest {
  // `name` goes to the chat template with the message, as transformers' apply_chat_template passes it.
  const messages: ChatMessage[] = p.messages.map((m) => ({
    role: m.role === 'developer' ? 'system' : m.role,
    content: contentText(m.content),
    ...(m.name !== undefined ? { name: m.name } : {}),
  }))
  const req: CompletionRequest = { model: p.model, messages, request_id: requestId, ...samplingFields(p as Record<string, unknown>) }
  if (p.stream === true) req.stream = true
  return req
}

/** The answer: one choice per node answer (`n`), in order; usage summed over them. */
export function toChatCompletion(id: string, created: number, model: string, rs: CompletionResponse[]): ChatCompletion {
  return {
    id,
    object: 'chat.completion',
    created,
    model,
    choices: rs.map((r, index) => ({ index, message: { role: 'assistant', content: r.text }, finish_reason: r.finish_reason, logprobs: chatLogprobs(r.logprobs) })),
    usage: openAiUsage(sumUsage(rs.map((r) => r.usage))),
  }
}

/** OpenAI's `choices[].logprobs` of chat: the tokens' entries under `content`; null when the request did not ask. */
const chatLogprobs = (lp: TokenLogprob[] | undefined): ChatLogprobs => (lp ? { content: lp, refusal: null } : null)

/** Builds the `chat.completion.chunk` events of one stream. */
export class ChunkWriter implements ChunkFormat {
  constructor(
    private readonly id: string,
    private readonly created: number,
    private readonly model: string,
    /** With `stream_options.include_usage`, every chunk carries `usage: null` and a last chunk carries usage. */
    private readonly includeUsage: boolean,
  ) {}

  private chunk(choices: unknown[], usage?: ChatCompletion['usage']): string {
    const c: Record<string, unknown> = { id: this.id, object: 'chat.completion.chunk', created: this.created, model: this.model, choices }
    if (this.includeUsage) c.usage = usage ?? null
    return sseFrame(JSON.stringify(c))
  }

  start(index: number): string[] {
    return [this.chunk([{ index, delta: { role: 'assistant' }, logprobs: null, finish_reason: null }])]
  }

  content(index: number, text: string, logprobs?: TokenLogprob[]): string {
    return this.chunk([{ index, delta: { content: text }, logprobs: chatLogprobs(logprobs), finish_reason: null }])
  }

  finish(index: number, reason: FinishReason): string {
    return this.chunk([{ index, delta: {}, logprobs: null, finish_reason: reason }])
  }

  usage(u: Usage): string | null {
    return this.includeUsage ? this.chunk([], openAiUsage(u)) : null
  }
}

