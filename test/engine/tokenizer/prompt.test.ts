// Issue #32, part 3: the byte bound counts every byte of text a chat request brings to its template, not only the
// messages' contents: tools, tool calls and their arguments, tool results, names.
import { describe, expect, it } from 'vitest'
import { promptTextBytes } from '../../../src/engine/tokenizer/prompt.js'
import type { Message } from '../../../src/engine/tokenizer/tokenizer.js'
import type { FunctionTool } from '../../../src/shared/tools.js'

const bytes = (s: string): number => Buffer.byteLength(s)

describe('promptTextBytes', () => {
  it('counts a raw prompt as its UTF-8 bytes', () => {
    expect(promptTextBytes({ prompt: 'héllo' })).toBe(6)
  })

  it("counts every message's role and content", () => {
    expect(promptTextBytes({ messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'yo ✓' }] })).toBe(4 + 2 + 9 + 6)
  })

  it("counts the tools' JSON", () => {
    const tools: FunctionTool[] = [{ type: 'function', function: { name: 'f', description: 'd'.repeat(1000), parameters: { type: 'object', properties: { a: { type: 'string' } } } } }]
    expect(promptTextBytes({ messages: [{ role: 'user', content: 'hi' }], tools })).toBe(4 + 2 + bytes(JSON.stringify(tools)))
  })

  it('counts tool calls with their arguments, tool results and names', () => {
    const args = { q: 'x'.repeat(5000), n: [1, 2, 3] }
    const call = { id: 'call_1', type: 'function', function: { name: 'search', arguments: args } }
    const messages = [
      { role: 'user', content: 'find it', name: 'alice' },
      { role: 'assistant', content: '', tool_calls: [call] },
      { role: 'tool', content: 'r'.repeat(300), tool_call_id: 'call_1' },
    ] as unknown as Message[]
    expect(promptTextBytes({ messages })).toBe(4 + 7 + 5 + (9 + 0 + bytes(JSON.stringify([call]))) + (4 + 300 + 6))
    // Arguments of empty arrays cost their JSON, not nothing.
    const empties = [{ role: 'assistant', content: '', tool_calls: [{ ...call, function: { name: 'f', arguments: { a: Array.from({ length: 1000 }, () => []) } } }] }] as unknown as Message[]
    expect(promptTextBytes({ messages: empties })).toBeGreaterThan(3000)
  })
})
