// OpenAI chat shapes ⇄ the node's internal contract: the node request (only the fields it knows), the
// `chat.completion` answer and `chat.completion.chunk` stream events. Imports: contract, shared (sampling fields).
import type { ChatMessage, CompletionRequest, CompletionResponse, FinishReason, TokenLogprob, Usage } from '../../../contract/completions.js'
import type { ChatCompletion, ChatLogprobs, ChatParams } from './schema.js'
import { SSE_DONE, sseFrame } from '../../../shared/sse.js'
import type { ErrorCode } from '../../../shared/errors.js'
import { openAiUsage, type StreamFormat, openAiStreamFailed } from '../completion-flow.js'
import { samplingFields, withChoices } from '../openai-fields.js'
import { HeldText, parseToolCalls, type ToolCall, type ToolReading } from '../tool-calls.js'

function contentText(content: ChatParams['messages'][number]['content']): string {
  return content === null ? '' : typeof content === 'string' ? content : content.map((p) => p.text).join('')
}

/** The functions whose calls are parsed out of the answers: the tools, unless tool_choice is none (null: no parsing). */
export function callableTools(p: ChatParams): ReadonlySet<string> | null {
  if (!p.tools?.length || p.tool_choice === 'none') return null
  return new Set(p.tools.map((t) => t.function.name))
}

/** One node request per choice (`n`). */
export const toNodeRequests = (p: ChatParams, requestId: string): CompletionRequest[] => withChoices([toNodeRequest(p, requestId)], p.n ?? 1)

/** The node request: the contract is closed (additionalProperties: false), so only its own fields are copied. */
export function toNodeRequest(p: ChatParams, requestId: string): CompletionRequest {
  // `name` goes to the chat template with the message, as transformers' apply_chat_template passes it.
  // Calls go to the template with their arguments as objects, as transformers' templates read them.
  const messages: ChatMessage[] = p.messages.map((m) => ({
    role: m.role === 'developer' ? 'system' : m.role,
    content: contentText(m.content),
    ...(m.name !== undefined ? { name: m.name } : {}),
    ...(m.tool_calls?.length
      ? { tool_calls: m.tool_calls.map((c) => ({ id: c.id, type: c.type, function: { name: c.function.name, arguments: JSON.parse(c.function.arguments) as unknown } })) }
      : {}),
    ...(m.tool_call_id !== undefined ? { tool_call_id: m.tool_call_id } : {}),
  }))
  const req: CompletionRequest = { model: p.model, messages, request_id: requestId, ...samplingFields(p as Record<string, unknown>) }
  if (p.tools?.length) req.tools = p.tools
  if (p.tool_choice !== undefined && p.tools?.length) req.tool_choice = p.tool_choice
  if (p.stream === true) req.stream = true
  return req
}

export const toolReading = (p: ChatParams): ToolReading | null => {
  const names = callableTools(p)
  return names ? { names, parallel: p.parallel_tool_calls !== false } : null
}

/** A finish reason once calls were found: `tool_calls` for an answer that ended by itself. */
const finishWith = (reason: FinishReason, calls: readonly ToolCall[]): string => (calls.length && reason === 'stop' ? 'tool_calls' : reason)

/** The answer: one choice per node answer (`n`), in order; usage summed over them; tool calls parsed out of the text. */
export function toChatCompletion(id: string, created: number, model: string, rs: CompletionResponse[], usage: Usage, tools: ToolReading | null = null): ChatCompletion {
  return {
    id,
    object: 'chat.completion',
    created,
    model,
    choices: rs.map((r, index) => {
      const parsed = tools ? parseToolCalls(r.text, tools.names, tools.parallel) : null
      const message: ChatCompletion['choices'][number]['message'] = parsed?.calls.length
        ? { role: 'assistant', content: parsed.content, tool_calls: parsed.calls }
        : { role: 'assistant', content: r.text }
      return { index, message, finish_reason: finishWith(r.finish_reason, parsed?.calls ?? []), logprobs: chatLogprobs(r.logprobs) }
    }),
    usage: openAiUsage(usage),
    ...(rs[0]?.system_fingerprint ? { system_fingerprint: rs[0].system_fingerprint } : {}),
  }
}

/** OpenAI's `choices[].logprobs` of chat: the tokens' entries under `content`; null when the request did not ask. */
const chatLogprobs = (lp: TokenLogprob[] | undefined): ChatLogprobs => (lp ? { content: lp, refusal: null } : null)

/** Builds the `chat.completion.chunk` events of one stream. */
export class ChunkWriter implements StreamFormat {
  /** With tools: per choice, its text held back while it may be a call, and the logprobs not yet sent. */
  private readonly held = new Map<number, { text: HeldText; logprobs: TokenLogprob[] }>()

  constructor(
    private readonly id: string,
    private readonly created: number,
    private readonly model: string,
    /** With `stream_options.include_usage`, every chunk carries `usage: null` and a last chunk carries usage. */
    private readonly includeUsage: boolean,
    /** With tools, text that may be a call is held back until the answer shows whether it is one. */
    private readonly tools: ToolReading | null = null,
  ) {}

  /** The node's system_fingerprint, once its final event has come (on the finish and usage chunks). */
  private fingerprint: string | undefined

  private chunk(choices: unknown[], usage?: ChatCompletion['usage']): string {
    const c: Record<string, unknown> = { id: this.id, object: 'chat.completion.chunk', created: this.created, model: this.model, choices }
    if (this.fingerprint) c.system_fingerprint = this.fingerprint
    if (this.includeUsage) c.usage = usage ?? null
    return sseFrame(JSON.stringify(c))
  }

  start(index: number): string[] {
    return [this.chunk([{ index, delta: { role: 'assistant' }, logprobs: null, finish_reason: null }])]
  }

  content(index: number, text: string, logprobs?: TokenLogprob[]): string {
    if (!this.tools) return this.delta(index, text, logprobs)
    const h = this.held.get(index) ?? { text: new HeldText(this.tools), logprobs: [] }
    this.held.set(index, h)
    if (logprobs) h.logprobs.push(...logprobs)
    const out = h.text.push(text)
    if (out === '') return ''
    const lp = h.logprobs.splice(0)
    return this.delta(index, out, lp.length ? lp : undefined)
  }

  private delta(index: number, text: string, logprobs?: TokenLogprob[]): string {
    return this.chunk([{ index, delta: { content: text }, logprobs: chatLogprobs(logprobs), finish_reason: null }])
  }

  /** With tools: the held text, as content or as the calls it was (each in one delta, arguments whole), then the finish. */
  finish(index: number, reason: FinishReason, fingerprint?: string): string {
    this.fingerprint ??= fingerprint
    const h = this.tools ? this.held.get(index) : undefined
    if (!h || !this.tools) return this.chunk([{ index, delta: {}, logprobs: null, finish_reason: reason }])
    const { rest, calls } = h.text.end()
    const lp = h.logprobs.splice(0)
    let out = rest || lp.length ? this.delta(index, rest, lp.length ? lp : undefined) : ''
    calls.forEach((c, i) => {
      out += this.chunk([{ index, delta: { tool_calls: [{ index: i, id: c.id, type: 'function', function: c.function }] }, logprobs: null, finish_reason: null }])
    })
    return out + this.chunk([{ index, delta: {}, logprobs: null, finish_reason: finishWith(reason, calls) }])
  }

  /** With `stream_options.include_usage`, the usage chunk; then `[DONE]`. */
  end(u: Usage): string {
    return (this.includeUsage ? this.chunk([], openAiUsage(u)) : '') + SSE_DONE
  }

  failed(code: ErrorCode, message: string): string {
    return openAiStreamFailed(code, message)
  }
}

