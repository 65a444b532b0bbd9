// Schemas of POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API) and of what they answer. The
// route schema checks the shape (400: unparseable, missing `model`, `messages` or, on /v1/messages, `max_tokens`);
// `parseMessageParams` checks values (422) and refuses, naming the place, what onnxd cannot honour: content blocks
// other than text, tool_use and tool_result, server tools, and the fields of ../openai-fields.ts. Imports: typebox,
// shared (errors, sampling, tools), the field table.
import { Type, type Static } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { clip, OnnxdError } from '../../../shared/errors.js'
import { MAX_STOP_STRINGS, samplingOpenAiProperties } from '../../../shared/sampling.js'
import { MAX_TOOLS, TOOL_NAME } from '../../../shared/tools.js'
import { checkedValues, honouredFields, refuseTypes, unsupported } from '../openai-fields.js'

/** 400-level: what a body must have to be a messages request at all (`max_tokens` is required there, as Anthropic's). */
export const MessagesBody = Type.Object({ model: Type.String(), messages: Type.Array(Type.Unknown()), max_tokens: Type.Unknown() }, { additionalProperties: true })
export const CountTokensBody = Type.Object({ model: Type.String(), messages: Type.Array(Type.Unknown()) }, { additionalProperties: true })

const CacheControl = { cache_control: Type.Optional(Type.Unknown()) }
const TextBlock = Type.Object({ type: Type.Literal('text'), text: Type.String(), citations: Type.Optional(Type.Union([Type.Null(), Type.Array(Type.Unknown())])), ...CacheControl }, { additionalProperties: false })
const ToolUseBlock = Type.Object(
  { type: Type.Literal('tool_use'), id: Type.String({ minLength: 1 }), name: Type.String(), input: Type.Record(Type.String(), Type.Unknown()), ...CacheControl },
  { additionalProperties: false },
)
const ToolResultBlock = Type.Object(
  {
    type: Type.Literal('tool_result'),
    tool_use_id: Type.String({ minLength: 1 }),
    content: Type.Optional(Type.Union([Type.String(), Type.Array(TextBlock)])),
    is_error: Type.Optional(Type.Boolean()),
    ...CacheControl,
  },
  { additionalProperties: false },
)
export const ContentBlock = Type.Union([TextBlock, ToolUseBlock, ToolResultBlock])
export type ContentBlock = Static<typeof ContentBlock>
/** The block types onnxd gives the model (tool_result inside a tool_result: text only). */
const BLOCK_TYPES: ReadonlySet<string> = new Set(['text', 'tool_use', 'tool_result'])
const CUSTOM: ReadonlySet<string> = new Set(['custom'])

const MessageParam = Type.Object(
  { role: Type.Union([Type.Literal('user'), Type.Literal('assistant')]), content: Type.Union([Type.String(), Type.Array(ContentBlock)]) },
  { additionalProperties: false },
)
export type MessageParam = Static<typeof MessageParam>

/** A client tool (Anthropic's `custom` type, which may be left out). */
const Tool = Type.Object(
  {
    type: Type.Optional(Type.Literal('custom')),
    name: Type.String({ pattern: TOOL_NAME }),
    description: Type.Optional(Type.String()),
    input_schema: Type.Record(Type.String(), Type.Unknown()),
    strict: Type.Optional(Type.Boolean()),
    ...CacheControl,
  },
  { additionalProperties: false },
)
export type Tool = Static<typeof Tool>

const parallel = { disable_parallel_tool_use: Type.Optional(Type.Boolean()) }
export const MessagesToolChoice = Type.Union([
  Type.Object({ type: Type.Union([Type.Literal('auto'), Type.Literal('any'), Type.Literal('none')]), ...parallel }, { additionalProperties: false }),
  Type.Object({ type: Type.Literal('tool'), name: Type.String(), ...parallel }, { additionalProperties: false }),
])
export type MessagesToolChoice = Static<typeof MessagesToolChoice>

// OpenAI's names that are not this API's: max_tokens and stop_sequences are its own, no logprobs, output_config.format.
const {
  max_tokens: _max,
  max_completion_tokens: _maxCompletion,
  response_format: _format,
  logprobs: _logprobs,
  top_logprobs: _top,
  stop: _stop,
  ...sampling
} = samplingOpenAiProperties()

export const MessageParams = Type.Object(
  {
    model: Type.String({ minLength: 1 }),
    messages: Type.Array(MessageParam, { minItems: 1 }),
    system: Type.Optional(Type.Union([Type.String(), Type.Array(TextBlock)])),
    max_tokens: Type.Integer({ minimum: 1 }),
    stop_sequences: Type.Optional(Type.Array(Type.String({ minLength: 1 }), { maxItems: MAX_STOP_STRINGS })),
    ...sampling,
    tools: Type.Optional(Type.Array(Tool, { maxItems: MAX_TOOLS })),
    tool_choice: Type.Optional(MessagesToolChoice),
    // Structured outputs: the output is JSON valid under the schema.
    output_config: Type.Optional(
      Type.Object(
        { format: Type.Optional(Type.Union([Type.Null(), Type.Object({ type: Type.Literal('json_schema'), schema: Type.Record(Type.String(), Type.Unknown()) }, { additionalProperties: false })])) },
        { additionalProperties: false },
      ),
    ),
    stream: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
)
export type MessageParams = Static<typeof MessageParams>

/** The fields onnxd acts on; the others are accepted or refused by ../openai-fields.ts. */
export const HONOURED_FIELDS: ReadonlySet<string> = new Set(Object.keys(MessageParams.properties))

const checker = TypeCompiler.Compile(MessageParams)

/** Blocks, tools and output settings onnxd cannot give the model: 422 naming the place and what it is. */
function checkRefused(value: Record<string, unknown>): void {
  if (Array.isArray(value.messages)) {
    value.messages.forEach((m: unknown, i) => {
      const content = (m as { content?: unknown } | null)?.content
      refuseTypes(content, `messages[${i}].content`, BLOCK_TYPES, (t) => `content blocks of type '${t}' are not supported; only text, tool_use and tool_result are`)
    })
  }
  refuseTypes(value.tools, 'tools', CUSTOM, (t) => `server tools ('${t}') are not supported; only client tools are`, '.type')
  const oc = value.output_config as { effort?: unknown } | undefined
  if (typeof oc === 'object' && oc !== null && oc.effort !== undefined && oc.effort !== null) {
    throw unsupported('output_config.effort', 'effort controls are not supported by the models onnxd serves', oc.effort)
  }
  if (typeof oc === 'object' && oc !== null) delete oc.effort
}

/** tool_choice against tools; tool_use blocks only from the assistant, tool_result blocks only from the user. */
function checkTools(p: MessageParams): void {
  const names = new Set((p.tools ?? []).map((t) => t.name))
  const choice = p.tool_choice
  if ((choice?.type === 'any' || choice?.type === 'tool') && names.size === 0) {
    throw new OnnxdError('invalid_value', `Invalid value for 'tool_choice': '${choice.type}' needs 'tools'`)
  }
  if (choice?.type === 'tool' && !names.has(choice.name)) {
    throw new OnnxdError('invalid_value', `Invalid value for 'tool_choice.name': the tool '${clip(choice.name)}' is not in 'tools'`)
  }
  p.messages.forEach((m, i) => {
    if (typeof m.content === 'string') return
    m.content.forEach((b, j) => {
      if ((b.type === 'tool_use' && m.role !== 'assistant') || (b.type === 'tool_result' && m.role !== 'user')) {
        throw new OnnxdError('invalid_value', `Invalid value for 'messages[${i}].content[${j}]': ${b.type} blocks belong in ${b.type === 'tool_use' ? 'assistant' : 'user'} messages`)
      }
    })
  })
}

/**
 * Checks values; throws 422 naming the first bad field: fields onnxd cannot honour first, then blocks and tools it
 * cannot give the model, then the values of the fields it honours. `countOnly`: count_tokens, without max_tokens.
 */
export function parseMessageParams(body: Record<string, unknown>, countOnly = false): MessageParams {
  const value = honouredFields(body, 'messages', HONOURED_FIELDS)
  if (countOnly) value.max_tokens ??= 1
  checkRefused(value)
  const p = checkedValues<MessageParams>(checker, value)
  checkTools(p)
  return p
}

/** Anthropic's usage: `input_tokens` computed, `cache_read_input_tokens` given by the node's prefix cache. */
export const MessagesUsage = Type.Object({
  input_tokens: Type.Integer(),
  output_tokens: Type.Integer(),
  cache_creation_input_tokens: Type.Integer(),
  cache_read_input_tokens: Type.Integer(),
})
export type MessagesUsage = Static<typeof MessagesUsage>

export const StopReason = Type.Union([Type.Literal('end_turn'), Type.Literal('max_tokens'), Type.Literal('stop_sequence'), Type.Literal('tool_use')])
export type StopReason = Static<typeof StopReason>

export const OutputBlock = Type.Union([
  Type.Object({ type: Type.Literal('text'), text: Type.String() }),
  Type.Object({ type: Type.Literal('tool_use'), id: Type.String(), name: Type.String(), input: Type.Record(Type.String(), Type.Unknown()) }),
])
export type OutputBlock = Static<typeof OutputBlock>

/** The answer (Anthropic's `message`). */
export const MessageSchema = Type.Object({
  id: Type.String(),
  type: Type.Literal('message'),
  role: Type.Literal('assistant'),
  model: Type.String(),
  content: Type.Array(OutputBlock),
  stop_reason: Type.Union([StopReason, Type.Null()]),
  stop_sequence: Type.Union([Type.String(), Type.Null()]),
  usage: MessagesUsage,
})
export type MessageObject = Static<typeof MessageSchema>
