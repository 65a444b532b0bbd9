// The one loader of start-up options, for every process kind (node, facade): a TypeBox schema read once from a
// config-file section, the environment (ONNXD_*) and command-line flags (flags win, then the environment, then the
// file), strings converted strictly by each option's type ("1.5" is not an integer, "5" from a file is not a
// number), every problem listed in one OnnxdError('config') naming the option, its variable and its flag; the
// result deep-frozen. Imports: shared errors, typebox.
import type { Static, TObject, TSchema } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import { clip, OnnxdError } from './errors.js'

export type Env = Record<string, string | undefined>

export interface OptionsSpec<S extends TObject> {
  /** What the options configure, for the error's first line ("invalid node configuration"). */
  name: string
  schema: S
  /** The environment variable of each option; its flag is derived from the name (see optionFlags). */
  env: Record<keyof Static<S>, string>
  /** Options whose strings take another form than their schema's type (lists, JSON): parse, or throw saying what is expected. */
  parse?: Partial<Record<keyof Static<S>, (raw: string) => unknown>>
  /** Applied to an option's merged value before it is checked (e.g. trailing slashes off URLs). */
  normalize?: Partial<Record<keyof Static<S>, (value: unknown) => unknown>>
  /** Rules across options. Runs on every load, also when some options are invalid, so each rule checks its inputs. */
  check?: (value: Readonly<Record<string, unknown>>, env: Env) => string[]
  /**
   * Options that hold secrets: they have no flag (a command line is visible to every user of the host), and a
   * problem names them without their flag and never quotes their value.
   */
  secrets?: readonly (keyof Static<S> & string)[]
}

/** The command-line flag of each option, without dashes (`device-id` for deviceId). */
export function optionFlags<K extends string>(env: Record<K, string>): Record<K, string> {
  return Object.fromEntries(Object.keys(env).map((k) => [k, k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)])) as Record<K, string>
}

/** parseArgs values named like the options (`--device-id`, `--data-dir`) as loader input; others are ignored. */
export function flagInput<K extends string>(flags: Record<K, string>, values: Record<string, unknown>): Partial<Record<K, unknown>> {
  const out: Partial<Record<K, unknown>> = {}
  for (const [field, flag] of Object.entries(flags) as [K, string][]) {
    if (values[flag] !== undefined) out[field] = values[flag]
  }
  return out
}

/** An option as problems name it: `workers (ONNXD_WORKERS, --workers)`; a secret without its flag (it has none). */
export function optionName(env: Record<string, string>, field: string, secrets: readonly string[] = []): string {
  const name = env[field]
  if (name === undefined) return field
  return secrets.includes(field) ? `${field} (${name})` : `${field} (${name}, --${optionFlags({ [field]: name })[field]})`
}

const INTEGER = /^[+-]?\d+$/
const BOOLEAN: Record<string, boolean> = { true: true, false: false, '1': true, '0': false, yes: true, no: false, on: true, off: false }

/** A string as the schema's type asks; a string that is not one is returned as given, for the check to name. */
function convert(schema: TSchema, raw: string): unknown {
  const s = raw.trim()
  switch (schema.type) {
    case 'integer':
      return INTEGER.test(s) ? Number(s) : raw
    case 'number':
      return s !== '' && Number.isFinite(Number(s)) ? Number(s) : raw
    case 'boolean':
      return BOOLEAN[s.toLowerCase()] ?? raw
    default:
      return s // strings, and unions of string literals
  }
}

/** What a schema asks for, in words ("must be an integer", "must be >= 1", "must be one of cpu, cuda"); null: no words. */
function requirement(schema: TSchema, value: unknown): string | null {
  if (Array.isArray(schema.anyOf)) return `must be one of ${(schema.anyOf as TSchema[]).map((s) => String(s.const)).join(', ')}`
  switch (schema.type) {
    case 'integer':
    case 'number': {
      const kind = schema.type === 'integer' ? 'an integer' : 'a number'
      if (typeof value !== 'number' || (schema.type === 'integer' && !Number.isInteger(value))) return `must be ${kind}`
      if (typeof schema.minimum === 'number' && value < schema.minimum) return `must be >= ${schema.minimum}`
      if (typeof schema.maximum === 'number' && value > schema.maximum) return `must be <= ${schema.maximum}`
      return null
    }
    case 'boolean':
      return 'must be true or false (also 1/0, yes/no, on/off)'
    case 'string':
      if (typeof value !== 'string') return 'must be a string'
      if (typeof schema.minLength === 'number' && value.length < schema.minLength) {
        return schema.minLength === 1 ? 'must not be empty' : `must be at least ${schema.minLength} characters`
      }
      if (typeof schema.maxLength === 'number' && value.length > schema.maxLength) return `must be at most ${schema.maxLength} characters`
      if (typeof schema.pattern === 'string') return `must be ${typeof schema.description === 'string' ? schema.description : `a string matching ${schema.pattern}`}`
      return null
    case 'array':
      return Array.isArray(value) ? null : 'must be a list'
    case 'object':
      return typeof value === 'object' && value !== null && !Array.isArray(value) ? null : 'must be an object'
  }
  return null
}

/**
 * Reads options: `file` (the config file's section) under the environment under `flags`, `defaults` under all
 * three (for defaults that depend on the machine). Lists every problem in one `OnnxdError('config')`, whose
 * `details.problems` has one line per problem. Never changes its arguments; the result is deep-frozen.
 */
export function loadOptions<S extends TObject>(
  spec: OptionsSpec<S>,
  env: Env,
  flags: Partial<Record<keyof Static<S>, unknown>> = {},
  file: Record<string, unknown> = {},
  defaults: Partial<Record<keyof Static<S>, unknown>> = {},
): Static<S> {
  type Field = keyof Static<S> & string
  const problems: string[] = []
  const envNames = spec.env as Record<string, string>
  const flagNames = optionFlags(envNames)
  const secrets: readonly string[] = spec.secrets ?? []
  const given = (field: string, v: unknown): string => (secrets.includes(field) ? '(a secret: not shown)' : JSON.stringify(v))
  const fromString = (field: Field, raw: string, source: string): unknown => {
    const parse = spec.parse?.[field]
    const schema = spec.schema.properties[field]
    if (!parse) return schema ? convert(schema, raw) : raw
    try {
      return parse(raw)
    } catch (e) {
      problems.push(`${field} (${source}): ${(e as Error).message}. Given: ${given(field, clip(raw, 80))}`)
      return undefined
    }
  }

  // Copies: TypeBox's Value.Default writes into its input, and the caller's objects stay theirs.
  const raw: Record<string, unknown> = structuredClone({ ...defaults, ...file })
  for (const [field, name] of Object.entries(envNames) as [Field, string][]) {
    const v = env[name]
    if (v !== undefined && v !== '') raw[field] = fromString(field, v, name)
  }
  for (const [field, v] of Object.entries(flags) as [Field, unknown][]) {
    if (v === undefined) continue
    raw[field] = typeof v === 'string' && field in envNames ? fromString(field, v, `--${flagNames[field]}`) : structuredClone(v)
  }
  for (const [field, normalize] of Object.entries(spec.normalize ?? {}) as [Field, (v: unknown) => unknown][]) {
    if (raw[field] !== undefined) raw[field] = normalize(raw[field])
  }

  const value = Value.Default(spec.schema, raw) as Record<string, unknown>
  const seen = new Set<string>()
  for (const e of Value.Errors(spec.schema, value)) {
    if (seen.has(e.path)) continue // one problem per place: a union or a missing value says it all once
    seen.add(e.path)
    const [, field = '', ...rest] = e.path.split('/')
    if (!(field in envNames)) {
      problems.push(`${field || '(root)'}: unknown option`)
      continue
    }
    const what = requirement(e.schema, e.value) ?? e.message
    problems.push(`${optionName(envNames, field, secrets)}${rest.length > 0 ? ` at ${e.path}` : ''}: ${what}. Given: ${given(field, e.value)}`)
  }
  problems.push(...(spec.check?.(value, env) ?? []))
  if (problems.length > 0) {
    const unique = [...new Set(problems)]
    throw new OnnxdError('config', `invalid ${spec.name} configuration:\n  - ${unique.join('\n  - ')}`, { problems: unique })
  }
  return deepFreeze(value as Static<S>)
}

function deepFreeze<T>(v: T): T {
  if (v && typeof v === 'object') {
    for (const x of Object.values(v)) deepFreeze(x)
    Object.freeze(v)
  }
  return v
}
