// Tool calls read out of an answer's text (tool-calls.ts): Hermes/Qwen blocks and Llama 3.x's bare JSON, only for
// the request's functions, anything else left as text; and how much of a streamed text can go out before it is
// known whether a call begins there.
import { describe, expect, it } from 'vitest'
import { HeldText, parseToolCalls, safeLength } from '../../src/facade/routes/tool-calls.js'

const names = new Set(['get_weather', 'get_time'])

describe('parseToolCalls', () => {
  it('reads Hermes blocks, keeps the text around them, and drops only calls to known functions', () => {
    const text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>{"name":"get_time","arguments":{"zone":"CET"}}</tool_call>'
    const r = parseToolCalls(text, names)
    expect(r.content).toBe('Let me check.')
    expect(r.calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([
      ['get_weather', { city: 'Paris' }],
      ['get_time', { zone: 'CET' }],
    ])
    expect(new Set(r.calls.map((c) => c.id)).size).toBe(2)
    expect(parseToolCalls(text, names, false).calls).toHaveLength(1)
  })

  it('leaves unknown functions, broken JSON and non-object arguments as text', () => {
    for (const t of ['<tool_call>{"name":"rm_rf","arguments":{}}</tool_call>', '<tool_call>{"name":"get_time",</tool_call>', '<tool_call>{"name":"get_time","arguments":[1]}</tool_call>', 'plain words']) {
      expect(parseToolCalls(t, names)).toEqual({ content: t, calls: [] })
    }
  })

  it('reads a Llama 3.x answer that is one bare call, with parameters or arguments', () => {
    for (const t of ['{"name": "get_time", "parameters": {"zone": "UTC"}}', '<|python_tag|>{"name": "get_time", "arguments": {"zone": "UTC"}}']) {
      const r = parseToolCalls(t, names)
      expect(r.content).toBeNull()
      expect(r.calls.map((c) => [c.function.name, c.function.arguments])).toEqual([['get_time', '{"zone":"UTC"}']])
    }
  })
})

describe('safeLength', () => {
  it('sends text up to where a call may begin', () => {
    expect(safeLength('Hello there')).toBe(11)
    expect(safeLength('Hello <tool')).toBe(6)
    expect(safeLength('Hello <tool_call>{"na')).toBe(6)
    expect(safeLength('a < b')).toBe(5)
    // Possibly a bare JSON call: nothing yet.
    expect(safeLength('  {"name"')).toBe(0)
    expect(safeLength('<|python')).toBe(0)
    expect(safeLength('')).toBe(0)
  })
})

describe('HeldText: a streamed answer held while it may be a call', () => {
  it('lets text out up to where a call may begin; at the end, the calls and the text around them not yet out', () => {
    const h = new HeldText({ names, parallel: true })
    expect(h.push('Sure. <tool_')).toBe('Sure. ')
    expect(h.push('call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>')).toBe('')
    expect(h.push(' Done.')).toBe('')
    const { rest, calls } = h.end()
    expect(calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([['get_time', { zone: 'UTC' }]])
    // The text around the call after what went out, and then all the text the client has seen.
    expect(rest).toBe('  Done.')
    expect(h.shown).toBe('Sure.   Done.')
  })

  it('without calls, what was held back goes out at the end; without tools, everything at once', () => {
    const h = new HeldText({ names, parallel: true })
    expect(h.push('{"not": "a call"')).toBe('')
    expect(h.end()).toEqual({ rest: '{"not": "a call"', calls: [] })
    const free = new HeldText(null)
    expect(free.push('<tool_call>{"name": "get_time", "arguments": {}}</tool_call>')).toBe('<tool_call>{"name": "get_time", "arguments": {}}</tool_call>')
    expect(free.end()).toEqual({ rest: '', calls: [] })
  })
})
