// A JSON Schema as a grammar (xgrammar's EBNF) of the compact JSON values valid under it, for structured outputs.
// Written here rather than taken from xgrammar's own converter, which approximates (an integer maximum of 120 let
// 128 through, string rules let raw control characters into strings): every keyword this converter takes it
// enforces exactly, and any other constraint is a 422 naming it, never dropped. Annotations (title, description,
// default, examples, $schema, $id, $comment) are not constraints. Pure: no imports but shared errors.
import { OnnxdError } from '../../shared/errors.js'

type Schema = Record<string, unknown> | boolean

const ANNOTATIONS = new Set(['title', 'description', 'default', 'examples', '$schema', '$id', '$comment', 'deprecated', 'readOnly', 'writeOnly'])
const HANDLED = new Set([
  'type', 'enum', 'const', 'properties', 'required', 'additionalProperties', 'items', 'minItems', 'maxItems',
  'minLength', 'maxLength', 'minimum', 'maximum', 'anyOf', '$ref', '$defs', 'definitions',
])

/**
 * A string's characters: printable ASCII but `"` and `\`, or an escape; anything else is written as a \u escape,
 * which is the same JSON string. (xgrammar 0.1.27 lets invalid UTF-8 through any wider class: overlong forms,
 * surrogates, bytes past U+10FFFF; then the text would not even decode.)
 */
const CHAR = String.raw`([ !#-\[\]-~] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F]))`

const BASE = String.raw`
json_value ::= json_object | json_array | json_string | json_number | "true" | "false" | "null"
json_object ::= "{" (json_string ":" json_value ("," json_string ":" json_value)*)? "}"
json_array ::= "[" (json_value ("," json_value)*)? "]"
json_string ::= "\"" json_char* "\""
json_char ::= ${CHAR}
json_number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
`

/** The grammar of any JSON object (OpenAI's json_object), compact. Its root rule is `root`. */
export const JSON_OBJECT_GRAMMAR = `root ::= json_object\n${BASE}`

const literal = (text: string): string => JSON.stringify(text)

/** Schemas nested deeper than this are refused (each level is a stack frame here, and a rule in the grammar). */
const MAX_DEPTH = 64

/** Fraction digits of a bounded number at most: a model cannot write digits forever. */
const FRACTION_DIGITS = 6

/** A JSON value written as an EBNF literal of its compact text. */
const jsonLiteral = (v: unknown): string => literal(JSON.stringify(v))

/** Digits of the integers in [lo, hi] (same number of digits, as strings): the classic range decomposition. */
function digitRange(lo: string, hi: string): string {
  if (lo === hi) return literal(lo)
  if (lo.length === 1) return `[${lo}-${hi}]`
  if (lo[0] === hi[0]) return `${literal(lo[0]!)} ${digitRange(lo.slice(1), hi.slice(1))}`
  const n = lo.length - 1
  const parts: string[] = []
  const lo0 = Number(lo[0])
  const hi0 = Number(hi[0])
  // lo[0] followed by lo's rest up to 9s; the whole digits strictly between; hi[0] followed by 0s up to hi's rest.
  const loAll = /^0*$/.test(lo.slice(1))
  const hiAll = /^9*$/.test(hi.slice(1))
  const from = loAll ? lo0 : lo0 + 1
  const to = hiAll ? hi0 : hi0 - 1
  if (!loAll) parts.push(`${literal(lo[0]!)} ${digitRange(lo.slice(1), '9'.repeat(n))}`)
  if (from <= to) parts.push(`${from === to ? literal(String(from)) : `[${from}-${to}]`} [0-9]{${n}}`)
  if (!hiAll) parts.push(`${literal(hi[0]!)} ${digitRange('0'.repeat(n), hi.slice(1))}`)
  return parts.length === 1 ? parts[0]! : `(${parts.join(' | ')})`
}

/** Non-negative integers in [a, b] (b null: no bound), without leading zeros. */
function naturalRange(a: number, b: number | null): string {
  const parts: string[] = []
  const digits = (x: number): number => String(x).length
  const top = b === null ? digits(a) : digits(b)
  for (let d = digits(a); d <= top; d++) {
    const lo = Math.max(a, d === 1 ? 0 : 10 ** (d - 1))
    const hi = b === null ? 10 ** d - 1 : Math.min(b, 10 ** d - 1)
    if (lo <= hi) parts.push(digitRange(String(lo), String(hi)))
  }
  if (b === null) parts.push(`[1-9] [0-9]{${top},}`)
  return parts.length === 1 ? parts[0]! : `(${parts.join(' | ')})`
}

/** The integers in [lo, hi] (null: unbounded), as JSON writes them. Exported for tests. */
export function integerRange(lo: number | null, hi: number | null): string {
  if (lo !== null && hi !== null && lo > hi) throw new OnnxdError('invalid_value', `minimum ${lo} is above maximum ${hi}`)
  const parts: string[] = []
  // Negative part: -n for n in [max(1, -hi), -lo].
  if (lo === null || lo < 0) {
    const nLo = hi === null || hi >= 0 ? 1 : -hi
    parts.push(`"-" ${naturalRange(nLo, lo === null ? null : -lo)}`)
  }
  if (hi === null || hi >= 0) parts.push(naturalRange(lo === null || lo < 0 ? 0 : lo, hi))
  return parts.length === 1 ? parts[0]! : `(${parts.join(' | ')})`
}

/** Converts one schema into rules; `root` is the value's rule. */
class Converter {
  private readonly rules: string[] = []
  private readonly refs = new Map<string, string>()
  private n = 0

  constructor(
    private readonly top: Record<string, unknown>,
    /** Where the schema came from, for errors: a response_format's schema, or the tools' parameters. */
    private readonly origin: string,
  ) {}

  private fail(path: string, what: string): OnnxdError {
    return new OnnxdError('invalid_value', `\`${this.origin}${path}\`: ${what} cannot be enforced by onnxd's structured outputs`, { param: this.origin.split('.')[0] })
  }

  private rule(body: string, name = `r${this.n++}`): string {
    this.rules.push(`${name} ::= ${body}`)
    return name
  }

  grammar(): string {
    const root = this.value(this.top, '')
    return `root ::= ${root}\n${this.rules.join('\n')}\n${BASE}`
  }

  private depth = 0

  private value(s: Schema, path: string): string {
    if (++this.depth > MAX_DEPTH) throw this.fail(path, `a schema nested more than ${MAX_DEPTH} levels deep`)
    try {
      return this.valueAt(s, path)
    } finally {
      this.depth--
    }
  }

  private valueAt(s: Schema, path: string): string {
    if (s === true) return 'json_value'
    if (s === false || typeof s !== 'object' || s === null || Array.isArray(s)) throw this.fail(path, 'a schema that allows nothing (or is not an object)')
    for (const k of Object.keys(s)) if (!HANDLED.has(k) && !ANNOTATIONS.has(k)) throw this.fail(`${path}.${k}`, `the keyword '${k}'`)
    if (s.$ref !== undefined) {
      if (Object.keys(s).some((k) => k !== '$ref' && !ANNOTATIONS.has(k))) throw this.fail(path, '$ref beside other keywords')
      return this.ref(String(s.$ref), path)
    }
    if (s.enum !== undefined) {
      if (!Array.isArray(s.enum) || s.enum.length === 0) throw this.fail(`${path}.enum`, 'an enum that is not a non-empty array')
      return `(${s.enum.map(jsonLiteral).join(' | ')})`
    }
    if (s.const !== undefined) return jsonLiteral(s.const)
    if (s.anyOf !== undefined) {
      if (!Array.isArray(s.anyOf) || s.anyOf.length === 0) throw this.fail(`${path}.anyOf`, 'an anyOf that is not a non-empty array')
      return `(${(s.anyOf as Schema[]).map((x, i) => this.value(x, `${path}.anyOf[${i}]`)).join(' | ')})`
    }
    const types = s.type === undefined ? null : Array.isArray(s.type) ? (s.type as unknown[]) : [s.type]
    if (types === null) {
      if (Object.keys(s).every((k) => ANNOTATIONS.has(k) || k === '$defs' || k === 'definitions')) return 'json_value'
      throw this.fail(path, 'constraints without a type')
    }
    return `(${types.map((t) => this.typed(s, String(t), path)).join(' | ')})`
  }

  private typed(s: Record<string, unknown>, type: string, path: string): string {
    const int = (k: string): number | null => {
      const v = s[k]
      if (v === undefined) return null
      if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) throw this.fail(`${path}.${k}`, `${k} other than a non-negative integer`)
      return v
    }
    switch (type) {
      case 'null':
        return '"null"'
      case 'boolean':
        return '("true" | "false")'
      case 'string': {
        const min = int('minLength') ?? 0
        const max = int('maxLength')
        const chars = min === 0 && max === null ? 'json_char*' : `json_char{${min},${max ?? ''}}`
        return `("\\"" ${chars} "\\"")`
      }
      case 'integer': {
        const bound = (k: string): number | null => {
          const v = s[k]
          if (v === undefined) return null
          if (typeof v !== 'number' || !Number.isFinite(v)) throw this.fail(`${path}.${k}`, `a ${k} that is not a number`)
          return k === 'minimum' ? Math.ceil(v) : Math.floor(v)
        }
        return integerRange(bound('minimum'), bound('maximum'))
      }
      case 'number': {
        const lo = s.minimum
        const hi = s.maximum
        if (lo === undefined && hi === undefined) return 'json_number'
        if (!(Number.isInteger(lo) && Number.isInteger(hi) && (lo as number) >= 0 && (hi as number) > (lo as number)))
          throw this.fail(path, 'number bounds other than integer minimum >= 0 and maximum above it')
        // [lo, hi): the integer part in [lo, hi - 1] with any fraction; or hi itself.
        return `((${naturalRange(lo as number, (hi as number) - 1)}) ("." [0-9]{1,${FRACTION_DIGITS}})? | ${literal(String(hi))})`
      }
      case 'array': {
        const item = s.items === undefined ? 'json_value' : this.value(s.items as Schema, `${path}.items`)
        const min = int('minItems') ?? 0
        const max = int('maxItems')
        if (max !== null && max < min) throw this.fail(path, 'maxItems below minItems')
        if (max === 0) return '"[" "]"'
        const more = `("," ${item}){${Math.max(0, min - 1)},${max === null ? '' : max - 1}}`
        return min === 0 ? `("[" (${item} ${more})? "]")` : `("[" ${item} ${more} "]")`
      }
      case 'object':
        return this.object(s, path)
      default:
        throw this.fail(`${path}.type`, `the type '${type}'`)
    }
  }

  /** Properties in the schema's order, the required ones always there; nothing else (additional ones are never needed). */
  private object(s: Record<string, unknown>, path: string): string {
    const props = (s.properties ?? {}) as Record<string, Schema>
    const required = new Set(Array.isArray(s.required) ? (s.required as string[]) : [])
    for (const r of required) if (!(r in props)) throw this.fail(`${path}.required`, `a required property '${r}' without a schema in properties`)
    const names = Object.keys(props)
    if (names.length === 0) return s.additionalProperties === false ? '("{" "}")' : 'json_object'
    const kv = names.map((k) => `${literal(JSON.stringify(k))} ":" ${this.value(props[k]!, `${path}.properties.${k}`)}`)
    // rest(i, comma): properties i.. given that one was (comma) or was not written before them.
    const id = this.n++
    const name = (i: number, comma: boolean): string => `o${id}_${i}${comma ? 'c' : ''}`
    for (let i = names.length - 1; i >= 0; i--)
      for (const comma of [false, true]) {
        const next = i + 1 < names.length ? ` ${name(i + 1, true)}` : ''
        const skip = i + 1 < names.length ? name(i + 1, comma) : '""'
        const take = `${comma ? '"," ' : ''}${kv[i]}${next}`
        this.rule(required.has(names[i]!) ? take : `(${take}) | ${skip}`, name(i, comma))
      }
    return `("{" ${name(0, false)} "}")`
  }

  private ref(ref: string, path: string): string {
    const m = /^#\/(\$defs|definitions)\/([^/]+)$/.exec(ref)
    if (!m) throw this.fail(`${path}.$ref`, `a $ref other than #/$defs/NAME (given ${ref.slice(0, 64)})`)
    const key = `${m[1]}/${m[2]}`
    const known = this.refs.get(key)
    if (known) return known
    const defs = this.top[m[1]!] as Record<string, Schema> | undefined
    const def = defs?.[m[2]!]
    if (def === undefined) throw this.fail(`${path}.$ref`, `the missing definition ${ref.slice(0, 64)}`)
    const name = `d${this.n++}`
    this.refs.set(key, name)
    // Defined as a rule, so a recursive definition refers to itself.
    this.rules.push(`${name} ::= ${this.value(def, `.${m[1]}.${m[2]}`)}`)
    return name
  }
}

/**
 * The EBNF grammar (root rule `root`) of compact JSON valid under `schema`, between `wrap`'s two texts when given; a
 * 422 for what it cannot enforce, naming its path under `where` (default: the response_format's schema).
 */
export function jsonSchemaGrammar(schema: Record<string, unknown>, wrap?: [string, string], where = 'response_format.json_schema.schema'): string {
  const g = new Converter(schema, where).grammar()
  if (!wrap) return g
  return g.replace(/^root ::= /, `root ::= ${literal(wrap[0])} value ${literal(wrap[1])}\nvalue ::= `)
}
