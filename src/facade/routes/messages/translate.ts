// Anthropic Messages shapes ⇄ the node's internal contract: system and content blocks as chat messages (tool_use as
// the assistant's tool calls, tool_result as tool messages), the node request, the `message` answer with its
// stop_reason, and Anthropic's stream events. Imports: contract, shared (errors, sse, tools), store ids, the flow's
// StreamFormat, tool-call parsing.
import type { ChatMessage, CompletionRequest, CompletionResponse, FinishReason, Usage } from '../../../contract/completions.js'
import { errorBody, type ErrorCode } from '../../../shared/errors.js'
import { sseEvent } from '../../../shared/sse.js'
import type { ToolChoice } from '../../../shared/tools.js'
import { randomBase62 } from '../../../store/ids.js'
import type { StreamFormat } from '../completion-flow.js'
import { samplingFields } from '../openai-fields.js'
import { HeldText, parseToolCalls, type ToolCall, type ToolReading } from '../tool-calls.js'
import type { MessageObject, MessageParams, MessagesUsage, OutputBlock, StopReason } from './schema.js'

const blocksText = (c: string | { text: string }[] | undefined): string => (c === undefined ? '' : typeof c === 'string' ? c : c.map((b) => b.text).join(''))

/** The chat messages of a request: system first; a user turn's tool results as tool messages, before its text. */
export function toMessages(p: MessageParams): ChatMessage[] {
  const out: (ChatMessage & Record<string, unknown>)[] = p.system !== undefined ? [{ role: 'system', content: blocksText(p.system) }] : []
  for (const m of p.messages) {
    if (typeof m.content === 'string') {
      out.push({ role: m.role, content: m.content })
      continue
    }
    let text = ''
    const calls: unknown[] = []
    for (const b of m.content) {
      if (b.type === 'text') text += b.text
      else if (b.type === 'tool_use') calls.push({ id: b.id, type: 'function', function: { name: b.name, arguments: b.input } })
      else out.push({ role: 'tool', content: blocksText(b.content), tool_call_id: b.tool_use_id })
    }
    if (m.role === 'assistant') out.push({ role: 'assistant', content: text, ...(calls.length ? { tool_calls: calls } : {}) })
    else if (text !== '' || !m.content.some((b) => b.type === 'tool_result')) out.push({ role: 'user', content: text })
  }
  return out
}

const toolChoice = (c: MessageParams['tool_choice']): ToolChoice | undefined =>
  c === undefined ? undefined : c.type === 'any' ? 'required' : c.type === 'tool' ? { type: 'function', function: { name: c.name } } : c.type

/** The node request: messages, max_tokens, stop_sequences as stop strings, tools in chat's shape, output_config.format. */
export function toNodeRequest(p: MessageParams): CompletionRequest {
  const req: CompletionRequest = { model: p.model, messages: toMessages(p), ...samplingFields(p as Record<string, unknown>), max_tokens: p.max_tokens }
  if (p.stop_sequences?.length) req.stop = p.stop_sequences
  const format = p.output_config?.format
  if (format) req.response_format = { type: 'json_schema', json_schema: { name: 'output', schema: format.schema, strict: true } }
  if (p.tools?.length) {
    req.tools = p.tools.map((t) => ({
      type: 'function',
      function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), parameters: t.input_schema, ...(t.strict !== undefined ? { strict: t.strict } : {}) },
    }))
    const choice = toolChoice(p.tool_choice)
    if (choice !== undefined) req.tool_choice = choice
  }
  if (p.stream === true) req.stream = true
  return req
}

export const toolReading = (p: MessageParams): ToolReading | null =>
  p.tools?.length && p.tool_choice?.type !== 'none' ? { names: new Set(p.tools.map((t) => t.name)), parallel: p.tool_choice?.disable_parallel_tool_use !== true } : null

/** Anthropic's usage: cached prompt tokens are `cache_read_input_tokens`, the rest `input_tokens`. */
export const messagesUsage = (u: Usage): MessagesUsage => {
  const cached = u.prompt_tokens_details?.cached_tokens ?? 0
  return { input_tokens: u.prompt_tokens - cached, output_tokens: u.completion_tokens, cache_creation_input_tokens: 0, cache_read_input_tokens: cached }
}

const stopReason = (reason: FinishReason, calls: readonly ToolCall[], stopSequence: string | undefined): StopReason =>
  calls.length && reason === 'stop' ? 'tool_use' : reason === 'length' ? 'max_tokens' : stopSequence !== undefined ? 'stop_sequence' : 'end_turn'

const toolUse = (c: ToolCall): Extract<OutputBlock, { type: 'tool_use' }> => ({
  type: 'tool_use',
  id: `toolu_${randomBase62(24)}`,
  name: c.function.name,
  input: JSON.parse(c.function.arguments) as Record<string, unknown>,
})

/** The JSON answer: the text as a text block (none when only calls were written), the calls as tool_use blocks. */
export function toMessage(id: string, model: string, r: CompletionResponse, tools: ToolReading | null): MessageObject {
  const parsed = tools ? parseToolCalls(r.text, tools.names, tools.parallel) : null
  const calls = parsed?.calls ?? []
  const text = parsed ? parsed.content : r.text
  const content: OutputBlock[] = text !== null && (text !== '' || !calls.length) ? [{ type: 'text', text }] : []
  content.push(...calls.map(toolUse))
  const stop = stopReason(r.finish_reason, calls, r.stop_sequence)
  return { id, type: 'message', role: 'assistant', model, content, stop_reason: stop, stop_sequence: stop === 'stop_sequence' ? r.stop_sequence! : null, usage: messagesUsage(r.usage) }
}

/**
 * Anthropic's events of one streamed message: message_start and a ping; per block content_block_start, its deltas
 * (text_delta, or input_json_delta for a tool call's input), content_block_stop; then message_delta (stop_reason and
 * the usage) and message_stop. A failure ends with an `error` event carrying the spec's error object. With tools,
 * text that may be a call is held back until the answer shows whether it is one.
 */
export class MessageEvents implements StreamFormat {
  private readonly held: HeldText
  /** The text block's index while it is open, or null. */
  private open: number | null = null
  private blocks = 0
  private stop: { reason: StopReason; sequence: string | null } = { reason: 'end_turn', sequence: null }

  constructor(
    private readonly id: string,
    private readonly model: string,
    tools: ToolReading | null,
  ) {
    this.held = new HeldText(tools)
  }

  private event(type: string, fields: Record<string, unknown>): string {
    return sseEvent(type, JSON.stringify({ type, ...fields }))
  }

  start(): string[] {
    const message = { id: this.id, type: 'message', role: 'assistant', model: this.model, content: [], stop_reason: null, stop_sequence: null, usage: messagesUsage({ prompt_tokens: 0, completion_tokens: 0 }) }
    return [this.event('message_start', { message }), this.event('ping', {})]
  }

  /** Text goes out as the text block's deltas, the block opened at the first. */
  private send(text: string): string {
    if (text === '') return ''
    let out = ''
    if (this.open === null) {
      this.open = this.blocks++
      out += this.event('content_block_start', { index: this.open, content_block: { type: 'text', text: '' } })
    }
    return out + this.event('content_block_delta', { index: this.open, delta: { type: 'text_delta', text } })
  }

  content(_index: number, text: string): string {
    return this.send(this.held.push(text))
  }

  finish(_index: number, reason: FinishReason, _fingerprint?: string, stopSequence?: string): string {
    const { rest, calls } = this.held.end()
    let out = this.send(rest)
    if (this.open === null && !calls.length) out += this.event('content_block_start', { index: (this.open = this.blocks++), content_block: { type: 'text', text: '' } })
    if (this.open !== null) out += this.event('content_block_stop', { index: this.open })
    for (const c of calls) {
      const block = toolUse(c)
      const index = this.blocks++
      out += this.event('content_block_start', { index, content_block: { ...block, input: {} } })
      out += this.event('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input) } })
      out += this.event('content_block_stop', { index })
    }
    const r = stopReason(reason, calls, stopSequence)
    this.stop = { reason: r, sequence: r === 'stop_sequence' ? stopSequence! : null }
    return out
  }

  end(u: Usage): string {
    return (
      this.event('message_delta', { delta: { stop_reason: this.stop.reason, stop_sequence: this.stop.sequence }, usage: messagesUsage(u) }) +
      this.event('message_stop', {})
    )
  }

  failed(code: ErrorCode, message: string): string {
    return this.event('error', { error: errorBody(code, message).error })
  }
}
