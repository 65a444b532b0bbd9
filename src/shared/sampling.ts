// The sampling fields of a completion request, each defined once: its type and bounds (a TypeBox schema), its
// default, its OpenAI names and what it does. Everything else is derived from SAMPLING_FIELDS: the facade's
// request schema (type and bounds, 422), the node contract's schema (type only, 400), the facade-to-node
// translation, and the engine's validation and defaults (bounds, 422). Adding a sampling parameter means one entry
// here, and the code that honours it (the sampler or the sequence). Imports: typebox. Plain data: the engine uses it.
import { Type, type Static, type TOptional, type TSchema } from '@sinclair/typebox'

export interface SamplingField<S extends TSchema = TSchema, V = unknown, A extends readonly string[] = readonly string[]> {
  /** Type and bounds. The facade checks both (422); the node's contract the type (400); the engine the bounds (422). */
  readonly schema: S
  /** What a sequence runs with when the request leaves the field out. */
  readonly default: V
  /** Other names of the field in an OpenAI request, after its own (the first one given wins). */
  readonly aliases: A
  /** How the engine's 422 words the bound, when it is not a plain range (e.g. top_k's -1). */
  readonly rule?: string
  /** Token ids: each must also be below the model's vocabulary size (422 otherwise). */
  readonly tokenIds?: true
  /** From the request's value to the sequence's (e.g. one stop string to a list). Default: the value itself. */
  normalise?(v: Static<S>): V
  /** What the field does, for readers of this table (the README documents the same). */
  readonly doc: string
}

/** One entry of the table. Only `schema`, `default` and `doc` are required; `V` is the sequence's value type. */
function field<S extends TSchema, V = Static<S>, const A extends readonly string[] = readonly []>(def: {
  schema: S
  default: V
  aliases?: A
  rule?: string
  tokenIds?: true
  normalise?: (v: Static<S>) => V
  doc: string
}): SamplingField<S, V, A> {
  return { ...def, aliases: def.aliases ?? ([] as unknown as A) }
}

/** max_tokens when a request gives none (capped by the room left in the context). */
export const DEFAULT_MAX_TOKENS = 256
/** OpenAI's limit on stop sequences. */
export const MAX_STOP_STRINGS = 4

const Penalty = Type.Number({ minimum: -2, maximum: 2 })
const NO_STRINGS: readonly string[] = Object.freeze([])
const NO_IDS: readonly number[] = Object.freeze([])

/** The sampling fields, in the order they are checked (the first bad one is reported). Ranges follow OpenAI and vLLM. */
export const SAMPLING_FIELDS = {
  max_tokens: field({
    schema: Type.Integer({ minimum: 1 }),
    default: DEFAULT_MAX_TOKENS,
    aliases: ['max_completion_tokens'],
    doc: 'Tokens to generate at most. Without it: up to the default, never past the context.',
  }),
  temperature: field({
    schema: Type.Number({ minimum: 0, maximum: 2 }),
    default: 1,
    doc: 'Divides the logits; 0 (anything below SAMPLING_EPS) is greedy decoding.',
  }),
  top_p: field({
    schema: Type.Number({ exclusiveMinimum: 0, maximum: 1 }),
    default: 1,
    doc: 'Nucleus sampling: draw from the smallest set of tokens whose probability reaches top_p. 1 is off.',
  }),
  top_k: field({
    schema: Type.Integer({ minimum: -1 }),
    default: 0,
    rule: '-1 or 0 (disabled) or >= 1',
    normalise: (k: number) => (k === -1 ? 0 : k),
    doc: 'Draw from the k most likely tokens. 0 (or -1, as in vLLM) is off.',
  }),
  min_p: field({
    schema: Type.Number({ minimum: 0, maximum: 1 }),
    default: 0,
    doc: 'Drop tokens less likely than min_p times the most likely one. 0 is off.',
  }),
  seed: field({
    schema: Type.Integer({ minimum: -Number.MAX_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER }),
    default: undefined as number | undefined,
    rule: 'a safe integer',
    doc: 'Seeds the sequence\'s PRNG: the same seed and request give the same tokens. Without it, a random seed.',
  }),
  stop: field({
    schema: Type.Union([
      Type.String({ minLength: 1 }),
      Type.Array(Type.String({ minLength: 1 }), { maxItems: MAX_STOP_STRINGS }),
    ]),
    default: NO_STRINGS,
    normalise: (s: string | string[]): readonly string[] => (typeof s === 'string' ? [s] : [...s]),
    doc: 'Strings that end generation; the text stops right before the first one (finish_reason "stop").',
  }),
  presence_penalty: field({
    schema: Penalty,
    default: 0,
    doc: 'Subtracted from the logit of every token already generated (OpenAI).',
  }),
  frequency_penalty: field({
    schema: Penalty,
    default: 0,
    doc: 'Subtracted from a token\'s logit once per time it was generated (OpenAI).',
  }),
  repetition_penalty: field({
    schema: Type.Number({ exclusiveMinimum: 0, maximum: 2 }),
    default: 1,
    doc: 'Divides positive (multiplies negative) logits of tokens in the prompt or output (HF). 1 is off.',
  }),
  ignore_eos: field({
    schema: Type.Boolean(),
    default: false,
    doc: 'Generate past the model\'s end-of-sequence tokens, up to max_tokens.',
  }),
  min_tokens: field({
    schema: Type.Integer({ minimum: 0 }),
    default: 0,
    doc: 'End-of-sequence and stop_token_ids tokens cannot be drawn before this many tokens (vLLM).',
  }),
  stop_token_ids: field({
    schema: Type.Array(Type.Integer({ minimum: 0 })),
    default: NO_IDS,
    tokenIds: true,
    normalise: (ids: number[]): readonly number[] => [...ids],
    doc: 'Token ids that end generation as end-of-sequence does (finish_reason "stop"), ignore_eos or not (vLLM).',
  }),
}

type Fields = typeof SAMPLING_FIELDS
export type SamplingFieldName = keyof Fields
export const SAMPLING_FIELD_NAMES = Object.keys(SAMPLING_FIELDS) as SamplingFieldName[]

/** A request's raw sampling fields, as the node contract names them. */
export type SamplingInput = { [K in SamplingFieldName]?: Static<Fields[K]['schema']> }

/** Validated, defaulted sampling values of one sequence (see the engine's `validateSampling`). */
export type SamplingParams = { readonly [K in SamplingFieldName]: Fields[K]['default'] }

/** Every field at its default. */
export const DEFAULT_SAMPLING: SamplingParams = Object.freeze(
  Object.fromEntries(SAMPLING_FIELD_NAMES.map((k) => [k, SAMPLING_FIELDS[k].default])) as SamplingParams,
)

/** JSON Schema keywords that bound a value rather than type it. */
const BOUNDS = new Set(['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'minLength', 'maxLength', 'minItems', 'maxItems'])

/** A copy of `schema` without its bounds (the symbol-keyed TypeBox kind is kept). */
function typeOnly<S extends TSchema>(schema: S): S {
  const out: Record<string | symbol, unknown> = {}
  for (const key of Reflect.ownKeys(schema)) {
    if (typeof key === 'string' && BOUNDS.has(key)) continue
    const v = (schema as Record<string | symbol, unknown>)[key]
    out[key] = key === 'items' ? typeOnly(v as TSchema) : key === 'anyOf' ? (v as TSchema[]).map(typeOnly) : v
  }
  return out as S
}

/** The node contract's sampling properties: types only, so a bound is the engine's 422, not the schema's 400. */
export function samplingContractProperties(): { [K in SamplingFieldName]: TOptional<Fields[K]['schema']> } {
  return Object.fromEntries(SAMPLING_FIELD_NAMES.map((k) => [k, Type.Optional(typeOnly(SAMPLING_FIELDS[k].schema))])) as never
}

/** Every OpenAI name of a field: its own, then its aliases. */
export const openAiNames = (k: SamplingFieldName): readonly string[] => [k, ...SAMPLING_FIELDS[k].aliases]

type OpenAiName<K extends SamplingFieldName> = K | Fields[K]['aliases'][number]

/** The facade's sampling properties, under every OpenAI name: types and bounds, checked there as 422. */
export function samplingOpenAiProperties(): { [K in SamplingFieldName as OpenAiName<K>]: TOptional<Fields[K]['schema']> } {
  return Object.fromEntries(
    SAMPLING_FIELD_NAMES.flatMap((k) => openAiNames(k).map((name) => [name, Type.Optional(SAMPLING_FIELDS[k].schema)])),
  ) as never
}
