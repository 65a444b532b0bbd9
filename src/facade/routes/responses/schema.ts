// Schemas of POST /v1/responses (OpenAI's Responses API) and of what it answers. The route schema checks only the
// shape (400: unparseable, missing `model`); `parseResponseParams` checks values (422) and refuses, naming the field,
// what onnxd cannot honour: built-in tools, input items or content parts that are not text, function calls or their
// outputs, and the fields of ../openai-fields.ts. Imports: typebox, shared (errors, sampling, tools), the field table.
import { Type, type Static } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { clip, OnnxdError, quote } from '../../../shared/errors.js'
import { samplingOpenAiProperties } from '../../../shared/sampling.js'
import { MAX_TOOLS, TOOL_NAME } from '../../../shared/tools.js'
import { checkedValues, honouredFields, refuseTypes, typeOf, unsupported } from '../openai-fields.js'

/** 400-level: what a body must have to be a responses request at all. */
export const ResponsesBody = Type.Object({ model: Type.String() }, { additionalProperties: true })

/** A text content part: `input_text` as the client writes it, `output_text` as an earlier answer's message carried it. */
const TextPart = Type.Object(
  { type: Type.Union([Type.Literal('input_text'), Type.Literal('output_text')]), text: Type.String() },
  { additionalProperties: true },
)
/** The part types onnxd gives the model. */
const TEXT_PARTS: ReadonlySet<string> = new Set(['input_text', 'output_text'])

const MessageItem = Type.Object(
  {
    type: Type.Optional(Type.Literal('message')),
    role: Type.Union([Type.Literal('user'), Type.Literal('assistant'), Type.Literal('system'), Type.Literal('developer')]),
    content: Type.Union([Type.String(), Type.Array(TextPart)]),
    id: Type.Optional(Type.String()),
    status: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
)
const FunctionCallItem = Type.Object(
  {
    type: Type.Literal('function_call'),
    call_id: Type.String({ minLength: 1 }),
    name: Type.String(),
    arguments: Type.String(),
    id: Type.Optional(Type.String()),
    status: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
)
const FunctionCallOutputItem = Type.Object(
  {
    type: Type.Literal('function_call_output'),
    call_id: Type.String({ minLength: 1 }),
    output: Type.Union([Type.String(), Type.Array(TextPart)]),
    id: Type.Optional(Type.String()),
    status: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
)
/** An earlier response's output item, by its id (the AI SDK sends these for earlier turns when responses are kept). */
const ItemReference = Type.Object({ type: Type.Literal('item_reference'), id: Type.String() }, { additionalProperties: false })
export type ItemReference = Static<typeof ItemReference>
export const InputItem = Type.Union([MessageItem, FunctionCallItem, FunctionCallOutputItem, ItemReference])
export type InputItem = Static<typeof InputItem>
/** The input item types onnxd gives the model (a message's `type` may be left out). */
const ITEM_TYPES: ReadonlySet<string> = new Set(['message', 'function_call', 'function_call_output', 'item_reference'])
const FUNCTION: ReadonlySet<string> = new Set(['function'])

/** A function tool as the Responses API defines it (flat, unlike chat's). */
export const ResponsesFunctionTool = Type.Object(
  {
    type: Type.Literal('function'),
    name: Type.String({ pattern: TOOL_NAME }),
    description: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    parameters: Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()])),
    strict: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
  },
  { additionalProperties: false },
)
export type ResponsesFunctionTool = Static<typeof ResponsesFunctionTool>

export const ResponsesToolChoice = Type.Union([
  Type.Literal('none'),
  Type.Literal('auto'),
  Type.Literal('required'),
  Type.Object({ type: Type.Literal('function'), name: Type.String() }, { additionalProperties: false }),
])
export type ResponsesToolChoice = Static<typeof ResponsesToolChoice>

export const TextFormat = Type.Union([
  Type.Object({ type: Type.Literal('text') }, { additionalProperties: false }),
  Type.Object({ type: Type.Literal('json_object') }, { additionalProperties: false }),
  Type.Object(
    {
      type: Type.Literal('json_schema'),
      name: Type.String({ minLength: 1, maxLength: 64 }),
      schema: Type.Record(Type.String(), Type.Unknown()),
      description: Type.Optional(Type.String()),
      strict: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
    },
    { additionalProperties: false },
  ),
])
export type TextFormat = Static<typeof TextFormat>

// Chat's names that are not this API's: max_output_tokens, text.format and no logprobs here.
const {
  max_tokens: _max,
  max_completion_tokens: _maxCompletion,
  response_format: _format,
  logprobs: _logprobs,
  top_logprobs: _top,
  ...sampling
} = samplingOpenAiProperties()

/** A response id as onnxd makes them (`resp_` and base62). */
export const RESPONSE_ID = '^resp_[A-Za-z0-9]{1,64}$'

/** 422-level: values. Bounds the facade can check; the node checks the rest (context length, vocabulary). */
export const ResponseParams = Type.Object(
  {
    model: Type.String({ minLength: 1 }),
    input: Type.Union([Type.String(), Type.Array(InputItem, { minItems: 1 })]),
    instructions: Type.Optional(Type.String()),
    ...sampling,
    max_output_tokens: Type.Optional(Type.Integer({ minimum: 1 })),
    tools: Type.Optional(Type.Array(ResponsesFunctionTool, { maxItems: MAX_TOOLS })),
    tool_choice: Type.Optional(ResponsesToolChoice),
    parallel_tool_calls: Type.Optional(Type.Boolean()),
    text: Type.Optional(
      Type.Object({ format: Type.Optional(TextFormat), verbosity: Type.Optional(Type.Literal('medium')) }, { additionalProperties: false }),
    ),
    stream: Type.Optional(Type.Boolean()),
    // Kept (default true) for GET /v1/responses/{id} and previous_response_id.
    store: Type.Optional(Type.Boolean()),
    previous_response_id: Type.Optional(Type.String({ pattern: RESPONSE_ID })),
    // Kept with the response and echoed in it (OpenAI's bounds).
    metadata: Type.Optional(Type.Record(Type.String({ maxLength: 64 }), Type.String({ maxLength: 512 }), { maxProperties: 16 })),
  },
  { additionalProperties: false },
)
export type ResponseParams = Static<typeof ResponseParams>

/** The fields onnxd acts on; the others are accepted or refused by ../openai-fields.ts. */
export const HONOURED_FIELDS: ReadonlySet<string> = new Set(Object.keys(ResponseParams.properties))

const checker = TypeCompiler.Compile(ResponseParams)

/** Items, content parts and tools onnxd cannot give the model: 422 naming the place and what it is. */
function checkRefused(value: Record<string, unknown>): void {
  refuseTypes(value.input, 'input', ITEM_TYPES, (t) => `input items of type '${t}' are not supported; only messages, function_call, function_call_output and item_reference are`, '.type')
  if (Array.isArray(value.input)) {
    value.input.forEach((item: unknown, i) => {
      const content = (item as { content?: unknown; output?: unknown } | null)?.content ?? (item as { output?: unknown } | null)?.output
      refuseTypes(content, `input[${i}].content`, TEXT_PARTS, (t) => `content parts of type '${t}' are not supported; only text parts are`)
    })
  }
  refuseTypes(value.tools, 'tools', FUNCTION, (t) => `built-in tools ('${t}') are not supported; only function tools are`, '.type')
  const choice = value.tool_choice
  const choiceType = typeOf(choice)
  if (typeof choiceType === 'string' && choiceType !== 'function') throw unsupported('tool_choice', `'${clip(choiceType)}' is not supported; send none, auto, required or a function`, choice)
}

/** tool_choice against tools: a named or required choice needs them, a named function must be one of them. */
function checkTools(p: ResponseParams): void {
  const names = new Set((p.tools ?? []).map((t) => t.name))
  const choice = p.tool_choice
  if (choice !== undefined && choice !== 'none' && choice !== 'auto' && names.size === 0) {
    throw new OnnxdError('invalid_value', `Invalid value for 'tool_choice': ${typeof choice === 'object' ? 'a named function' : `'${choice}'`} needs 'tools'`)
  }
  if (typeof choice === 'object' && !names.has(choice.name)) {
    throw new OnnxdError('invalid_value', `Invalid value for 'tool_choice': the function '${clip(choice.name)}' is not in 'tools'`)
  }
  if (Array.isArray(p.input)) {
    p.input.forEach((item, i) => {
      if (item.type !== 'function_call') return
      let v: unknown
      try {
        v = JSON.parse(item.arguments)
      } catch {
        v = null
      }
      if (typeof v !== 'object' || v === null || Array.isArray(v)) {
        throw new OnnxdError('invalid_value', `Invalid value for 'input[${i}].arguments': expected the JSON text of an object. Given: ${quote(item.arguments)}`)
      }
    })
  }
}

/**
 * Checks values; throws 422 naming the first bad field: fields onnxd cannot honour first, then items and tools it
 * cannot give the model, then the values of the fields it honours. Null optional values count as absent.
 */
export function parseResponseParams(body: Record<string, unknown>): ResponseParams {
  // A missing field is the body's fault (400), before any value is looked at (422): the spec's order.
  if (body.input === undefined || body.input === null) throw new OnnxdError('invalid_request', "Missing required field 'input'")
  const value = honouredFields(body, 'responses', HONOURED_FIELDS)
  checkRefused(value)
  const p = checkedValues<ResponseParams>(checker, value)
  checkTools(p)
  return p
}

/** OpenAI's usage object of a response. */
export const ResponseUsage = Type.Object({
  input_tokens: Type.Integer(),
  input_tokens_details: Type.Object({ cached_tokens: Type.Integer() }),
  output_tokens: Type.Integer(),
  output_tokens_details: Type.Object({ reasoning_tokens: Type.Integer() }),
  total_tokens: Type.Integer(),
})
export type ResponseUsage = Static<typeof ResponseUsage>

const OutputText = Type.Object({ type: Type.Literal('output_text'), text: Type.String(), annotations: Type.Array(Type.Unknown()), logprobs: Type.Array(Type.Unknown()) })
export type OutputText = Static<typeof OutputText>

export const OutputMessage = Type.Object({
  type: Type.Literal('message'),
  id: Type.String(),
  status: Type.Union([Type.Literal('in_progress'), Type.Literal('completed'), Type.Literal('incomplete')]),
  role: Type.Literal('assistant'),
  content: Type.Array(OutputText),
})
export type OutputMessage = Static<typeof OutputMessage>

export const OutputFunctionCall = Type.Object({
  type: Type.Literal('function_call'),
  id: Type.String(),
  call_id: Type.String(),
  name: Type.String(),
  arguments: Type.String(),
  status: Type.Union([Type.Literal('in_progress'), Type.Literal('completed'), Type.Literal('incomplete')]),
})
export type OutputFunctionCall = Static<typeof OutputFunctionCall>
export type OutputItem = OutputMessage | OutputFunctionCall

/** The response object (OpenAI `response`), as answered, streamed in its events and kept. */
export const ResponseSchema = Type.Object(
  {
    id: Type.String(),
    object: Type.Literal('response'),
    created_at: Type.Integer(),
    status: Type.Union([Type.Literal('in_progress'), Type.Literal('completed'), Type.Literal('incomplete'), Type.Literal('failed')]),
    error: Type.Union([Type.Null(), Type.Object({ code: Type.String(), message: Type.String() })]),
    incomplete_details: Type.Union([Type.Null(), Type.Object({ reason: Type.String() })]),
    instructions: Type.Union([Type.String(), Type.Null()]),
    max_output_tokens: Type.Union([Type.Integer(), Type.Null()]),
    model: Type.String(),
    output: Type.Array(Type.Union([OutputMessage, OutputFunctionCall])),
    parallel_tool_calls: Type.Boolean(),
    previous_response_id: Type.Union([Type.String(), Type.Null()]),
    reasoning: Type.Object({ effort: Type.Null(), summary: Type.Null() }),
    store: Type.Boolean(),
    temperature: Type.Union([Type.Number(), Type.Null()]),
    text: Type.Object({ format: TextFormat }),
    tool_choice: ResponsesToolChoice,
    tools: Type.Array(ResponsesFunctionTool),
    top_p: Type.Union([Type.Number(), Type.Null()]),
    truncation: Type.Literal('disabled'),
    usage: Type.Union([ResponseUsage, Type.Null()]),
    metadata: Type.Record(Type.String(), Type.String()),
    background: Type.Boolean(),
  },
  { additionalProperties: true },
)
export type ResponseObject = Static<typeof ResponseSchema>
