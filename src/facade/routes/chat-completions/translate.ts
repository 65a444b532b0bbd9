// OpenAI chat shapes ⇄ the node's internal contract: the node request (only the fields it knows), the
// `chat.completion` answer and `chat.completion.chunk` stream events. Imports: contract, shared (sampling fields).
import type { ChatMessage, CompletionRequest, CompletionResponse, FinishReason, Usage } from '../../../contract/completions.js'
import type { ChatCompletion, ChatParams } from './schema.js'
import { sseFrame } from '../../../shared/sse.js'
import { openAiUsage, type ChunkFormat } from '../completion-flow.js'
import { samplingFields } from '../openai-fields.js'

function contentText(content: ChatParams['messages'][number]['content']): string {
  return typeof content === 'string' ? content : content.map((p) => p.text).join('')
}

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

export function toChatCompletion(id: string, created: number, model: string, r: CompletionResponse): ChatCompletion {
  return {
    id,
    object: 'chat.completion',
    created,
    model,
    choices: [{ index: 0, message: { role: 'assistant', content: r.text }, finish_reason: r.finish_reason, logprobs: null }],
    usage: openAiUsage(r.usage),
  }
}

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

  content(index: number, text: string): string {
    return this.chunk([{ index, delta: { content: text }, logprobs: null, finish_reason: null }])
  }

  finish(index: number, reason: FinishReason): string {
    return this.chunk([{ index, delta: {}, logprobs: null, finish_reason: reason }])
  }

  usage(u: Usage): string | null {
    return this.includeUsage ? this.chunk([], openAiUsage(u)) : null
  }
}

