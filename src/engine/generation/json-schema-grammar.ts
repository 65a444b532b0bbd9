// A JSON Schema as a grammar (xgrammar's EBNF) of the compact JSON values valid under it, for structured outputs.
// Written here rather than taken from xgrammar's own converter, which approximates (an integer maximum of 120 let
// 128 through, string rules let raw control characters into strings): every keyword this converter takes it
// enforces exactly, and any other constraint is a 422 naming it, never dropped. Annotations (title, description,
// default, examples, $schema, $id, $comment) are not constraints. Every number written parses to a finite double and
// every integer to itself (±(2^53 - 1) unless the schema bounds it further); a oneOf is taken where its branches
// exclude each other through a required const or enum property; strings under a pattern or format go through
// regex-grammar.ts. Pure: no imports but shared errors and regex-grammar.ts.
import { OnnxdError } from '../../shared/errors.js'
import { alphabetRange, RegexRefusal, stringTextGrammar } from './regex-grammar.js'

type Schema = Record<string, unknown> | boolean

const ANNOTATIONS = new Set(['title', 'description', 'default', 'examples', '$schema', '$id', '$comment', 'deprecated', 'readOnly', 'writeOnly'])
/** The keywords the converter enforces (docs/api.md lists them, held to this by its test). */
export const HONOURED_KEYWORDS: ReadonlySet<string> = new Set([
  'type', 'enum', 'const', 'properties', 'required', 'additionalProperties', 'items', 'minItems', 'maxItems',
  'minLength', 'maxLength', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'anyOf', 'oneOf', '$ref',
  '$defs', 'definitions', 'propertyNames', 'pattern', 'format',
])

/**
 * A string's characters: printable ASCII but `"` and `\`, or an escape; anything else is written as a \u escape,
 * which is the same JSON string. (xgrammar 0.1.27 lets invalid UTF-8 through any wider class: overlong forms,
 * surrogates, bytes past U+10FFFF; then the text would not even decode.)
 */
const CHAR = String.raw`([ !#-\[\]-~] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F]))`

const literal = (text: string): string => JSON.stringify(text)

/** Schemas nested deeper than this are refused (each level is a stack frame here, and a rule in the grammar). */
const MAX_DEPTH = 64

/** Fraction digits of a bounded number at most: a model cannot write digits forever. */
const FRACTION_DIGITS = 6

/** A JSON value written as an EBNF literal of its compact text. */
const jsonLiteral = (v: unknown): string => literal(JSON.stringify(v))

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER)
const big = (a: bigint, b: bigint): bigint => (a > b ? a : b)
const small = (a: bigint, b: bigint): bigint => (a < b ? a : b)

/** Digits of the integers in [lo, hi] (same number of digits, as strings). */
const digitRange = (lo: string, hi: string): string => alphabetRange(lo, hi, '0123456789')

/** Non-negative integers in [a, b], without leading zeros. */
function naturalRange(a: bigint, b: bigint): string {
  const parts: string[] = []
  for (let d = String(a).length; d <= String(b).length; d++) {
    const lo = big(a, d === 1 ? 0n : 10n ** BigInt(d - 1))
    const hi = small(b, 10n ** BigInt(d) - 1n)
    if (lo <= hi) parts.push(digitRange(String(lo), String(hi)))
  }
  return parts.length === 1 ? parts[0]! : `(${parts.join(' | ')})`
}

/** Numbers of `f` fraction digits (none: an integer) whose value times 10^f is an integer in [a, b], 0 <= a <= b. */
function decimalRange(a: bigint, b: bigint, f: number): string {
  if (f === 0) return naturalRange(a, b)
  const unit = 10n ** BigInt(f)
  const pad = (x: bigint): string => String(x).padStart(f, '0')
  const [ia, fa, ib, fb] = [a / unit, a % unit, b / unit, b % unit]
  const whole = (i: bigint): string => literal(String(i))
  if (ia === ib) return `${whole(ia)} "." ${digitRange(pad(fa), pad(fb))}`
  const parts = [`${whole(ia)} "." ${digitRange(pad(fa), '9'.repeat(f))}`]
  if (ia + 1n <= ib - 1n) parts.push(`${naturalRange(ia + 1n, ib - 1n)} "." [0-9]{${f}}`)
  parts.push(`${whole(ib)} "." ${digitRange('0'.repeat(f), pad(fb))}`)
  return `(${parts.join(' | ')})`
}

/** Signed numbers of `f` fraction digits whose value times 10^f is in [a, b] (a <= b); never a negative zero. */
function signedRange(a: bigint, b: bigint, f: number): string {
  const parts: string[] = []
  if (a < 0n) parts.push(`"-" ${decimalRange(b < 0n ? -b : 1n, -a, f)}`)
  if (b >= 0n) parts.push(decimalRange(big(a, 0n), b, f))
  return parts.length === 1 ? parts[0]! : `(${parts.join(' | ')})`
}

/** The integers in [lo, hi] as JSON writes them; an unbounded side stops at ±(2^53 - 1). Exported for tests. */
export function integerRange(lo: number | null, hi: number | null): string {
  if (lo !== null && hi !== null && lo > hi) throw new OnnxdError('invalid_value', `minimum ${lo} is above maximum ${hi}`)
  return signedRange(lo === null ? -MAX_SAFE : BigInt(lo), hi === null ? MAX_SAFE : BigInt(hi), 0)
}

/** `v` times 10^f, rounded down, and whether that was exact (from v's shortest decimal text: no binary error). */
function scaled(v: number, f: number): { floor: bigint; exact: boolean } {
  const m = /^(-?)(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(v))!
  const digits = BigInt(m[2]! + (m[3] ?? ''))
  const e = Number(m[4] ?? 0) - (m[3]?.length ?? 0) + f
  const unit = 10n ** BigInt(Math.abs(e))
  const q = e >= 0 ? digits * unit : digits / unit
  const exact = e >= 0 || digits % unit === 0n
  return { floor: m[1] === '-' ? (exact ? -q : -q - 1n) : q, exact }
}

/** A bound of a number, and whether the bound itself is excluded. */
interface Bound {
  v: number
  strict: boolean
}

/**
 * Numbers in the interval, with at most FRACTION_DIGITS fraction digits and no exponent: per count of fraction digits,
 * the scaled integers between the bounds. An unbounded side stops at ±(2^53 - 1). Null when no such number exists.
 */
function numberRange(lo: Bound | null, hi: Bound | null): string | null {
  const parts: string[] = []
  for (let f = 0; f <= FRACTION_DIGITS; f++) {
    const unit = 10n ** BigInt(f)
    let a = -MAX_SAFE * unit
    let b = MAX_SAFE * unit
    if (lo) {
      const { floor, exact } = scaled(lo.v, f)
      a = exact && !lo.strict ? floor : floor + 1n
    }
    if (hi) {
      const { floor, exact } = scaled(hi.v, f)
      b = exact && hi.strict ? floor - 1n : floor
    }
    if (a <= b) parts.push(signedRange(a, b, f))
  }
  return parts.length === 0 ? null : `(${parts.join(' | ')})`
}

/**
 * Any JSON value, compact. A number has at most 16 integer and 16 fraction digits and an exponent of at most 2 digits,
 * so it parses to a finite double (below 1e115); an integer stays within ±(2^53 - 1), where doubles are exact.
 */
const BASE = String.raw`
json_value ::= json_object | json_array | json_string | json_number | "true" | "false" | "null"
json_object ::= "{" (json_string ":" json_value ("," json_string ":" json_value)*)? "}"
json_array ::= "[" (json_value ("," json_value)*)? "]"
json_string ::= "\"" json_char* "\""
json_char ::= ${CHAR}
json_number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?
`

/** Any integer within ±(2^53 - 1): a rule of its own, added only to grammars that use it (it is large to compile). */
const INTEGER_RULE = `json_integer ::= ${integerRange(null, null)}`

/** The grammar of any JSON object (OpenAI's json_object), compact. Its root rule is `root`. */
export const JSON_OBJECT_GRAMMAR = `root ::= json_object\n${BASE}`

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
    const integer = this.rules.some((r) => /\bjson_integer\b/.test(r)) || /\bjson_integer\b/.test(root) ? `${INTEGER_RULE}\n` : ''
    return `root ::= ${root}\n${this.rules.join('\n')}\n${integer}${BASE}`
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
    for (const k of Object.keys(s)) if (!HONOURED_KEYWORDS.has(k) && !ANNOTATIONS.has(k)) throw this.fail(`${path}.${k}`, `the keyword '${k}'`)
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
    if (s.oneOf !== undefined) {
      if (!Array.isArray(s.oneOf) || s.oneOf.length === 0) throw this.fail(`${path}.oneOf`, 'a oneOf that is not a non-empty array')
      this.exclusive(s.oneOf as Schema[], `${path}.oneOf`)
      return `(${(s.oneOf as Schema[]).map((x, i) => this.value(x, `${path}.oneOf[${i}]`)).join(' | ')})`
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
      case 'string':
        return this.string(s, int('minLength') ?? 0, int('maxLength'), path)
      case 'integer': {
        const { lo, hi } = this.bounds(s, path)
        const a = lo === null ? null : lo.strict && Number.isInteger(lo.v) ? lo.v + 1 : Math.ceil(lo.v)
        const b = hi === null ? null : hi.strict && Number.isInteger(hi.v) ? hi.v - 1 : Math.floor(hi.v)
        if (a === null && b === null) return 'json_integer'
        if (a !== null && b !== null && a > b) throw this.fail(path, 'integer bounds that no integer meets')
        // An unbounded side stops at ±(2^53 - 1); so does a bounded one past it, unless the range lies wholly beyond.
        const safe = Number.MAX_SAFE_INTEGER
        const clamp = (a ?? -safe) <= safe && (b ?? safe) >= -safe
        return integerRange(a === null ? null : clamp ? Math.max(a, -safe) : a, b === null ? null : clamp ? Math.min(b, safe) : b)
      }
      case 'number': {
        const { lo, hi } = this.bounds(s, path)
        if (lo === null && hi === null) return 'json_number'
        const g = numberRange(lo, hi)
        if (g === null) throw this.fail(path, `number bounds that no number of at most ${FRACTION_DIGITS} fraction digits meets`)
        return g
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

  /** minimum/maximum and their exclusive forms (numbers, or draft 4's booleans), the tighter of each side. */
  private bounds(s: Record<string, unknown>, path: string): { lo: Bound | null; hi: Bound | null } {
    const num = (k: string): number | null => {
      const v = s[k]
      if (v === undefined || typeof v === 'boolean') return null
      if (typeof v !== 'number' || !Number.isFinite(v)) throw this.fail(`${path}.${k}`, `a ${k} that is not a number`)
      return v
    }
    const side = (plain: string, strict: string, tighter: (a: number, b: number) => boolean): Bound | null => {
      const p = num(plain)
      const x = num(strict)
      const a = p === null ? null : { v: p, strict: s[strict] === true }
      const b = x === null ? null : { v: x, strict: true }
      if (a === null || b === null) return a ?? b
      return tighter(b.v, a.v) || b.v === a.v ? b : a
    }
    const lo = side('minimum', 'exclusiveMinimum', (x, y) => x > y)
    const hi = side('maximum', 'exclusiveMaximum', (x, y) => x < y)
    if (lo && hi && (lo.v > hi.v || (lo.v === hi.v && (lo.strict || hi.strict)))) throw this.fail(path, 'bounds that no number meets')
    return { lo, hi }
  }

  /** A string: any characters within its lengths, or through the automaton of its pattern, format and lengths. */
  private string(s: Record<string, unknown>, min: number, max: number | null, path: string): string {
    if (max !== null && max < min) throw this.fail(path, 'maxLength below minLength')
    if (s.pattern === undefined && s.format === undefined) {
      const chars = min === 0 && max === null ? 'json_char*' : `json_char{${min},${max ?? ''}}`
      return `("\\"" ${chars} "\\"")`
    }
    for (const k of ['pattern', 'format']) if (s[k] !== undefined && typeof s[k] !== 'string') throw this.fail(`${path}.${k}`, `a ${k} that is not a string`)
    try {
      const start = stringTextGrammar({ pattern: s.pattern as string | undefined, format: s.format as string | undefined, minLength: min, maxLength: max }, `s${this.n++}`, (name, body) => {
        this.rules.push(`${name} ::= ${body}`)
      })
      return `("\\"" ${start} "\\"")`
    } catch (e) {
      if (e instanceof RegexRefusal) throw this.fail(`${path}.${e.keyword}`, e.message)
      throw e
    }
  }

  /** A schema behind its local $refs (a chain of them at most MAX_DEPTH long). */
  private resolve(s: Schema): Schema {
    for (let i = 0; i < MAX_DEPTH && typeof s === 'object' && typeof s.$ref === 'string'; i++) {
      const m = /^#\/(\$defs|definitions)\/([^/]+)$/.exec(s.$ref)
      const def = m ? (this.top[m[1]!] as Record<string, Schema> | undefined)?.[m[2]!] : undefined
      if (def === undefined) return s
      s = def
    }
    return s
  }

  /**
   * A oneOf is a choice of its branches only where no value can match two of them: each branch an object that
   * requires one same property, given by a const or an enum, their values disjoint (as z.discriminatedUnion writes).
   */
  private exclusive(branches: Schema[], path: string): void {
    if (branches.length === 1) return
    const objects = branches.map((b) => this.resolve(b))
    const valuesOf = (o: Schema, name: string): string[] | null => {
      if (typeof o !== 'object' || o.type !== 'object' || !Array.isArray(o.required) || !o.required.includes(name)) return null
      const p = this.resolve(((o.properties ?? {}) as Record<string, Schema>)[name] ?? true)
      if (typeof p !== 'object') return null
      if (p.const !== undefined) return [JSON.stringify(p.const)]
      return Array.isArray(p.enum) && p.enum.length > 0 ? p.enum.map((v) => JSON.stringify(v)) : null
    }
    const first = objects[0]
    const names = typeof first === 'object' ? Object.keys((first.properties ?? {}) as object) : []
    for (const name of names) {
      const sets = objects.map((o) => valuesOf(o, name))
      if (sets.some((v) => v === null)) continue
      const seen = new Set<string>()
      let disjoint = true
      for (const v of sets.flat()) disjoint &&= !seen.has(v!) && Boolean(seen.add(v!))
      if (disjoint) return
    }
    throw this.fail(path, 'a oneOf whose branches are not told apart by a required property with a const or enum of its own (what z.discriminatedUnion writes)')
  }

  /** The names a propertyNames schema allows, when it lists them (an enum or a const of strings); else null. */
  private namesOf(pn: unknown): string[] | null {
    if (typeof pn !== 'object' || pn === null) return null
    const o = pn as Record<string, unknown>
    const list = o.const !== undefined ? [o.const] : Array.isArray(o.enum) ? o.enum : null
    return list && list.every((v) => typeof v === 'string') ? (list as string[]) : null
  }

  /**
   * Properties in the schema's order, the required ones always there, declared ones only where there are some
   * (additional ones are never needed); required names outside properties take additionalProperties' schema. Without
   * declared properties, a record: the names propertyNames lists as optional properties, or entries whose keys are
   * strings under propertyNames and whose values are under additionalProperties.
   */
  private object(s: Record<string, unknown>, path: string): string {
    const declared = (s.properties ?? {}) as Record<string, Schema>
    const props: Record<string, Schema> = { ...declared }
    const where: Record<string, string> = Object.fromEntries(Object.keys(declared).map((k) => [k, `${path}.properties.${k}`]))
    const extra: Schema | null = s.additionalProperties === false ? null : s.additionalProperties === undefined ? true : (s.additionalProperties as Schema)
    const required = new Set(Array.isArray(s.required) ? (s.required as string[]) : [])
    const listed = this.namesOf(s.propertyNames)
    const pnRule = s.propertyNames === undefined ? null : this.value({ type: 'string', ...(s.propertyNames as Record<string, unknown>) }, `${path}.propertyNames`)
    if (listed) for (const k of [...Object.keys(declared), ...required]) if (!listed.includes(k)) throw this.fail(`${path}.propertyNames`, `a property '${k}' that propertyNames does not allow`)
    const anyName = typeof s.propertyNames !== 'object' || Object.entries(s.propertyNames as object).every(([k, v]) => ANNOTATIONS.has(k) || (k === 'type' && v === 'string'))
    if (!anyName && !listed && (Object.keys(declared).length > 0 || required.size > 0)) throw this.fail(`${path}.propertyNames`, 'propertyNames other than an enum beside named properties')
    for (const r of required) {
      if (r in props) continue
      if (extra === null) throw this.fail(`${path}.required`, `a required property '${r}' without a schema in properties`)
      props[r] = extra
      where[r] = `${path}.additionalProperties`
    }
    if (Object.keys(declared).length === 0 && listed && extra !== null)
      for (const k of listed) if (!(k in props)) [props[k], where[k]] = [extra, `${path}.additionalProperties`]
    const names = Object.keys(props)
    if (names.length === 0) {
      if (extra === null || (listed && listed.length === 0)) return '("{" "}")'
      if (extra === true && anyName) return 'json_object'
      const value = extra === true ? 'json_value' : this.value(extra, `${path}.additionalProperties`)
      const entry = this.rule(`${anyName ? 'json_string' : pnRule} ":" ${value}`)
      return `("{" (${entry} ("," ${entry})*)? "}")`
    }
    const kv = names.map((k) => `${literal(JSON.stringify(k))} ":" ${this.value(props[k]!, where[k]!)}`)
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
