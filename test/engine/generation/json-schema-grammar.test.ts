// The JSON Schema converter of structured outputs (json-schema-grammar.ts): integer ranges exact on every value near
// their bounds (the EBNF of a range read as a regular expression), and every keyword it cannot enforce refused with
// a 422 naming its path.
import { describe, expect, it } from 'vitest'
import { integerRange, jsonSchemaGrammar } from '../../../src/engine/generation/json-schema-grammar.js'
import { isOnnxdError } from '../../../src/shared/errors.js'

/** A range's EBNF (quoted digits, classes, {n}, {n,}, groups, |) as an anchored regular expression. */
const asRegex = (ebnf: string): RegExp => new RegExp(`^(?:${ebnf.replace(/"([^"]*)"/g, (_, s: string) => s.replace(/-/g, '\\-')).replace(/\(/g, '(?:').replace(/\s+/g, '')})$`)

describe('integerRange', () => {
  const cases: [number | null, number | null][] = [
    [0, 120], [1, 99999], [0, 0], [7, 7], [5, 10], [95, 1005], [-15, 123], [-1000, -3], [-9, 9], [null, -3], [42, null], [null, null], [0, 9], [10, 99], [100, 999],
  ]
  it.each(cases)('[%s, %s] holds exactly its integers, written as JSON writes them', (lo, hi) => {
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

describe('jsonSchemaGrammar', () => {
  const refused = (schema: Record<string, unknown>): string => {
    try {
      jsonSchemaGrammar(schema)
    } catch (e) {
      if (isOnnxdError(e) && e.code === 'invalid_value') return e.message
      throw e
    }
    throw new Error(`accepted ${JSON.stringify(schema)}`)
  }

  it('refuses, naming the path, every constraint it cannot enforce', () => {
    expect(refused({ type: 'string', pattern: '^a+$' })).toMatch(/`response_format\.json_schema\.schema\.pattern`: the keyword 'pattern' cannot be enforced/)
    expect(refused({ type: 'object', properties: { d: { type: 'string', format: 'date-time' } } })).toMatch(/schema\.properties\.d\.format/)
    expect(refused({ type: 'array', items: { type: 'integer' }, uniqueItems: true })).toMatch(/uniqueItems/)
    expect(refused({ oneOf: [{ type: 'string' }, { type: 'integer' }] })).toMatch(/oneOf/)
    expect(refused({ type: 'number', minimum: 0.5, maximum: 2 })).toMatch(/number bounds/)
    expect(refused({ type: 'integer', exclusiveMinimum: 0 })).toMatch(/exclusiveMinimum/)
    expect(refused({ $ref: 'http://example.com/s.json' })).toMatch(/\$ref other than #\/\$defs\/NAME/)
    expect(refused({ type: 'object', properties: {}, required: ['a'] })).toMatch(/required property 'a' without a schema/)
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
