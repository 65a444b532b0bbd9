// The grammar masks on the tiny default model's vocabulary (grammar.ts over xgrammar): a text is walked token by
// token through a matcher, as the engine walks its picks. Strict tools under tool_choice auto: free text passes,
// and a call that begins is held to the function's parameters; a required call is one call and nothing else.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { Grammars } from '../../../src/engine/generation/grammar.js'
import { TextTokenizer } from '../../../src/engine/tokenizer/tokenizer.js'
import type { StructuredOutput } from '../../../src/shared/sampling.js'
import { defaultModelDir } from '../../helpers/fixtures.js'

const dir = defaultModelDir()
const tok = new TextTokenizer(JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')) as object, JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>, null)
const EOS = 2
const grammars = new Grammars(() => tok.vocabulary(tok.vocabSize), [EOS])

const functions = [
  { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string', maxLength: 5 } }, required: ['zone'], additionalProperties: false } },
  { name: 'ping', parameters: null },
]

/** Walks `text`'s tokens (then EOS when `end`): how many were accepted, and whether the walk ended the grammar. */
async function walk(spec: StructuredOutput, text: string, end: boolean): Promise<{ accepted: number; total: number; terminated: boolean }> {
  const m = await grammars.matcher(spec)
  const ids = [...tok.encode(text, false), ...(end ? [EOS] : [])]
  let accepted = 0
  for (const id of ids) {
    await m.next()
    if ((m.bits[id >> 5]! & (1 << (id & 31))) === 0 || !m.accept(id)) break
    accepted++
  }
  // The thread takes the last pick with the next step's mask, and says then whether the value is complete.
  if (!m.terminated) await m.next()
  const terminated = m.terminated
  m.dispose()
  return { accepted, total: ids.length, terminated }
}

describe('tool-call grammars', () => {
  const auto: StructuredOutput = { type: 'tool_call', mode: 'auto', functions }
  const required: StructuredOutput = { type: 'tool_call', mode: 'required', functions }
  const call = '<tool_call>\n{"name":"get_time","arguments":{"zone":"UTC"}}\n</tool_call>'

  it('auto with a strict tool: any text, and calls whose arguments hold, then the end of the answer', async () => {
    for (const text of ['Sure, the time is <b>noon</b>.', `Let me look. ${call} Done.`, '<tool_call>\n{"name":"ping","arguments":{"anything":[1,2]}}\n</tool_call>']) {
      const r = await walk(auto, text, true)
      expect(r.accepted, text).toBe(r.total)
      expect(r.terminated, text).toBe(true)
    }
    // Plain text does not end the grammar by itself: only the end-of-sequence token does.
    expect((await walk(auto, 'Hello there', false)).terminated).toBe(false)
  })

  it('auto: a call that breaks its function’s parameters, or names another function, is cut where it goes wrong', async () => {
    for (const bad of ['<tool_call>\n{"name":"get_time","arguments":{"zone":"Europe/Paris"}}\n</tool_call>', '<tool_call>\n{"name":"rm","arguments":{}}\n</tool_call>', '<tool_call>\n{"name":"get_time","arguments":{}}\n</tool_call>']) {
      const r = await walk(auto, `Ok ${bad}`, true)
      expect(r.accepted, bad).toBeLessThan(r.total)
      expect(r.accepted).toBeGreaterThan(tok.encode('Ok <tool_call>', false).length - 2)
    }
  })

  it('required: exactly one call, ended by itself; text before it is refused', async () => {
    const r = await walk(required, call, false)
    expect(r).toEqual({ accepted: r.total, total: r.total, terminated: true })
    expect((await walk(required, `Hi ${call}`, false)).accepted).toBe(0)
  })
})
