// Tool calls out of an answer's text, for every surface that has tools (chat, responses, messages): Hermes/Qwen's
// <tool_call>{"name": …, "arguments": {…}}</tool_call> blocks (what the embedded model's template asks for, and what a
// required or named tool_choice makes the node write), and Llama 3.x's bare {"name": …, "parameters": {…}} answer.
// Only calls to a function of the request's tools count; anything else stays text. When streaming, text that may be
// the start of a call is held back until it is known. Imports: shared (the tool shapes), store ids.
import { randomBase62 } from '../../store/ids.js'
import { TOOL_CALL_CLOSE, TOOL_CALL_OPEN } from '../../shared/tools.js'

/** A call as OpenAI answers it: `arguments` is the JSON text of an object. */
export interface ToolCall {
  id: string
  type: 'function'
  function: { name: string; arguments: string }
}

/** How a request's answers are read for calls: the callable functions, and whether one answer may hold several. */
export interface ToolReading {
  names: ReadonlySet<string>
  parallel: boolean
}

/** The text around the calls (null when only whitespace), and the calls. */
export interface ParsedAnswer {
  content: string | null
  calls: ToolCall[]
}

const BLOCK = new RegExp(`${TOOL_CALL_OPEN}\\s*([\\s\\S]*?)\\s*${TOOL_CALL_CLOSE.replace('/', '\\/')}`, 'g')
const PYTHON_TAG = '<|python_tag|>'

const callOf = (json: string, names: ReadonlySet<string>): ToolCall | null => {
  try {
    const v = JSON.parse(json) as { name?: unknown; arguments?: unknown; parameters?: unknown }
    const args = v.arguments ?? v.parameters ?? {}
    if (typeof v.name !== 'string' || !names.has(v.name) || typeof args !== 'object' || args === null || Array.isArray(args)) return null
    return { id: `call_${randomBase62(24)}`, type: 'function', function: { name: v.name, arguments: JSON.stringify(args) } }
  } catch {
    return null
  }
}

/** The calls in `text` to functions in `names` (at most one when `parallel` is false), and the text around them. */
export function parseToolCalls(text: string, names: ReadonlySet<string>, parallel = true): ParsedAnswer {
  const calls: ToolCall[] = []
  const rest = text.replace(BLOCK, (whole, json: string) => {
    const c = callOf(json, names)
    if (!c) return whole
    calls.push(c)
    return ''
  })
  if (calls.length === 0) {
    // Llama 3.x: the whole answer is one call.
    const bare = text.trim().replace(PYTHON_TAG, '').trim()
    const c = bare.startsWith('{') ? callOf(bare, names) : null
    if (c) return { content: null, calls: [c] }
  }
  const content = rest.trim() === '' ? null : calls.length ? rest.trim() : rest
  return { content, calls: parallel ? calls : calls.slice(0, 1) }
}

/**
 * How much of a streamed answer's text can go out as content now: up to where a call may begin (a <tool_call>
 * tag, or the start of a tag at the end of the text), nothing while the answer may be a bare JSON call.
 */
export function safeLength(text: string): number {
  const lead = text.trimStart()
  // It may still be a bare call: hold everything until a character says otherwise.
  if (lead === '' || lead.startsWith('{') || lead.startsWith(PYTHON_TAG) || PYTHON_TAG.startsWith(lead)) return 0
  const open = text.indexOf(TOOL_CALL_OPEN)
  if (open >= 0) return open
  for (let k = Math.min(TOOL_CALL_OPEN.length - 1, text.length); k > 0; k--) if (TOOL_CALL_OPEN.startsWith(text.slice(-k))) return text.length - k
  return text.length
}

/**
 * One streamed answer's text where tools may be called (every surface's stream formatter holds one): what can go out
 * as text now, up to where a call may begin, and at the end the calls with the text around them not yet out.
 * Without tools, everything goes out as it comes and there are no calls.
 */
export class HeldText {
  private text = ''
  private sent = 0

  constructor(private readonly tools: ToolReading | null) {}

  /** The text that went out so far (after `end`, with its `rest`: all the text the client sees). */
  get shown(): string {
    return this.text.slice(0, this.sent)
  }

  /** Adds a delta; returns the text that can go out now ('' while it may still be a call). */
  push(delta: string): string {
    this.text += delta
    const safe = this.tools ? safeLength(this.text) : this.text.length
    if (safe <= this.sent) return ''
    const out = this.text.slice(this.sent, safe)
    this.sent = safe
    return out
  }

  /**
   * The answer has ended: the calls in it, and the text still to go out: without calls, all that was held back; with
   * calls, the text around them after what already went out (the text before the first call), '' when only space.
   */
  end(): { rest: string; calls: ToolCall[] } {
    const parsed = this.tools ? parseToolCalls(this.text, this.tools.names, this.tools.parallel) : null
    if (!parsed?.calls.length) {
      const rest = this.text.slice(this.sent)
      this.sent = this.text.length
      return { rest, calls: [] }
    }
    const rest = (parsed.content ?? '').slice(this.shown.trim().length)
    this.text = this.shown + (rest.trim() ? rest : '')
    this.sent = this.text.length
    return { rest: rest.trim() ? rest : '', calls: parsed.calls }
  }
}
