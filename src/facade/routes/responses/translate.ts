// OpenAI Responses shapes ⇄ the node's internal contract: input items (and a previous response's conversation) as
// chat messages, the node request, the `response` object with its output items (a message, function calls parsed out
// of the text), and the typed stream events. Imports: contract, shared (errors, sse, tools), store ids, the flow's
// StreamFormat, tool-call parsing.
import type { ChatMessage, CompletionRequest, CompletionResponse, FinishReason, Usage } from '../../../contract/completions.js'
import { errorBody, errorType, type ErrorCode } from '../../../shared/errors.js'
import { sseEvent } from '../../../shared/sse.js'
import type { FunctionTool, ToolChoice } from '../../../shared/tools.js'
import { randomBase62 } from '../../../store/ids.js'
import type { StreamFormat } from '../completion-flow.js'
import { samplingFields } from '../openai-fields.js'
import { HeldText, parseToolCalls, type ToolReading } from '../tool-calls.js'
import type { InputItem, OutputFunctionCall, OutputItem, OutputMessage, OutputText, ResponseObject, ResponseParams, ResponseUsage } from './schema.js'

/** An item as kept: every input item with its id and status, text content as parts. */
export type KeptItem =
  | { type: 'message'; id: string; role: 'user' | 'assistant' | 'system' | 'developer'; content: { type: 'input_text' | 'output_text'; text: string }[]; status: 'completed' }
  | { type: 'function_call'; id: string; call_id: string; name: string; arguments: string; status: 'completed' }
  | { type: 'function_call_output'; id: string; call_id: string; output: string; status: 'completed' }
  | OutputItem

const partsText = (c: string | { text: string }[]): string => (typeof c === 'string' ? c : c.map((p) => p.text).join(''))

/** The ids of the earlier output items the input refers to (`item_reference`). */
export const referencedIds = (input: ResponseParams['input']): string[] =>
  typeof input === 'string' ? [] : input.flatMap((item) => (item.type === 'item_reference' ? [item.id] : []))

/** The request's input as kept items (ids given where the client gave none; a reference as the item it names), in order. */
export function keptItems(input: ResponseParams['input'], referenced: ReadonlyMap<string, KeptItem>): KeptItem[] {
  const items: InputItem[] = typeof input === 'string' ? [{ role: 'user', content: input }] : input
  return items.map((item): KeptItem => {
    if (item.type === 'item_reference') return referenced.get(item.id)!
    if (item.type === 'function_call') return { type: 'function_call', id: item.id ?? `fc_${randomBase62(24)}`, call_id: item.call_id, name: item.name, arguments: item.arguments, status: 'completed' }
    if (item.type === 'function_call_output') return { type: 'function_call_output', id: item.id ?? `fco_${randomBase62(24)}`, call_id: item.call_id, output: partsText(item.output), status: 'completed' }
    const part = item.role === 'assistant' ? 'output_text' : 'input_text'
    return { type: 'message', id: item.id ?? `msg_${randomBase62(24)}`, role: item.role, content: [{ type: part, text: partsText(item.content) }], status: 'completed' }
  })
}

/** The chat messages of a conversation: instructions as the system message, calls on the assistant turn that made them. */
export function toMessages(instructions: string | undefined, items: readonly KeptItem[]): ChatMessage[] {
  const out: (ChatMessage & Record<string, unknown>)[] = instructions !== undefined ? [{ role: 'system', content: instructions }] : []
  for (const item of items) {
    if (item.type === 'function_call') {
      const call = { id: item.call_id, type: 'function', function: { name: item.name, arguments: JSON.parse(item.arguments) as unknown } }
      const last = out.at(-1)
      if (last?.role === 'assistant') last.tool_calls = [...((last.tool_calls as unknown[] | undefined) ?? []), call]
      else out.push({ role: 'assistant', content: '', tool_calls: [call] })
    } else if (item.type === 'function_call_output') {
      out.push({ role: 'tool', content: item.output, tool_call_id: item.call_id })
    } else {
      out.push({ role: item.role === 'developer' ? 'system' : item.role, content: partsText(item.content) })
    }
  }
  return out
}

/** Chat's shape of the request's function tools and tool_choice, as the node's contract carries them. */
const functionTools = (p: ResponseParams): FunctionTool[] =>
  (p.tools ?? []).map((t) => ({
    type: 'function',
    function: {
      name: t.name,
      ...(typeof t.description === 'string' ? { description: t.description } : {}),
      ...(t.parameters ? { parameters: t.parameters } : {}),
      ...(typeof t.strict === 'boolean' ? { strict: t.strict } : {}),
    },
  }))
const toolChoice = (c: ResponseParams['tool_choice']): ToolChoice | undefined => (typeof c === 'object' ? { type: 'function', function: { name: c.name } } : c)

/** The node request of a response: the conversation's messages, max_output_tokens, text.format, tools. */
export function toNodeRequest(p: ResponseParams, messages: ChatMessage[]): CompletionRequest {
  const req: CompletionRequest = { model: p.model, messages, ...samplingFields(p as Record<string, unknown>) }
  if (p.max_output_tokens !== undefined) req.max_tokens = p.max_output_tokens
  const f = p.text?.format
  if (f?.type === 'json_object') req.response_format = { type: 'json_object' }
  if (f?.type === 'json_schema') {
    req.response_format = {
      type: 'json_schema',
      json_schema: { name: f.name, schema: f.schema, ...(f.description !== undefined ? { description: f.description } : {}), ...(f.strict != null ? { strict: f.strict } : {}) },
    }
  }
  if (p.tools?.length) {
    req.tools = functionTools(p)
    const choice = toolChoice(p.tool_choice)
    if (choice !== undefined) req.tool_choice = choice
  }
  if (p.stream === true) req.stream = true
  return req
}

export const toolReading = (p: ResponseParams): ToolReading | null =>
  p.tools?.length && p.tool_choice !== 'none' ? { names: new Set(p.tools.map((t) => t.name)), parallel: p.parallel_tool_calls !== false } : null

/** The response as it starts: in progress, no output, the request's settings echoed. */
export function responseShell(id: string, createdAt: number, p: ResponseParams): ResponseObject {
  return {
    id,
    object: 'response',
    created_at: createdAt,
    status: 'in_progress',
    error: null,
    incomplete_details: null,
    instructions: p.instructions ?? null,
    max_output_tokens: p.max_output_tokens ?? null,
    model: p.model,
    output: [],
    parallel_tool_calls: p.parallel_tool_calls !== false,
    previous_response_id: p.previous_response_id ?? null,
    reasoning: { effort: null, summary: null },
    store: p.store !== false,
    temperature: p.temperature ?? 1,
    text: { format: p.text?.format ?? { type: 'text' } },
    tool_choice: p.tool_choice ?? 'auto',
    tools: p.tools ?? [],
    top_p: p.top_p ?? 1,
    truncation: 'disabled',
    usage: null,
    metadata: p.metadata ?? {},
    background: false,
  }
}

export const responseUsage = (u: Usage): ResponseUsage => ({
  input_tokens: u.prompt_tokens,
  input_tokens_details: { cached_tokens: u.prompt_tokens_details?.cached_tokens ?? 0 },
  output_tokens: u.completion_tokens,
  output_tokens_details: { reasoning_tokens: 0 },
  total_tokens: u.prompt_tokens + u.completion_tokens,
})

/**
 * The id of a response's output item: its kind, the response's id and its place in the output, so that an
 * `item_reference` to it (what the AI SDK sends for an earlier turn's items when responses are kept) finds it.
 */
export const outputItemId = (kind: 'msg' | 'fc', responseId: string, index: number): string => `${kind}_${responseId.slice('resp_'.length)}_${index}`

/** The response id and output index an output item id names (see outputItemId), or null. */
export function itemOrigin(itemId: string): { responseId: string; index: number } | null {
  const m = /^(?:msg|fc)_([A-Za-z0-9]{1,64})_(\d{1,4})$/.exec(itemId)
  return m ? { responseId: `resp_${m[1]}`, index: Number(m[2]) } : null
}

const itemStatus = (reason: FinishReason): 'completed' | 'incomplete' => (reason === 'length' ? 'incomplete' : 'completed')
const outputText = (text: string): OutputText => ({ type: 'output_text', text, annotations: [], logprobs: [] })
const functionCall = (c: { id: string; function: { name: string; arguments: string } }, id: string): OutputFunctionCall => ({
  type: 'function_call',
  id,
  call_id: c.id,
  name: c.function.name,
  arguments: c.function.arguments,
  status: 'completed',
})

/** A finished response: its output, status (`incomplete` when max_output_tokens cut it) and usage. */
export function finished(shell: ResponseObject, output: OutputItem[], reason: FinishReason, u: Usage): ResponseObject {
  return {
    ...shell,
    status: itemStatus(reason),
    incomplete_details: reason === 'length' ? { reason: 'max_output_tokens' } : null,
    output,
    usage: responseUsage(u),
  }
}

/** The JSON answer: the text as one message, or the calls in it (and the text around them) as items. */
export function toResponse(shell: ResponseObject, r: CompletionResponse, tools: ToolReading | null): ResponseObject {
  const parsed = tools ? parseToolCalls(r.text, tools.names, tools.parallel) : null
  const output: OutputItem[] = []
  const content = parsed ? parsed.content : r.text
  if (content !== null || !parsed?.calls.length) {
    output.push({ type: 'message', id: outputItemId('msg', shell.id, 0), status: itemStatus(r.finish_reason), role: 'assistant', content: [outputText(content ?? '')] })
  }
  for (const c of parsed?.calls ?? []) output.push(functionCall(c, outputItemId('fc', shell.id, output.length)))
  return finished(shell, output, r.finish_reason, r.usage)
}

/**
 * The typed events of one streamed response, in OpenAI's order: response.created and response.in_progress; the
 * message item (output_item.added, content_part.added, output_text.delta per delta, output_text.done,
 * content_part.done, output_item.done); each function call as an item (added, function_call_arguments.delta and
 * .done, done); then response.completed (response.incomplete when max_output_tokens cut it), after `keep` saved it.
 * A failure ends with an `error` event (the spec's error object) and response.failed. With tools, text that may be a
 * call is held back until the answer shows whether it is one.
 */
export class ResponseEvents implements StreamFormat {
  private seq = 0
  private readonly held: HeldText
  private message: OutputMessage | null = null
  private readonly output: OutputItem[] = []
  private reason: FinishReason = 'stop'

  constructor(
    private readonly shell: ResponseObject,
    tools: ToolReading | null,
    /** Saves the finished response (store: true) before the client hears it is complete. */
    private readonly keep: (r: ResponseObject) => Promise<void>,
  ) {
    this.held = new HeldText(tools)
  }

  private event(type: string, fields: Record<string, unknown>): string {
    return sseEvent(type, JSON.stringify({ type, sequence_number: this.seq++, ...fields }))
  }

  start(): string[] {
    return [this.event('response.created', { response: this.shell }), this.event('response.in_progress', { response: this.shell })]
  }

  /** The message item, opened at its first text. */
  private open(): string {
    if (this.message) return ''
    this.message = { type: 'message', id: outputItemId('msg', this.shell.id, this.output.length), status: 'in_progress', role: 'assistant', content: [] }
    this.output.push(this.message)
    const at = { item_id: this.message.id, output_index: this.output.length - 1 }
    return this.event('response.output_item.added', { output_index: at.output_index, item: this.message }) + this.event('response.content_part.added', { ...at, content_index: 0, part: outputText('') })
  }

  private delta(text: string): string {
    const m = this.message!
    return this.event('response.output_text.delta', { item_id: m.id, output_index: this.output.indexOf(m), content_index: 0, delta: text, logprobs: [] })
  }

  /** Text of the answer goes out as the message's deltas, the message opened at the first. */
  private send(text: string): string {
    return text === '' ? '' : this.open() + this.delta(text)
  }

  content(_index: number, text: string): string {
    return this.send(this.held.push(text))
  }

  finish(_index: number, reason: FinishReason): string {
    this.reason = reason
    const { rest, calls } = this.held.end()
    let out = this.send(rest)
    const shown = this.held.shown
    if (!this.message && !calls.length) out += this.open()
    if (this.message) {
      const m = this.message
      const at = { item_id: m.id, output_index: this.output.indexOf(m), content_index: 0 }
      m.content = [outputText(shown)]
      m.status = itemStatus(reason)
      out += this.event('response.output_text.done', { ...at, text: shown, logprobs: [] })
      out += this.event('response.content_part.done', { ...at, part: m.content[0] })
      out += this.event('response.output_item.done', { output_index: at.output_index, item: m })
    }
    for (const c of calls) {
      const item = functionCall(c, outputItemId('fc', this.shell.id, this.output.length))
      this.output.push(item)
      const output_index = this.output.length - 1
      out += this.event('response.output_item.added', { output_index, item: { ...item, arguments: '', status: 'in_progress' } })
      out += this.event('response.function_call_arguments.delta', { item_id: item.id, output_index, delta: item.arguments })
      out += this.event('response.function_call_arguments.done', { item_id: item.id, output_index, name: item.name, arguments: item.arguments })
      out += this.event('response.output_item.done', { output_index, item })
    }
    return out
  }

  async end(u: Usage): Promise<string> {
    const response = finished(this.shell, this.output, this.reason, u)
    await this.keep(response)
    return this.event(response.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response })
  }

  failed(code: ErrorCode, message: string, u: Usage): string {
    const response: ResponseObject = { ...this.shell, status: 'failed', error: { code: errorType(code), message }, output: this.output, usage: responseUsage(u) }
    return this.event('error', { error: errorBody(code, message).error }) + this.event('response.failed', { response })
  }
}
