// The JSON Schema converter of structured outputs (json-schema-grammar.ts): integer ranges exact on every value near
// their bounds (the EBNF of a range read as a regular expression), and every keyword it cannot enforce refused with
// a 422 naming its path.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { HONOURED_KEYWORDS, integerRange, jsonSchemaGrammar } from '../../../src/engine/generation/json-schema-grammar.js'
import { isOnnxdError } from '../../../src/shared/errors.js'

/** A range's EBNF (quoted digits, classes, {n}, {n,}, groups, |) as an anchored regular expression. */
const asRegex = (ebnf: string): RegExp => new RegExp(`^(?:${ebnf.replace(/"([^"]*)"/g, (_, s: string) => s.replace(/-/g, '\\-')).replace(/\(/g, '(?:').replace(/\s+/g, '')})$`)

describe('integerRange', () => {
  const cases: [number | null, number | null][] = [
    [0, 120], [1, 99999], [0, 0], [7, 7], [5, 10], [95, 1005], [-15, 123], [-1000, -3], [-9, 9], [null, -3], [42, null], [null, null], [0, 9], [10, 99], [100, 999],
  ]
  it.each(cases)('[%s, %s] holds exactly its integers, written as JSON writes them', (lo, hi) => {
    // An unbounded side stops at ±(2^53 - 1): every integer written parses to itself.
    const wide = asRegex(integerRange(lo, hi))
    if (lo === null) expect([wide.test('-9007199254740991'), wide.test('-9007199254740992'), wide.test('-10000000000000000')]).toEqual([true, false, false])
    if (hi === null) expect([wide.test('9007199254740991'), wide.test('9007199254740992'), wide.test('99999999999999999')]).toEqual([true, false, false])
    const re = asRegex(integerRange(lo, hi))
    const from = (lo ?? -2000) - 50
    const to = (hi ?? 2000) + 50
    for (let v = from; v <= to; v++) {
      const inside = (lo === null || v >= lo) && (hi === null || v <= hi)
      expect(re.test(String(v)), `${v} in [${lo}, ${hi}]`).toBe(inside)
    }
    // Never a leading zero or a negative zero.
    for (const bad of ['00', '01', '-0', '007', '+5']) expect(re.test(bad), bad).toBe(false)
  })
})

/** The 422's message for `schema`; fails the test when it is accepted. */
const refused = (schema: Record<string, unknown>): string => {
  try {
    jsonSchemaGrammar(schema)
  } catch (e) {
    if (isOnnxdError(e) && e.code === 'invalid_value') return e.message
    throw e
  }
  throw new Error(`accepted ${JSON.stringify(schema)}`)
}

describe('jsonSchemaGrammar', () => {

  it('refuses, naming the path, every constraint it cannot enforce', () => {
    expect(refused({ type: 'string', pattern: '^(a+)b\\1$' })).toMatch(/`response_format\.json_schema\.schema\.pattern`: the regular expression .* cannot be enforced/)
    expect(refused({ type: 'string', pattern: '\\bword' })).toMatch(/schema\.pattern`: .*assertion/)
    expect(refused({ type: 'object', properties: { d: { type: 'string', format: 'hostname' } } })).toMatch(/schema\.properties\.d\.format`: the format 'hostname'/)
    expect(refused({ type: 'string', pattern: '^[a-z]+$', maxLength: 0, minLength: 0 })).toMatch(/no string onnxd can write/)
    expect(refused({ type: 'string', pattern: '^ab$', minLength: 5 })).toMatch(/no string onnxd can write/)
    expect(refused({ type: 'string', pattern: '^[\\u{10000}-\\u{10FFFF}]$' })).toMatch(/no string onnxd can write/)
    expect(refused({ type: 'array', items: { type: 'integer' }, uniqueItems: true })).toMatch(/uniqueItems/)
    expect(refused({ oneOf: [{ type: 'string' }, { type: 'integer' }] })).toMatch(/schema\.oneOf`: a oneOf whose branches are not told apart/)
    // A discriminator whose values overlap, or that one branch does not require, tells nothing apart.
    const branch = (kind: unknown, req = true): object => ({ type: 'object', properties: { kind, x: { type: 'string' } }, required: req ? ['kind', 'x'] : ['x'] })
    expect(refused({ oneOf: [branch({ enum: ['a', 'b'] }), branch({ const: 'b' })] })).toMatch(/oneOf/)
    expect(refused({ oneOf: [branch({ const: 'a' }), branch({ const: 'b' }, false)] })).toMatch(/oneOf/)
    expect(refused({ type: 'object', properties: { a: { oneOf: [branch({ const: 'a' }), branch({ const: 'a' })] } } })).toMatch(/schema\.properties\.a\.oneOf`/)
    expect(refused({ type: 'number', exclusiveMinimum: 0.5, maximum: 0.5 })).toMatch(/bounds that no number meets/)
    expect(refused({ type: 'number', exclusiveMinimum: 0, exclusiveMaximum: 0.0000001 })).toMatch(/no number of at most 6 fraction digits/)
    expect(refused({ type: 'integer', minimum: 1.2, maximum: 1.8 })).toMatch(/integer bounds that no integer meets/)
    expect(refused({ type: 'object', propertyNames: { pattern: '^a' }, properties: { b: { type: 'string' } } })).toMatch(/propertyNames/)
    expect(refused({ type: 'object', propertyNames: { enum: ['a'] }, properties: { b: { type: 'string' } } })).toMatch(/property 'b' that propertyNames does not allow/)
    expect(refused({ $ref: 'http://example.com/s.json' })).toMatch(/\$ref other than #\/\$defs\/NAME/)
    expect(refused({ type: 'object', properties: {}, required: ['a'], additionalProperties: false })).toMatch(/required property 'a' without a schema/)
    expect(refused({ type: 'array', minItems: 3, maxItems: 2 })).toMatch(/maxItems below minItems/)
    // A hostile depth is a 422, not a stack overflow.
    let deep: Record<string, unknown> = { type: 'integer' }
    for (let i = 0; i < 100_000; i++) deep = { type: 'array', items: deep }
    expect(refused(deep)).toMatch(/nested more than 64 levels deep/)
  })

  it('takes local $defs (recursive ones too), anyOf, nullable types, enums and annotations', () => {
    const g = jsonSchemaGrammar({
      title: 'Tree',
      $defs: { node: { type: 'object', properties: { v: { type: ['integer', 'null'] }, kids: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 2 } }, required: ['v'] } },
      anyOf: [{ $ref: '#/$defs/node' }, { enum: ['none', 1, null] }],
      description: 'a tree',
    })
    expect(g).toMatch(/^root ::= /)
    expect(g).toContain('"\\"none\\""')
  })
})

describe("docs/api.md's structured-output tables", () => {
  const doc = readFileSync(join(import.meta.dirname, '../../../docs/api.md'), 'utf8')
  const section = doc.slice(doc.indexOf('### Structured outputs'), doc.indexOf('### Tool calls'))
  /** The first-column keywords of the table under `header`. */
  const keywords = (header: string): string[] => {
    const rows = section.slice(section.indexOf(header) + header.length).split('\n').slice(2)
    return rows.slice(0, rows.findIndex((l) => !l.startsWith('|'))).map((l) => /^\| `([^`]+)`/.exec(l)![1]!)
  }

  it('lists exactly the keywords the converter honours', () => {
    expect(new Set(keywords('| Keyword | Honoured as |'))).toEqual(HONOURED_KEYWORDS)
  })

  it('lists keywords the converter refuses with a 422 naming them', () => {
    const refusedKeywords = keywords('| Keyword | Why |')
    expect(refusedKeywords.length).toBeGreaterThan(5)
    for (const k of refusedKeywords) expect(refused({ type: 'object', properties: { a: { type: 'string', [k]: {} } } }), k).toContain(`schema.properties.a.${k}\`: the keyword '${k}'`)
  })
})
