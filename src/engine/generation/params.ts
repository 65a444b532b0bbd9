// The engine's 422 validation of a request's sampling fields, derived from their one definition
// (shared/sampling.ts), plus what only the engine knows: the context length and the vocabulary. Imports: shared.
import { Value } from '@sinclair/typebox/value'
import { OnnxdError } from '../../shared/errors.js'
import {
  checkFieldCombinations,
  DEFAULT_MAX_TOKENS,
  SAMPLING_FIELD_NAMES,
  SAMPLING_FIELDS,
  TOKEN_ID_KEY,
  type SamplingField,
  type SamplingFieldName,
  type SamplingInput,
  type SamplingParams,
} from '../../shared/sampling.js'

/** The definitions, seen uniformly (each field's own value type does not matter to the checks). */
const FIELDS: Readonly<Record<SamplingFieldName, SamplingField>> = SAMPLING_FIELDS

export interface SamplingLimits {
  /** The model's context length in tokens (prompt plus generated). */
  maxContext: number
  promptTokens: number
  /** The model's vocabulary size: token ids (e.g. stop_token_ids) must be below it. */
  vocab: number
  /** max_tokens when the request gives none (capped by the room left in the context). Default 256. */
  defaultMaxTokens?: number
}

/** The bound keywords of a TypeBox schema that the engine checks. */
interface Bounds {
  type?: string
  minimum?: number
  exclusiveMinimum?: number
  maximum?: number
  exclusiveMaximum?: number
  minLength?: number
  maxItems?: number
  maxProperties?: number
  items?: Bounds
  anyOf?: Bounds[]
  patternProperties?: Record<string, Bounds>
}

function describe(b: Bounds): string {
  const lo = b.exclusiveMinimum !== undefined ? `> ${b.exclusiveMinimum}` : b.minimum !== undefined ? `>= ${b.minimum}` : ''
  const hi = b.exclusiveMaximum !== undefined ? `< ${b.exclusiveMaximum}` : b.maximum !== undefined ? `<= ${b.maximum}` : ''
  return lo && hi ? `${lo} and ${hi}` : lo || hi
}

function invalid(field: string, rule: string, given: unknown): OnnxdError {
  return new OnnxdError('invalid_value', `\`${field}\` must be ${rule}. Given: ${String(given)}`, { param: field })
}

function checkNumber(field: string, v: unknown, b: Bounds, rule: string | undefined): void {
  // The schema already checks types, but this function is also reachable without it (engine API, tests).
  if (typeof v !== 'number' || !Number.isFinite(v)) throw invalid(field, rule ?? 'a finite number', v)
  if (b.type === 'integer' && !Number.isInteger(v)) throw invalid(field, rule ?? 'an integer', v)
  const below = b.exclusiveMinimum !== undefined ? v <= b.exclusiveMinimum : b.minimum !== undefined && v < b.minimum
  const above = b.exclusiveMaximum !== undefined ? v >= b.exclusiveMaximum : b.maximum !== undefined && v > b.maximum
  if (below || above) throw invalid(field, rule ?? describe(b), v)
}

/** A list of strings (or one string): its length, then each string. */
function checkStrings(field: string, v: unknown, list: Bounds): void {
  const items = Array.isArray(v) ? (v as unknown[]) : [v]
  if (list.maxItems !== undefined && items.length > list.maxItems) throw invalid(field, `at most ${list.maxItems} strings`, items.length)
  const minLength = list.items?.minLength ?? 0
  items.forEach((x, i) => {
    if (typeof x !== 'string' || x.length < minLength) {
      throw invalid(field, minLength === 1 ? 'non-empty strings' : `strings of >= ${minLength} characters`, `${JSON.stringify(x)} at index ${i}`)
    }
  })
}

/** A list of token ids (or of other integers): each an integer within its bounds, ids below the vocabulary size. */
function checkIntegers(field: string, v: unknown, list: Bounds, tokenIds: boolean, vocab: number): void {
  const items = Array.isArray(v) ? (v as unknown[]) : [v]
  if (list.maxItems !== undefined && items.length > list.maxItems) throw invalid(field, `at most ${list.maxItems} items`, items.length)
  const lo = list.items?.minimum ?? -Infinity
  const hi = tokenIds ? vocab : Infinity
  items.forEach((x, i) => {
    if (typeof x !== 'number' || !Number.isInteger(x) || x < lo || x >= hi) {
      throw invalid(field, tokenIds ? `integers in [${lo}, ${hi})` : `integers >= ${lo}`, `${String(x)} at index ${i}`)
    }
  })
}

/** A map of token ids (decimal string keys, below the vocabulary size) to numbers within the values' bounds. */
function checkTokenMap(field: string, v: unknown, map: Bounds, vocab: number): void {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid(field, 'an object of token ids to numbers', v)
  const entries = Object.entries(v)
  if (map.maxProperties !== undefined && entries.length > map.maxProperties) throw invalid(field, `at most ${map.maxProperties} entries`, entries.length)
  const values = Object.values(map.patternProperties ?? {})[0] ?? {}
  for (const [k, x] of entries) {
    if (!TOKEN_ID_KEY.test(k) || Number(k) >= vocab) throw invalid(field, `keyed by token ids in [0, ${vocab})`, JSON.stringify(k).slice(0, 24))
    checkNumber(`${field}.${k}`, x, values, undefined)
  }
}

/** Checks one field's bounds as its definition states them; throws `invalid_value` (422) naming it. */
function checkField(field: string, def: SamplingField, v: unknown, vocab: number): void {
  const b = def.schema as Bounds
  if (b.type === 'number' || b.type === 'integer') return checkNumber(field, v, b, def.rule)
  if (b.type === 'object' && def.tokenIds) return checkTokenMap(field, v, b, vocab)
  // Objects of other shapes (response_format): their schema is the whole rule.
  if (b.type === 'object' || b.anyOf?.some((s) => s.type === 'object')) {
    if (!Value.Check(def.schema, v)) throw invalid(field, 'a valid object of its kind (see the API reference)', JSON.stringify(v).slice(0, 64))
    return
  }
  const list = b.type === 'array' ? b : b.anyOf?.find((s) => s.type === 'array')
  if (list?.items?.type === 'string') return checkStrings(field, v, list)
  if (list?.items?.type === 'integer') return checkIntegers(field, v, list, def.tokenIds === true, vocab)
  // Booleans: the schema's type check is all there is.
}

/**
 * Turns a request's raw sampling fields into SamplingParams. Throws `invalid_value` (422) naming the field, the
 * bound and the value given, or `context_length_exceeded` (422) when the prompt plus max_tokens cannot fit.
 */
export function validateSampling(input: SamplingInput, limits: SamplingLimits): SamplingParams {
  for (const k of SAMPLING_FIELD_NAMES) {
    if (input[k] !== undefined) checkField(k, FIELDS[k], input[k], limits.vocab)
  }
  checkFieldCombinations(input, invalid)

  const { maxContext, promptTokens } = limits
  const room = maxContext - promptTokens
  let maxTokens: number
  if (input.max_tokens !== undefined) {
    if (promptTokens + input.max_tokens > maxContext) {
      throw new OnnxdError(
        'context_length_exceeded',
        `prompt tokens + max_tokens must be <= ${maxContext}. Given: ${promptTokens} + ${input.max_tokens}`,
      )
    }
    maxTokens = input.max_tokens
  } else {
    // No max_tokens: generate up to the default, but never past the context; a prompt that fills it cannot run.
    if (room < 1) {
      throw new OnnxdError(
        'context_length_exceeded',
        `prompt tokens must be < ${maxContext} to leave room for at least one generated token. Given: ${promptTokens}`,
      )
    }
    maxTokens = Math.min(limits.defaultMaxTokens ?? DEFAULT_MAX_TOKENS, room)
  }
  const minTokens = input.min_tokens ?? 0
  if (minTokens > maxTokens) {
    // Only reachable with a defaulted max_tokens: min_tokens itself does not fit in the context.
    throw new OnnxdError(
      'context_length_exceeded',
      `prompt tokens + min_tokens must be <= ${maxContext}. Given: ${promptTokens} + ${minTokens}`,
    )
  }

  const params: Record<string, unknown> = {}
  for (const k of SAMPLING_FIELD_NAMES) {
    const def = FIELDS[k]
    const v = input[k]
    params[k] = v === undefined ? def.default : def.normalise ? def.normalise(v) : v
  }
  return { ...(params as SamplingParams), max_tokens: maxTokens, min_tokens: minTokens }
}
