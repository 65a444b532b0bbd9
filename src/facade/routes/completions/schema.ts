// Schemas of POST /v1/completions (OpenAI's legacy completions, for base models without a chat template). The route
// schema checks only the shape (400: unparseable, missing `model`/`prompt`); `parseCompletionParams` checks values
// (422) and refuses what onnxd cannot honour (../openai-fields.ts). Imports: typebox, shared (errors, sampling
// field definitions), the OpenAI field table.
import { Type, type Static } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { OnnxdError, quote } from '../../../shared/errors.js'
import { MAX_TOP_LOGPROBS, samplingOpenAiProperties } from '../../../shared/sampling.js'
import { checkCombinations, checkStreamOptions, firstInvalid, honouredFields, MAX_N, samplingFields, unsupported } from '../openai-fields.js'
import { OpenAiUsage } from '../completion-flow.js'

/** OpenAI's default max_tokens for legacy completions (chat's is the model's room). */
export const COMPLETIONS_DEFAULT_MAX_TOKENS = 16
/** Prompts one request may carry (each is one choice, run as its own sequence). */
export const MAX_PROMPTS = 32

/** 400-level: what a body must have to be a completion request at all. */
export const CompletionBody = Type.Object({ model: Type.String(), prompt: Type.Unknown() }, { additionalProperties: true })

const TokenIds = Type.Array(Type.Integer({ minimum: 0 }), { minItems: 1 })

// Chat's logprobs fields are not this endpoint's: here `logprobs` is how many of the likeliest tokens to report.
const { logprobs: _chatLogprobs, top_logprobs: _chatTop, ...sampling } = samplingOpenAiProperties()

/** 422-level: values. Bounds the facade can check; the node checks the rest (context length, vocabulary). */
export const CompletionParams = Type.Object(
  {
    model: Type.String({ minLength: 1 }),
    prompt: Type.Union([
      Type.String(),
      Type.Array(Type.String(), { minItems: 1, maxItems: MAX_PROMPTS }),
      TokenIds,
      Type.Array(TokenIds, { minItems: 1, maxItems: MAX_PROMPTS }),
    ]),
    ...sampling,
    // Log-probabilities of each generated token and of the `logprobs` likeliest tokens at its step (0: none).
    logprobs: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_TOP_LOGPROBS })),
    stream: Type.Optional(Type.Boolean()),
    // Checked by checkStreamOptions.
    stream_options: Type.Optional(Type.Object({ include_usage: Type.Optional(Type.Boolean()) })),
    echo: Type.Optional(Type.Boolean()),
    // Choices per prompt: prompt i's choice j is choices[i * n + j] (seed + j when a seed is given).
    n: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_N })),
  },
  { additionalProperties: false },
)
export type CompletionParams = Static<typeof CompletionParams>

/** The fields onnxd acts on; the others are accepted or refused by ../openai-fields.ts. */
export const HONOURED_FIELDS: ReadonlySet<string> = new Set(Object.keys(CompletionParams.properties))

const checker = TypeCompiler.Compile(CompletionParams)

/** One prompt: text, or token ids. */
export type Prompt = { text: string } | { ids: number[] }

const isIds = (v: unknown): v is number[] => Array.isArray(v) && v.length > 0 && v.every((x) => typeof x === 'number')

/** The prompts of a request, one per choice: a string, strings, token ids, or lists of token ids (OpenAI's four forms). */
export function promptsOf(prompt: CompletionParams['prompt']): Prompt[] {
  if (typeof prompt === 'string') return [{ text: prompt }]
  if (isIds(prompt)) return [{ ids: prompt }]
  return (prompt as (string | number[])[]).map((p) => (typeof p === 'string' ? { text: p } : { ids: p }))
}

/** The prompt's form as one sentence of a 422 (a union's own error says only "expected union value"). */
function checkPromptForm(prompt: unknown): void {
  const ok =
    typeof prompt === 'string' ||
    (Array.isArray(prompt) &&
      prompt.length > 0 &&
      (prompt.every((p) => typeof p === 'string') || prompt.every((p) => typeof p === 'number') || prompt.every((p) => Array.isArray(p))))
  if (!ok) {
    throw new OnnxdError(
      'invalid_value',
      `Invalid value for 'prompt': expected a string, an array of strings, an array of token ids or an array of such arrays. Given: ${quote(prompt)}`,
    )
  }
  if (Array.isArray(prompt) && !prompt.every((p) => typeof p === 'number') && prompt.length > MAX_PROMPTS) {
    throw new OnnxdError('invalid_value', `Invalid value for 'prompt': at most ${MAX_PROMPTS} prompts per request. Given: ${prompt.length}`)
  }
}

/** Checks values; throws 422 naming the first bad field. Null optional values count as absent, as with OpenAI. */
export function parseCompletionParams(body: Record<string, unknown>): CompletionParams {
  // A missing field is the body's fault (400), before any value is looked at (422): the spec's order.
  if (body.prompt === undefined || body.prompt === null) throw new OnnxdError('invalid_request', "Missing required field 'prompt'")
  const value = honouredFields(body, 'completions', HONOURED_FIELDS)
  value.stream_options = checkStreamOptions(value.stream_options, value.stream)
  if (value.stream_options === undefined) delete value.stream_options
  checkPromptForm(value.prompt)
  if (!checker.Check(value)) throw firstInvalid(checker, value)
  // Here `logprobs` is a count (chat's logprobs: true with top_logprobs), not chat's flag.
  const { logprobs: _count, ...sampling } = samplingFields(value)
  checkCombinations(sampling)
  const p = value as CompletionParams
  if (p.echo === true && promptsOf(p.prompt).some((x) => 'ids' in x)) {
    throw unsupported('echo', 'echo needs a text prompt; it is not supported with token-id prompts')
  }
  if (p.echo === true && p.logprobs !== undefined) throw unsupported('logprobs', "the prompt's log-probabilities are not computed; not with echo", p.logprobs)
  return p
}


/** OpenAI's legacy `choices[].logprobs`: per generated token its text, log-probability, the likeliest tokens at its
 * step (token text to log-probability) and its character offset in the choice's text. Null unless asked for. */
export const LegacyLogprobs = Type.Union([
  Type.Null(),
  Type.Object({
    tokens: Type.Array(Type.String()),
    token_logprobs: Type.Array(Type.Number()),
    top_logprobs: Type.Array(Type.Record(Type.String(), Type.Number())),
    text_offset: Type.Array(Type.Integer()),
  }),
])
export type LegacyLogprobs = Static<typeof LegacyLogprobs>

/** The non-streaming answer (OpenAI `text_completion`). */
export const TextCompletionSchema = Type.Object({
  id: Type.String(),
  object: Type.Literal('text_completion'),
  created: Type.Integer(),
  model: Type.String(),
  choices: Type.Array(
    Type.Object({
      text: Type.String(),
      index: Type.Integer(),
      logprobs: LegacyLogprobs,
      finish_reason: Type.String(),
    }),
  ),
  usage: OpenAiUsage,
})
export type TextCompletion = Static<typeof TextCompletionSchema>
