// Schemas of POST /v1/chat/completions. The route schema checks only the shape (400: unparseable, missing
// `model`/`messages`); `ChatParams` checks values (422) and names the field, the bound and (a short prefix of) the value given. Unknown
// OpenAI fields are tolerated. Imports: typebox, shared (errors, sampling field definitions).
import { Type, type Static } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { clip, OnnxdError, quote } from '../../../shared/errors.js'
import { samplingOpenAiProperties } from '../../../shared/sampling.js'

/** 400-level: what a body must have to be a chat request at all. */
export const ChatCompletionBody = Type.Object(
  {
    model: Type.String(),
    messages: Type.Array(Type.Object({ role: Type.Unknown(), content: Type.Unknown() }, { additionalProperties: true })),
  },
  { additionalProperties: true },
)

const TextPart = Type.Object({ type: Type.Literal('text'), text: Type.String() }, { additionalProperties: true })

export const ROLES = ['system', 'developer', 'user', 'assistant', 'tool'] as const

export const ChatMessageParam = Type.Object(
  {
    role: Type.Union(ROLES.map((r) => Type.Literal(r))),
    content: Type.Union([Type.String(), Type.Array(TextPart)]),
    name: Type.Optional(Type.String()),
  },
  { additionalProperties: true },
)

/** 422-level: values. Bounds the facade can check; the node checks the rest (e.g. context length). */
export const ChatParams = Type.Object(
  {
    model: Type.String({ minLength: 1 }),
    messages: Type.Array(ChatMessageParam, { minItems: 1 }),
    // Sampling, under every OpenAI name (e.g. max_completion_tokens): types and bounds from their one definition.
    ...samplingOpenAiProperties(),
    n: Type.Optional(Type.Integer({ minimum: 1 })),
    logprobs: Type.Optional(Type.Boolean()),
    stream: Type.Optional(Type.Boolean()),
    stream_options: Type.Optional(
      Type.Object({ include_usage: Type.Optional(Type.Boolean()) }, { additionalProperties: true }),
    ),
    user: Type.Optional(Type.String()),
  },
  { additionalProperties: true },
)
export type ChatParams = Static<typeof ChatParams>

/** The fields this facade understands; others are ignored (and logged at debug). */
export const KNOWN_FIELDS: ReadonlySet<string> = new Set(Object.keys(ChatParams.properties))

const checker = TypeCompiler.Compile(ChatParams)

const fieldName = (path: string): string => clip(path.slice(1).replace(/\//g, '.'))

/** Checks values; throws 422 naming the first bad field. Null optional values count as absent, as with OpenAI. */
export function parseChatParams(body: Record<string, unknown>): ChatParams {
  const value: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(body)) if (v !== null) value[k] = v
  if (!checker.Check(value)) {
    const e = checker.Errors(value).First()!
    throw new OnnxdError('invalid_value', `Invalid value for '${fieldName(e.path)}': ${e.message}. Given: ${quote(e.value)}`)
  }
  const p = value as ChatParams
  if (p.n !== undefined && p.n > 1) {
    throw new OnnxdError('invalid_value', `Invalid value for 'n': only one choice per request is supported. Given: ${p.n}`)
  }
  if (p.logprobs === true) throw new OnnxdError('invalid_value', `Invalid value for 'logprobs': logprobs are not supported. Given: true`)
  if (p.stream_options?.include_usage !== undefined && p.stream !== true) {
    throw new OnnxdError('invalid_value', `Invalid value for 'stream_options': only allowed when 'stream' is true`)
  }
  return p
}

const UsageSchema = Type.Object({
  prompt_tokens: Type.Integer(),
  completion_tokens: Type.Integer(),
  total_tokens: Type.Integer(),
})

/** The non-streaming answer (OpenAI `chat.completion`). */
export const ChatCompletionSchema = Type.Object({
  id: Type.String(),
  object: Type.Literal('chat.completion'),
  created: Type.Integer(),
  model: Type.String(),
  choices: Type.Array(
    Type.Object({
      index: Type.Integer(),
      message: Type.Object({ role: Type.Literal('assistant'), content: Type.String() }),
      finish_reason: Type.String(),
      logprobs: Type.Null(),
    }),
  ),
  usage: UsageSchema,
})
export type ChatCompletion = Static<typeof ChatCompletionSchema>
