// Schemas of POST /v1/chat/completions. The route schema checks only the shape (400: unparseable, missing
// `model`/`messages`); `parseChatParams` checks values (422) and names the field, the bound and (a short prefix of)
// the value given. A field onnxd cannot honour (../openai-fields.ts), a content part that is not text or a role the
// model cannot be given is refused (422), never dropped. Imports: typebox, shared (errors, sampling field
// definitions), the OpenAI field table.
import { Type, type Static } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { clip, OnnxdError, quote } from '../../../shared/errors.js'
import { samplingOpenAiProperties } from '../../../shared/sampling.js'
import { checkCombinations, checkStreamOptions, firstInvalid, honouredFields, MAX_N, samplingFields, unsupported } from '../openai-fields.js'
import { OpenAiUsage } from '../completion-flow.js'
import { TokenLogprob } from '../../../contract/completions.js'
import { FunctionTool, MAX_TOOLS, ToolChoice } from '../../../shared/tools.js'

/** 400-level: what a body must have to be a chat request at all. */
export const ChatCompletionBody = Type.Object(
  {
    model: Type.String(),
    messages: Type.Array(Type.Object({ role: Type.Unknown(), content: Type.Unknown() }, { additionalProperties: true })),
  },
  { additionalProperties: true },
)

const TextPart = Type.Object({ type: Type.Literal('text'), text: Type.String() }, { additionalProperties: true })

/** The roles onnxd renders (`function`, OpenAI's deprecated form of `tool`, is refused). */
export const ROLES = ['system', 'developer', 'user', 'assistant', 'tool'] as const

/** A call the assistant made, as a conversation sends it back: `arguments` is the JSON text of an object. */
const ToolCallParam = Type.Object(
  { id: Type.String(), type: Type.Literal('function'), function: Type.Object({ name: Type.String(), arguments: Type.String() }, { additionalProperties: false }) },
  { additionalProperties: false },
)

export const ChatMessageParam = Type.Object(
  {
    role: Type.Union(ROLES.map((r) => Type.Literal(r))),
    // Null only on an assistant message that made tool calls (checked in checkMessages).
    content: Type.Union([Type.String(), Type.Array(TextPart), Type.Null()]),
    // Passed to the chat template with the message; OpenAI's bound.
    name: Type.Optional(Type.String({ maxLength: 64 })),
    tool_calls: Type.Optional(Type.Array(ToolCallParam)),
    tool_call_id: Type.Optional(Type.String()),
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
    // Tool calling: rendered by the model's chat template; calls parsed out of the answer (tool-calls.ts).
    tools: Type.Optional(Type.Array(FunctionTool, { maxItems: MAX_TOOLS })),
    tool_choice: Type.Optional(ToolChoice),
    parallel_tool_calls: Type.Optional(Type.Boolean()),
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

/** Message fields that ask for what onnxd cannot do (the deprecated function_call, audio). */
const MESSAGE_REFUSED: Readonly<Record<string, string>> = {
  function_call: "function_call is OpenAI's deprecated form; send tool_calls",
  audio: 'audio is not supported',
}

/** Roles, content parts and message fields onnxd cannot give the model: 422 naming the message and what it has. */
function checkMessages(messages: unknown): void {
  if (!Array.isArray(messages)) return
  messages.forEach((m: unknown, i) => {
    if (typeof m !== 'object' || m === null) return
    const msg = m as Record<string, unknown>
    const where = `messages[${i}]`
    if (msg.role === 'function') throw unsupported(`${where}.role`, "'function' messages are OpenAI's deprecated form; send 'tool' messages")
    if (msg.role === 'tool' && typeof msg.tool_call_id !== 'string') throw new OnnxdError('invalid_value', `Missing required parameter: '${where}.tool_call_id'`)
    if (msg.content === null && !(msg.role === 'assistant' && Array.isArray(msg.tool_calls) && msg.tool_calls.length > 0)) {
      throw new OnnxdError('invalid_value', `Invalid value for '${where}.content': null only on an assistant message with tool_calls`)
    }
    if (Array.isArray(msg.tool_calls)) {
      msg.tool_calls.forEach((c: unknown, j) => {
        const args = (c as { function?: { arguments?: unknown } } | null)?.function?.arguments
        if (typeof args !== 'string') return
        let v: unknown
        try {
          v = JSON.parse(args)
        } catch {
          v = null
        }
        if (typeof v !== 'object' || v === null || Array.isArray(v)) {
          throw new OnnxdError('invalid_value', `Invalid value for '${where}.tool_calls[${j}].function.arguments': expected the JSON text of an object. Given: ${quote(args)}`)
        }
      })
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

/** tool_choice against tools: a named or required choice needs them, a named function must be one of them. */
function checkTools(p: ChatParams): void {
  const names = new Set((p.tools ?? []).map((t) => t.function.name))
  const choice = p.tool_choice
  if (choice !== undefined && choice !== 'none' && names.size === 0) {
    throw new OnnxdError('invalid_value', `Invalid value for 'tool_choice': ${typeof choice === 'object' ? 'a named function' : `'${choice}'`} needs 'tools'`)
  }
  if (typeof choice === 'object' && !names.has(choice.function.name)) {
    throw new OnnxdError('invalid_value', `Invalid value for 'tool_choice': the function '${clip(choice.function.name)}' is not in 'tools'`)
  }
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
  checkTools(value as ChatParams)
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
      message: Type.Object({
        role: Type.Literal('assistant'),
        content: Type.Union([Type.String(), Type.Null()]),
        tool_calls: Type.Optional(
          Type.Array(Type.Object({ id: Type.String(), type: Type.Literal('function'), function: Type.Object({ name: Type.String(), arguments: Type.String() }) })),
        ),
      }),
      finish_reason: Type.String(),
      logprobs: ChatLogprobs,
    }),
  ),
  usage: OpenAiUsage,
  /** The node's: with the same fingerprint and seed, the same tokens. */
  system_fingerprint: Type.Optional(Type.String()),
})
export type ChatCompletion = Static<typeof ChatCompletionSchema>
