// The bounds a structured output's schema is held to before any grammar is compiled for it. xgrammar's compile time
// grows about with the square of a schema's object properties (1,000 optional ones: 4-7 s on a 2-core host), and its
// memory with its enum text, so a request past one of these is refused at once with a 422 naming the bound, instead
// of holding the grammar thread. The compile itself is bounded in time too (grammar.ts). Pure: shared errors only.
import { OnnxdError } from '../../shared/errors.js'

export const GRAMMAR_BOUNDS = {
  /** UTF-8 bytes of the schema's JSON text (a response_format schema, or every constrained tool's parameters). */
  schemaBytes: 64 * 1024,
  /** Object properties in total, every nested object and definition counted. */
  properties: 256,
  /** enum values and anyOf branches in total. */
  alternatives: 1024,
  /** Schemas nested inside one another. */
  depth: 16,
  /** Functions a tool-call grammar chooses between. */
  tools: 128,
} as const

interface Tally {
  properties: number
  alternatives: number
}

function tally(s: unknown, depth: number, t: Tally, refuse: (what: string, bound: number) => never): void {
  if (typeof s !== 'object' || s === null) return
  if (depth > GRAMMAR_BOUNDS.depth) refuse(`schemas nested more than ${GRAMMAR_BOUNDS.depth} levels deep`, GRAMMAR_BOUNDS.depth)
  if (Array.isArray(s)) {
    for (const x of s) tally(x, depth, t, refuse)
    return
  }
  const o = s as Record<string, unknown>
  for (const [k, v] of Object.entries(o)) {
    if (k === 'enum' && Array.isArray(v)) t.alternatives += v.length
    else if ((k === 'anyOf' || k === 'oneOf') && Array.isArray(v)) {
      t.alternatives += v.length
      tally(v, depth + 1, t, refuse)
    } else if ((k === 'properties' || k === '$defs' || k === 'definitions' || k === 'patternProperties') && typeof v === 'object' && v !== null) {
      const entries = Object.values(v)
      if (k === 'properties') t.properties += entries.length
      for (const x of entries) tally(x, depth + 1, t, refuse)
    } else if (k === 'items' || k === 'additionalProperties' || k === 'prefixItems' || k === 'allOf' || k === 'not' || k === 'propertyNames') {
      // A record's listed names (propertyNames' enum) are written as that many optional properties.
      if (k === 'propertyNames' && typeof v === 'object' && v !== null && Array.isArray((v as { enum?: unknown }).enum)) t.properties += (v as { enum: unknown[] }).enum.length
      tally(v, depth + 1, t, refuse)
    }
    if (t.properties > GRAMMAR_BOUNDS.properties) refuse(`more than ${GRAMMAR_BOUNDS.properties} object properties`, GRAMMAR_BOUNDS.properties)
    if (t.alternatives > GRAMMAR_BOUNDS.alternatives) refuse(`more than ${GRAMMAR_BOUNDS.alternatives} enum values and anyOf branches`, GRAMMAR_BOUNDS.alternatives)
  }
}

/** The request field a path names (`tools[].function.parameters` → `tools`), as an error's `param`. */
export const requestField = (where: string): string => where.split('.')[0]!.replace(/\[.*$/, '')

/**
 * Refuses `schemas` (one response_format schema, or the parameters of the functions a tool-call grammar chooses
 * between) past a bound, with a 422 naming `where` and the bound.
 */
export function checkGrammarBounds(schemas: readonly unknown[], where: string): void {
  const param = requestField(where)
  const refuse = (what: string): never => {
    throw new OnnxdError('invalid_value', `\`${where}\` has ${what}; structured outputs take at most that, to bound the grammar's compile time`, { param })
  }
  if (param === 'tools' && schemas.length > GRAMMAR_BOUNDS.tools) refuse(`more than ${GRAMMAR_BOUNDS.tools} functions`)
  const t: Tally = { properties: 0, alternatives: 0 }
  for (const s of schemas) tally(s, 1, t, refuse)
  // After the walk, which bounds the nesting JSON.stringify recurses through.
  const bytes = schemas.reduce<number>((n, s) => n + Buffer.byteLength(JSON.stringify(s) ?? ''), 0)
  if (bytes > GRAMMAR_BOUNDS.schemaBytes) refuse(`${bytes} bytes of JSON schema, over ${GRAMMAR_BOUNDS.schemaBytes}`)
}
