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
  /** What the field does, for readers of this table (docs/api.md documents the same). */
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

/** What a response_format asks the engine for: any JSON object, or JSON valid under one JSON Schema. */
export type StructuredOutput =
  | { type: 'json_object' }
  | { type: 'json_schema'; schema: Record<string, unknown> }
  /**
   * Tool calls <tool_call>{"name": …, "arguments": …}</tool_call> to these functions, arguments valid under their
   * parameters (any object when null): `required`, the output is one call; `auto`, free text in which every call
   * that begins is held to them (strict tools with tool_choice auto).
   */
  | { type: 'tool_call'; mode: 'required' | 'auto'; functions: { name: string; parameters: Record<string, unknown> | null }[] }
const NO_BIAS: readonly (readonly [number, number])[] = Object.freeze([])
/** A token id written as an object key (logit_bias): a decimal integer without leading zeros. */
export const TOKEN_ID_KEY = /^(0|[1-9][0-9]{0,9})$/
/** OpenAI's limit on top_logprobs. */
export const MAX_TOP_LOGPROBS = 20
/** Entries of logit_bias at most (OpenAI documents no limit; each costs a write per step). */
export const MAX_LOGIT_BIAS = 1024

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
  logit_bias: field({
    // OpenAI's: token ids (as strings) to a bias added to their logits; -100 bans a token, 100 all but forces it.
    schema: Type.Record(Type.RegExp(TOKEN_ID_KEY), Type.Number({ minimum: -100, maximum: 100 }), { additionalProperties: false, maxProperties: MAX_LOGIT_BIAS }),
    default: NO_BIAS,
    tokenIds: true,
    normalise: (m: Record<string, number>): readonly (readonly [number, number])[] => Object.entries(m).map(([id, b]) => [Number(id), b] as const),
    doc: 'Token id (a string key) to a bias in [-100, 100] added to its logit after the penalties (OpenAI). At most 1024 entries.',
  }),
  logprobs: field({
    schema: Type.Boolean(),
    default: false,
    doc: "Report each generated token's log-probability: log-softmax of the model's raw logits (vLLM's raw_logprobs), before penalties, logit_bias, temperature and masks.",
  }),
  top_logprobs: field({
    schema: Type.Integer({ minimum: 0, maximum: MAX_TOP_LOGPROBS }),
    default: 0,
    doc: 'With logprobs: the most likely tokens at each step (up to 20), with their raw log-probabilities.',
  }),
  response_format: field({
    schema: Type.Union([
      Type.Object({ type: Type.Literal('text') }, { additionalProperties: false }),
      Type.Object({ type: Type.Literal('json_object') }, { additionalProperties: false }),
      Type.Object(
        {
          type: Type.Literal('json_schema'),
          json_schema: Type.Object(
            {
              name: Type.String({ minLength: 1, maxLength: 64 }),
              description: Type.Optional(Type.String()),
              schema: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
              strict: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
            },
            { additionalProperties: false },
          ),
        },
        { additionalProperties: false },
      ),
    ]),
    default: null as StructuredOutput | null,
    normalise: (f): StructuredOutput | null =>
      f.type === 'text' ? null : f.type === 'json_object' ? { type: 'json_object' } : { type: 'json_schema', schema: f.json_schema.schema ?? {} },
    doc: 'OpenAI\'s: {"type":"json_object"} or {"type":"json_schema","json_schema":{"name","schema"}} constrain every token to JSON (valid under the schema): the output always parses. {"type":"text"} is the default.',
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
const BOUNDS = new Set(['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'minLength', 'maxLength', 'minItems', 'maxItems', 'maxProperties'])

/** A copy of `schema` without its bounds (the symbol-keyed TypeBox kind is kept). */
function typeOnly<S extends TSchema>(schema: S): S {
  const out: Record<string | symbol, unknown> = {}
  for (const key of Reflect.ownKeys(schema)) {
    if (typeof key === 'string' && BOUNDS.has(key)) continue
    const v = (schema as Record<string | symbol, unknown>)[key]
    out[key] =
      key === 'items'
        ? typeOnly(v as TSchema)
        : key === 'anyOf'
          ? (v as TSchema[]).map(typeOnly)
          : key === 'patternProperties'
            ? Object.fromEntries(Object.entries(v as Record<string, TSchema>).map(([k, x]) => [k, typeOnly(x)]))
            : v
  }
  return out as S
}

/** The node contract's sampling properties: types only, so a bound is the engine's 422, not the schema's 400. */
export function samplingContractProperties(): { [K in SamplingFieldName]: TOptional<Fields[K]['schema']> } {
  return Object.fromEntries(SAMPLING_FIELD_NAMES.map((k) => [k, Type.Optional(typeOnly(SAMPLING_FIELDS[k].schema))])) as never
}

/**
 * Rules between fields, checked by the facade (422 before billing) and the engine alike; `invalid` makes the error
 * naming the field, the rule and the value. Bounds of single fields come from SAMPLING_FIELDS.
 */
export function checkFieldCombinations<E>(input: SamplingInput, invalid: (field: string, rule: string, given: unknown) => E): void {
  const structured = input.response_format !== undefined && input.response_format.type !== 'text'
  if (structured && input.ignore_eos === true) throw invalid('ignore_eos', 'false with a JSON response_format (the output ends with the JSON)', true)
  if (structured && (input.min_tokens ?? 0) > 0) throw invalid('min_tokens', '0 with a JSON response_format (the output ends with the JSON)', input.min_tokens)
  if (input.top_logprobs !== undefined && input.top_logprobs > 0 && input.logprobs !== true) throw invalid('top_logprobs', 'used only with logprobs: true', input.top_logprobs)
  if (input.max_tokens !== undefined && input.min_tokens !== undefined && input.min_tokens > input.max_tokens) {
    throw invalid('min_tokens', `>= 0 and <= max_tokens (${input.max_tokens})`, input.min_tokens)
  }
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
