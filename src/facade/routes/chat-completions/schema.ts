// Schemas of POST /v1/chat/completions. The route schema checks only the shape (400: unparseable, missing
// `model`/`messages`); `parseChatParams` checks values (422) and names the field, the bound and (a short prefix of)
// the value given. A field onnxd cannot honour (../openai-fields.ts), a content part that is not text or a role the
// model cannot be given is refused (422), never dropped. Imports: typebox, shared (errors, sampling field
// definitions), the OpenAI field table.
import { Type, type Static } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { clip } from '../../../shared/errors.js'
import { samplingOpenAiProperties } from '../../../shared/sampling.js'
import { checkCombinations, checkStreamOptions, firstInvalid, honouredFields, MAX_N, samplingFields, unsupported } from '../openai-fields.js'
import { OpenAiUsage } from '../completion-flow.js'
import { TokenLogprob } from '../../../contract/completions.js'

/** 400-level: what a body must have to be a chat request at all. */
export const ChatCompletionBody = Type.Object(
  {
    model: Type.String(),
    messages: Type.Array(Type.Object({ role: Type.Unknown(), content: Type.Unknown() }, { additionalProperties: true })),
  },
  { additionalProperties: true },
)

const TextPart = Type.Object({ type: Type.Literal('text'), text: Type.String() }, { additionalProperties: true })

/** The roles onnxd renders; `tool` and `function` wait for tool calls. */
export const ROLES = ['system', 'developer', 'user', 'assistant'] as const

export const ChatMessageParam = Type.Object(
  {
    role: Type.Union(ROLES.map((r) => Type.Literal(r))),
    content: Type.Union([Type.String(), Type.Array(TextPart)]),
    // Passed to the chat template with the message; OpenAI's bound.
    name: Type.Optional(Type.String({ maxLength: 64 })),
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
    // Choices: the same messages run n times (choice j with seed + j when a seed is given).
    n: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_N })),
    stream: Type.Optional(Type.Boolean()),
    // Checked by checkStreamOptions.
    stream_options: Type.Optional(Type.Object({ include_usage: Type.Optional(Type.Boolean()) })),
  },
  { additionalProperties: false },
)
export type ChatParams = Static<typeof ChatParams>

/** The fields onnxd acts on; the others are accepted or refused by ../openai-fields.ts. */
export const HONOURED_FIELDS: ReadonlySet<string> = new Set(Object.keys(ChatParams.properties))

const checker = TypeCompiler.Compile(ChatParams)

/** Message fields that ask for what onnxd cannot do yet (tool calls, audio). */
const MESSAGE_REFUSED: Readonly<Record<string, string>> = {
  tool_calls: 'tool calls are not supported yet',
  function_call: 'tool calls are not supported yet',
  audio: 'audio is not supported',
}

/** Roles, content parts and message fields onnxd cannot give the model: 422 naming the message and what it has. */
function checkMessages(messages: unknown): void {
  if (!Array.isArray(messages)) return
  messages.forEach((m: unknown, i) => {
    if (typeof m !== 'object' || m === null) return
    const msg = m as Record<string, unknown>
    const where = `messages[${i}]`
    if (msg.role === 'tool' || msg.role === 'function') {
      throw unsupported(`${where}.role`, `'${msg.role}' messages are not supported yet (tool calls are not supported)`)
    }
    for (const [k, why] of Object.entries(MESSAGE_REFUSED)) {
      const v = msg[k]
      if (v !== undefined && v !== null && !(Array.isArray(v) && v.length === 0)) throw unsupported(`${where}.${k}`, why)
    }
    if (!Array.isArray(msg.content)) return
    msg.content.forEach((part: unknown, j) => {
      const type = typeof part === 'object' && part !== null ? (part as { type?: unknown }).type : undefined
      if (typeof type === 'string' && type !== 'text') {
        throw unsupported(`${where}.content[${j}]`, `content parts of type '${clip(type)}' are not supported; only 'text' parts are`)
      }
    })
  })
}

/**
 * Checks values; throws 422 naming the first bad field: fields onnxd cannot honour first, then messages, then the
 * values of the fields it honours. Null optional values count as absent, as with OpenAI.
 */
export function parseChatParams(body: Record<string, unknown>): ChatParams {
  const value = honouredFields(body, 'chat', HONOURED_FIELDS)
  value.stream_options = checkStreamOptions(value.stream_options, value.stream)
  if (value.stream_options === undefined) delete value.stream_options
  checkMessages(value.messages)
  if (!checker.Check(value)) throw firstInvalid(checker, value)
  checkCombinations(samplingFields(value))
  return value as ChatParams
}


/** `choices[].logprobs`: the generated tokens' log-probabilities (null unless asked for with `logprobs: true`). */
export const ChatLogprobs = Type.Union([Type.Null(), Type.Object({ content: Type.Array(TokenLogprob), refusal: Type.Null() })])
export type ChatLogprobs = Static<typeof ChatLogprobs>

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
      logprobs: ChatLogprobs,
    }),
  ),
  usage: OpenAiUsage,
})
export type ChatCompletion = Static<typeof ChatCompletionSchema>
