// The grammar masks on the tiny default model's vocabulary (grammar.ts over xgrammar): a text is walked token by
// token through a matcher, as the engine walks its picks. Strict tools under tool_choice auto: free text passes,
// and a call that begins is held to the function's parameters; a required call is one call and nothing else.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { Grammars } from '../../../src/engine/generation/grammar.js'
import { TextTokenizer } from '../../../src/engine/tokenizer/tokenizer.js'
import type { StructuredOutput } from '../../../src/shared/sampling.js'
import { tinyPlainModelDir } from '../../helpers/fixtures.js'

const dir = tinyPlainModelDir()
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

describe('JSON Schema grammars hold exactly the values valid under their schema', () => {
  /** Whether the grammar of `schema` takes `text` whole and ends there, as the value of an object's property. */
  const takes = async (schema: Record<string, unknown>, text: string): Promise<boolean> => {
    const r = await walk({ type: 'json_schema', schema: { type: 'object', properties: { v: schema }, required: ['v'] } }, `{"v":${text}}`, false)
    return r.accepted === r.total && r.terminated
  }
  const branch = (kind: string, field: string, type: string): object => ({ type: 'object', properties: { kind: { type: 'string', const: kind }, [field]: { type } }, required: ['kind', field], additionalProperties: false })
  const cases: [string, Record<string, unknown>, string[], string[]][] = [
    // Issue #34: an unbounded number wrote {"x":2653143E81250995126550191209}, which parses to Infinity.
    ['unbounded number: finite doubles', { type: 'number' }, ['1.5', '-0', '12e99', '1234567890123456', '0.1234567890123456'], ['2653143E81250995126550191209', '1e100', '12345678901234567', '1.12345678901234567']],
    ['unbounded integer: within ±(2^53 - 1)', { type: 'integer' }, ['9007199254740991', '-9007199254740991', '0'], ['9007199254740992', '-9007199254740992', '1.0', '1e3']],
    ['number bounds that are not integers', { type: 'number', minimum: 0.5, maximum: 2.5 }, ['0.5', '2.5', '1', '2.499999', '0.500001'], ['0.4', '2.500001', '3', '0.4999999']],
    ['exclusive bounds', { type: 'number', exclusiveMinimum: 0, exclusiveMaximum: 1 }, ['0.5', '0.000001', '0.999999'], ['0', '1', '0.0', '1.0', '-0.1']],
    ['negative bounds', { type: 'number', minimum: -1.25, maximum: -0.5 }, ['-1.25', '-0.5', '-1', '-0.75'], ['-0.4', '-1.26', '0', '1']],
    ['one bound', { type: 'number', minimum: -3 }, ['-3', '0', '100.5'], ['-3.1', '-4']],
    ['draft 4 exclusive integer bound', { type: 'integer', minimum: 3, exclusiveMinimum: true, maximum: 5 }, ['4', '5'], ['3', '6']],
    ['anchored pattern', { type: 'string', pattern: '^[a-z]+$' }, ['"abc"'], ['""', '"aB"']],
    ['unanchored pattern: a search, escapes as JSON writes them', { type: 'string', pattern: 'x' }, ['"x"', '"\\"x\\\\"', '"ax\\u00e9"'], ['"abc"', '"a"']],
    ['any character is one JSON string character', { type: 'string', pattern: '^a.b$' }, ['"a\\"b"', '"a-b"', '"a\\u0001b"'], ['"a"b"', '"a\nb"', '"ab"', '"a\\u000ab"']],
    ['leading lookaheads (a password rule)', { type: 'string', pattern: '^(?=.*\\d)(?!.*zz)[a-z\\d]{4,8}$' }, ['"ab1c"', '"1234"'], ['"abcd"', '"ab1"', '"azz1"']],
    ["negative lookaheads (zod 3's email pattern)", { type: 'string', pattern: "^(?!\\.)(?!.*\\.\\.)([A-Za-z0-9_'+\\-\\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$" }, ['"a.b@x.io"'], ['".a@x.io"', '"a..b@x.io"']],
    ['pattern within lengths', { type: 'string', pattern: '^[ab]*$', minLength: 2, maxLength: 3 }, ['"ab"', '"bab"'], ['"a"', '"abab"']],
    ['format email', { type: 'string', format: 'email' }, ['"a.b@x.io"', '"first+tag@mail.example.com"'], ['"a@b"', '"@x.io"', '"a..b@x.io"']],
    ['format uuid', { type: 'string', format: 'uuid' }, ['"123e4567-e89b-12d3-a456-426614174000"'], ['"123"', '"123e4567e89b12d3a456426614174000"']],
    ['format date', { type: 'string', format: 'date' }, ['"2024-02-28"', '"1999-12-31"'], ['"2024-02-30"', '"2024-13-01"', '"24-01-01"']],
    ['format date-time', { type: 'string', format: 'date-time' }, ['"2024-02-28T10:00:00Z"', '"2024-02-28T10:00:00.5+01:00"'], ['"2024-02-30T10:00:00Z"', '"2024-02-28T10:00:00"']],
    ['format uri', { type: 'string', format: 'uri' }, ['"https://example.com/a/b?q=1#top"', '"http://localhost:8080"'], ['"example.com"', '"https://"']],
    ['record (z.record)', { type: 'object', propertyNames: { type: 'string' }, additionalProperties: { type: 'number' } }, ['{}', '{"a":1,"b":2}'], ['{"a":"x"}', '{"a":1,}']],
    ['record with a key pattern', { type: 'object', propertyNames: { pattern: '^[a-z]{2}$' }, additionalProperties: { type: 'boolean' } }, ['{"ab":true}'], ['{"abc":true}', '{"A1":true}']],
    ['record over an enum (every key required)', { type: 'object', propertyNames: { type: 'string', enum: ['a', 'b'] }, additionalProperties: { type: 'boolean' }, required: ['a', 'b'] }, ['{"a":true,"b":false}'], ['{"a":true}', '{"c":true}']],
    ['oneOf told apart by a const (z.discriminatedUnion)', { oneOf: [branch('a', 'x', 'string'), branch('b', 'y', 'number')] }, ['{"kind":"a","x":"s"}', '{"kind":"b","y":1}'], ['{"kind":"a","y":1}', '{"kind":"c","x":"s"}']],
  ]
  it.each(cases)('%s', async (_, schema, good, bad) => {
    for (const t of good) expect(await takes(schema, t), t).toBe(true)
    for (const t of bad) expect(await takes(schema, t), t).toBe(false)
  })
})

describe('where a value at the root ends', () => {
  const schema = (s: Record<string, unknown>): StructuredOutput => ({ type: 'json_schema', schema: s })
  const allows = (bits: Int32Array, id: number): boolean => ((bits[id >> 5] ?? 0) & (1 << (id & 31))) !== 0
  const digit = (d: string): number => tok.encode(d, false)[0]!

  it('a number goes on past its first digit, its EOS allowed wherever it is a number, and ends with the EOS', async () => {
    for (const [s, text] of [[{ type: 'number' }, '42.5'], [{ type: 'integer' }, '-17'], [{ type: 'number', minimum: 0, maximum: 100 }, '99.25'], [{ enum: [1, 12] }, '1']] as const) {
      // The whole number is taken, and is not complete without the EOS: the model may still write digits.
      expect(await walk(schema(s), text, false), text).toEqual({ accepted: tok.encode(text, false).length, total: tok.encode(text, false).length, terminated: false })
      expect(await walk(schema(s), text, true), text).toMatchObject({ terminated: true })
    }
    const m = await grammars.matcher(schema({ type: 'number' }))
    expect(allows(m.bits, EOS)).toBe(false) // nothing written yet
    expect(m.accept(digit('4'))).toBe(true)
    await m.next()
    expect(m.terminated).toBe(false)
    // `4` is a number and so are `42` and `4.5`: the EOS and the tokens that continue it.
    for (const id of [EOS, digit('2'), digit('.')]) expect(allows(m.bits, id), tok.decode([id])).toBe(true)
    expect(m.accept(digit('.'))).toBe(true)
    await m.next()
    // `4.` is not a number yet.
    expect(allows(m.bits, EOS)).toBe(false)
    m.dispose()
  })

  it('an object, a string, a boolean or null ends with its last character, without an EOS', async () => {
    for (const [s, text] of [[{ type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] }, '{"a":7}'], [{ type: 'string' }, '"hi"'], [{ type: 'boolean' }, 'true'], [{ type: 'null' }, 'null'], [{ type: 'array', items: { type: 'number' } }, '[1,2]']] as const) {
      const r = await walk(schema(s), text, false)
      expect(r, text).toEqual({ accepted: r.total, total: r.total, terminated: true })
    }
    expect((await walk({ type: 'json_object' }, '{}', false)).terminated).toBe(true)
  })
})
