// Sampling parameters of one sequence: their defaults and the 422 validation of a request's raw fields. Imports: shared.
import { OnnxdError } from '../../shared/errors.js'

/** Validated, defaulted sampling parameters. Disabled filters hold their neutral value (top_k 0, top_p 1, min_p 0). */
export interface SamplingParams {
  /** 0 means greedy (so does anything below SAMPLING_EPS). */
  readonly temperature: number
  readonly top_p: number
  /** 0 = off. The request's -1 is normalised to 0. */
  readonly top_k: number
  readonly min_p: number
  /** undefined: the sampler draws a random seed (and reports it). */
  readonly seed: number | undefined
  readonly presence_penalty: number
  readonly frequency_penalty: number
  readonly repetition_penalty: number
  readonly max_tokens: number
  readonly min_tokens: number
  readonly ignore_eos: boolean
  readonly stop: readonly string[]
}

/**
 * The request's sampling fields, named as in the node contract's `SamplingFields`. Declared here rather than
 * imported because the engine may import only `shared` (STYLE §2); the schema has already checked the shapes.
 */
export interface SamplingInput {
  max_tokens?: number
  temperature?: number
  top_p?: number
  top_k?: number
  min_p?: number
  seed?: number
  stop?: string | string[]
  presence_penalty?: number
  frequency_penalty?: number
  repetition_penalty?: number
  ignore_eos?: boolean
  min_tokens?: number
}

export interface SamplingLimits {
  /** The model's context length in tokens (prompt plus generated). */
  maxContext: number
  promptTokens: number
  /** max_tokens when the request gives none (capped by the room left in the context). Default 256. */
  defaultMaxTokens?: number
}

export const DEFAULT_MAX_TOKENS = 256
/** OpenAI's limit on stop sequences. */
export const MAX_STOP_STRINGS = 4

export const DEFAULT_SAMPLING: SamplingParams = Object.freeze({
  temperature: 1,
  top_p: 1,
  top_k: 0,
  min_p: 0,
  seed: undefined,
  presence_penalty: 0,
  frequency_penalty: 0,
  repetition_penalty: 1,
  max_tokens: DEFAULT_MAX_TOKENS,
  min_tokens: 0,
  ignore_eos: false,
  stop: Object.freeze([]) as readonly string[],
})

/** Defaults overridden by `p`, without validation: for tests and internal callers that build params directly. */
export function samplingParams(p: Partial<SamplingParams> = {}): SamplingParams {
  return { ...DEFAULT_SAMPLING, ...p }
}

type Bound = { min: number; minExclusive?: boolean; max?: number; maxExclusive?: boolean }

function describe(b: Bound): string {
  const lo = `${b.minExclusive ? '>' : '>='} ${b.min}`
  return b.max === undefined ? lo : `${lo} and ${b.maxExclusive ? '<' : '<='} ${b.max}`
}

function invalid(field: string, rule: string, given: unknown): OnnxdError {
  return new OnnxdError('invalid_value', `\`${field}\` must be ${rule}. Given: ${String(given)}`, { param: field })
}

function checkNumber(field: string, v: number | undefined, b: Bound, integer = false): void {
  if (v === undefined) return
  // The schema already checks types, but this function is also reachable without it (engine API, tests).
  if (typeof v !== 'number' || !Number.isFinite(v)) throw invalid(field, 'a finite number', v)
  if (integer && !Number.isInteger(v)) throw invalid(field, 'an integer', v)
  const below = b.minExclusive ? v <= b.min : v < b.min
  const above = b.max !== undefined && (b.maxExclusive ? v >= b.max : v > b.max)
  if (below || above) throw invalid(field, describe(b), v)
}

/**
 * Turns a request's raw sampling fields into SamplingParams. Throws `invalid_value` (422) naming the field, the
 * bound and the value given, or `context_length_exceeded` (422) when the prompt plus max_tokens cannot fit.
 * Ranges follow OpenAI and vLLM.
 */
export function validateSampling(input: SamplingInput, limits: SamplingLimits): SamplingParams {
  checkNumber('temperature', input.temperature, { min: 0, max: 2 })
  checkNumber('top_p', input.top_p, { min: 0, minExclusive: true, max: 1 })
  if (input.top_k !== undefined) {
    const k = input.top_k
    if (typeof k !== 'number' || !Number.isInteger(k) || k < -1) throw invalid('top_k', '-1 or 0 (disabled) or >= 1', k)
  }
  checkNumber('min_p', input.min_p, { min: 0, max: 1 })
  checkNumber('presence_penalty', input.presence_penalty, { min: -2, max: 2 })
  checkNumber('frequency_penalty', input.frequency_penalty, { min: -2, max: 2 })
  checkNumber('repetition_penalty', input.repetition_penalty, { min: 0, minExclusive: true, max: 2 })
  checkNumber('max_tokens', input.max_tokens, { min: 1 }, true)
  checkNumber('min_tokens', input.min_tokens, { min: 0 }, true)
  if (input.seed !== undefined && (typeof input.seed !== 'number' || !Number.isSafeInteger(input.seed))) {
    throw invalid('seed', 'a safe integer', input.seed)
  }
  if (input.max_tokens !== undefined && input.min_tokens !== undefined && input.min_tokens > input.max_tokens) {
    throw invalid('min_tokens', `>= 0 and <= max_tokens (${input.max_tokens})`, input.min_tokens)
  }

  const stop = input.stop === undefined ? [] : typeof input.stop === 'string' ? [input.stop] : input.stop
  if (stop.length > MAX_STOP_STRINGS) throw invalid('stop', `at most ${MAX_STOP_STRINGS} strings`, stop.length)
  stop.forEach((s, i) => {
    if (typeof s !== 'string' || s.length === 0) throw invalid('stop', 'non-empty strings', `${JSON.stringify(s)} at index ${i}`)
  })

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

  return {
    temperature: input.temperature ?? DEFAULT_SAMPLING.temperature,
    top_p: input.top_p ?? DEFAULT_SAMPLING.top_p,
    top_k: input.top_k === undefined || input.top_k === -1 ? 0 : input.top_k,
    min_p: input.min_p ?? DEFAULT_SAMPLING.min_p,
    seed: input.seed,
    presence_penalty: input.presence_penalty ?? DEFAULT_SAMPLING.presence_penalty,
    frequency_penalty: input.frequency_penalty ?? DEFAULT_SAMPLING.frequency_penalty,
    repetition_penalty: input.repetition_penalty ?? DEFAULT_SAMPLING.repetition_penalty,
    max_tokens: maxTokens,
    min_tokens: minTokens,
    ignore_eos: input.ignore_eos ?? false,
    stop: [...stop],
  }
}
