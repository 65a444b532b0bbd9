// Which request fields onnxd honours, which it accepts as information only, and which it refuses (422 naming the
// field) because it cannot honour them: one table for every /v1 surface (OpenAI's chat completions, completions and
// responses, Anthropic's messages). A field in no
// list is refused as unrecognized, never dropped. Null values count as absent, as with OpenAI. Also what both routes
// do with the fields they honour: the sampling fields under their node names, a value error as a 422.
// Imports: shared errors and sampling field definitions, the contract's request type.
import type { CompletionRequest } from '../../contract/completions.js'
import { clip, OnnxdError, quote } from '../../shared/errors.js'
import { checkFieldCombinations, openAiNames, SAMPLING_FIELD_NAMES } from '../../shared/sampling.js'

export type Endpoint = 'chat' | 'completions' | 'responses' | 'messages'

/** A field onnxd does not act on: the values it accepts anyway (honoured trivially, or information only). */
interface Passive {
  /** Whether `v` can be accepted as it is. */
  accepts(v: unknown): boolean
  /** Why other values are refused, and what is accepted instead (ends the 422's message). */
  why: string
  /** Other values are malformed rather than unsupported ("Invalid value for …"). */
  malformed?: true
}

const isString = (v: unknown): boolean => typeof v === 'string'
const emptyArray = (v: unknown): boolean => Array.isArray(v) && v.length === 0
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)
const never = (): boolean => false
/** The `type` of an item, part, block or tool a client sent (undefined when it is not an object). */
export const typeOf = (v: unknown): unknown => (typeof v === 'object' && v !== null ? (v as { type?: unknown }).type : undefined)

/**
 * The entries of `list` (items, content parts or blocks, tools) whose `type` onnxd cannot give the model: a 422
 * naming the first as `at[i]` + `suffix`, `why` saying what it is given the type. Entries without a string type are
 * left to the value schema.
 */
export function refuseTypes(list: unknown, at: string, allowed: ReadonlySet<string>, why: (type: string) => string, suffix = ''): void {
  if (!Array.isArray(list)) return
  list.forEach((x: unknown, i) => {
    const t = typeOf(x)
    if (typeof t === 'string' && !allowed.has(t)) throw unsupported(`${at}[${i}]${suffix}`, why(clip(t)))
  })
}

const NO_TOOLS = "functions and function_call are OpenAI's deprecated forms; send tools and tool_choice"

/** Fields both endpoints know. */
const COMMON: Readonly<Record<string, Passive>> = {
  user: { accepts: isString, why: 'it must be a string', malformed: true },
}

/** Chat's own (OpenAI's chat completions request). */
const CHAT: Readonly<Record<string, Passive>> = {
  // Information only.
  safety_identifier: { accepts: isString, why: 'it must be a string', malformed: true },
  prompt_cache_key: { accepts: isString, why: 'it must be a string (prefix caching is automatic)', malformed: true },
  metadata: {
    accepts: (v) => isObject(v) && Object.values(v).every(isString),
    why: 'it must be an object of string values',
    malformed: true,
  },
  store: { accepts: (v) => v === false, why: 'completions are not stored; only false is accepted' },
  service_tier: {
    accepts: (v) => v === 'auto' || v === 'default',
    why: "there is one service tier; only 'auto' or 'default' is accepted",
  },
  // Honoured trivially: they ask for what onnxd does anyway.
  modalities: {
    accepts: (v) => Array.isArray(v) && v.length === 1 && v[0] === 'text',
    why: 'only text output is supported; only ["text"] is accepted',
  },
  functions: { accepts: emptyArray, why: `${NO_TOOLS}; only [] is accepted` },
  function_call: { accepts: (v) => v === 'none' || v === 'auto', why: `${NO_TOOLS}; only 'none' or 'auto' is accepted` },
  // Not supported at all.
  audio: { accepts: never, why: 'audio output is not supported' },
  prediction: { accepts: never, why: 'predicted outputs are not supported' },
  reasoning_effort: { accepts: never, why: 'reasoning controls are not supported' },
  verbosity: { accepts: never, why: 'verbosity controls are not supported' },
  web_search_options: { accepts: never, why: 'web search is not supported' },
}

/** Legacy completions' own (OpenAI's completions request). */
const COMPLETIONS: Readonly<Record<string, Passive>> = {
  best_of: { accepts: (v) => v === 1, why: 'only 1 is accepted' },
  suffix: { accepts: never, why: 'insertion (a suffix) is not supported' },
}

/** Only null values inside (a reasoning object that asks for nothing). */
const allNull = (v: unknown): boolean => isObject(v) && Object.values(v).every((x) => x === null)

/** OpenAI's responses request's own. */
const RESPONSES: Readonly<Record<string, Passive>> = {
  safety_identifier: CHAT.safety_identifier!,
  prompt_cache_key: CHAT.prompt_cache_key!,
  service_tier: CHAT.service_tier!,
  prompt_cache_retention: { accepts: (v) => v === 'in_memory', why: "the prefix cache lives in the node's memory; only 'in_memory' is accepted" },
  truncation: { accepts: (v) => v === 'disabled', why: "the input is never truncated (an input over the context is a 422); only 'disabled' is accepted" },
  include: { accepts: emptyArray, why: 'no extra output data (reasoning, logprobs, tool results) is produced; only [] is accepted' },
  background: { accepts: (v) => v === false, why: 'background responses are not supported; only false is accepted' },
  reasoning: { accepts: allNull, why: 'reasoning controls are not supported by the models onnxd serves' },
  stream_options: {
    accepts: (v) => isObject(v) && Object.entries(v).every(([k, x]) => k === 'include_obfuscation' && (x === false || x === null)),
    why: 'stream obfuscation is not supported; only {"include_obfuscation": false} is accepted',
  },
  top_logprobs: { accepts: (v) => v === 0, why: 'log-probabilities are not returned by /v1/responses; use /v1/chat/completions' },
  max_tool_calls: { accepts: never, why: 'built-in tools are not supported, so there are no tool calls to limit' },
  conversation: { accepts: never, why: 'conversations are not supported; continue a response with previous_response_id' },
  prompt: { accepts: never, why: 'stored prompt templates are not supported; send input and instructions' },
  context_management: { accepts: never, why: 'context management is not supported' },
}

/** Anthropic's messages request's own. */
const MESSAGES: Readonly<Record<string, Passive>> = {
  metadata: {
    accepts: (v) => isObject(v) && Object.entries(v).every(([k, x]) => k === 'user_id' && (x === null || isString(x))),
    why: 'it must be an object with an optional string user_id',
    malformed: true,
  },
  service_tier: { accepts: (v) => v === 'auto' || v === 'standard_only', why: "there is one service tier; only 'auto' or 'standard_only' is accepted" },
  thinking: { accepts: (v) => isObject(v) && v.type === 'disabled', why: 'extended thinking is not supported by the models onnxd serves; only {"type": "disabled"} is accepted' },
  // Prompt caching is automatic (the node's prefix cache): a breakpoint asks for what happens anyway.
  cache_control: { accepts: (v) => isObject(v) && v.type === 'ephemeral', why: 'only {"type": "ephemeral"} is accepted (prefix caching is automatic)' },
  speed: { accepts: (v) => v === 'standard', why: "there is one speed; only 'standard' is accepted" },
  container: { accepts: never, why: 'code execution containers are not supported' },
  mcp_servers: { accepts: never, why: 'MCP servers are not supported' },
  context_management: { accepts: never, why: 'context management is not supported' },
  inference_geo: { accepts: never, why: 'inference geography cannot be chosen' },
}

/** Per endpoint, the fields onnxd does not act on. Sampling fields, `stream`, `model` and the prompt are the routes' own. */
export const PASSIVE_FIELDS: Readonly<Record<Endpoint, Readonly<Record<string, Passive>>>> = {
  chat: { ...COMMON, ...CHAT },
  completions: { ...COMMON, ...COMPLETIONS },
  responses: { ...COMMON, ...RESPONSES },
  messages: MESSAGES,
}

/** The refusal of a field onnxd cannot honour: 422, naming the field (and a short form of the value). */
export function unsupported(field: string, why: string, value?: unknown): OnnxdError {
  const given = value === undefined ? '' : ` Given: ${quote(value)}`
  return new OnnxdError('invalid_value', `Unsupported parameter '${clip(field)}': ${why}.${given}`)
}

/**
 * Checks the body's fields against `honoured` (the route's own schema properties) and PASSIVE_FIELDS; throws 422 for
 * the first field onnxd cannot honour or does not know. Returns the honoured fields (nulls dropped), for the route's
 * value schema to check.
 */
export function honouredFields(body: Record<string, unknown>, endpoint: Endpoint, honoured: ReadonlySet<string>): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(body)) {
    if (v === null) continue
    if (honoured.has(k)) {
      out[k] = v
      continue
    }
    const table = PASSIVE_FIELDS[endpoint]
    const p = Object.hasOwn(table, k) ? table[k] : undefined
    if (p) {
      if (!p.accepts(v)) {
        throw p.malformed ? new OnnxdError('invalid_value', `Invalid value for '${clip(k)}': ${p.why}. Given: ${quote(v)}`) : unsupported(k, p.why, v)
      }
      continue
    }
    throw new OnnxdError('invalid_value', `Unrecognized request argument supplied: '${clip(k)}'; onnxd refuses fields it cannot honour`)
  }
  return out
}

/**
 * `stream_options`: `include_usage` is honoured, `include_obfuscation: false` accepted, anything else refused; only
 * with `stream: true`. Returns the options without nulls (undefined when none are left).
 */
export function checkStreamOptions(v: unknown, stream: unknown): { include_usage?: boolean } | undefined {
  if (v === undefined) return undefined
  if (!isObject(v)) throw new OnnxdError('invalid_value', `Invalid value for 'stream_options': expected an object. Given: ${quote(v)}`)
  const out: { include_usage?: boolean } = {}
  let given = false
  for (const [k, x] of Object.entries(v)) {
    if (x === null) continue
    given = true
    if (k === 'include_usage') {
      if (typeof x !== 'boolean') throw new OnnxdError('invalid_value', `Invalid value for 'stream_options.include_usage': expected a boolean. Given: ${quote(x)}`)
      out.include_usage = x
    } else if (k === 'include_obfuscation') {
      if (x !== false) throw unsupported('stream_options.include_obfuscation', 'stream obfuscation is not supported; only false is accepted', x)
    } else {
      throw new OnnxdError('invalid_value', `Unrecognized request argument supplied: 'stream_options.${clip(k)}'`)
    }
  }
  if (given && stream !== true) throw new OnnxdError('invalid_value', `Invalid value for 'stream_options': only allowed when 'stream' is true`)
  return out.include_usage === undefined ? undefined : out
}

const fieldName = (path: string): string => clip(path.slice(1).replace(/\//g, '.'))

/** The first failure of `checker` on `value` as a 422 naming the field, the rule and a short form of the value. */
export function firstInvalid(check: { Errors(v: unknown): { First(): { path: string; message: string; value: unknown } | undefined } }, value: unknown): OnnxdError {
  const e = check.Errors(value).First()!
  return new OnnxdError('invalid_value', `Invalid value for '${fieldName(e.path)}': ${e.message}. Given: ${quote(e.value)}`)
}

/** A surface's values once its refusals are done: the first failure of `check` as a 422 naming the field, then the rules between sampling fields. */
export function checkedValues<T>(check: Parameters<typeof firstInvalid>[0] & { Check(v: unknown): boolean }, value: Record<string, unknown>): T {
  if (!check.Check(value)) throw firstInvalid(check, value)
  checkCombinations(samplingFields(value))
  return value as T
}

/** Choices one request may ask for (`n`), and in all (`n` times the prompts of a legacy completion). */
export const MAX_N = 16
export const MAX_CHOICES = 64

/**
 * OpenAI's `n`: each node request `n` times, one per choice, in order. With a seed, choice j runs with seed + j, so
 * the choices differ and each replays. The node's prefix cache computes their shared prompt once (the batcher holds
 * back prompts whose blocks another prompt of the same group computes).
 */
export function withChoices(requests: CompletionRequest[], n: number): CompletionRequest[] {
  if (requests.length * n > MAX_CHOICES) {
    throw new OnnxdError('invalid_value', `Invalid value for 'n': at most ${MAX_CHOICES} choices per request (n x prompts). Given: ${n} x ${requests.length}`)
  }
  return requests.flatMap((r) => Array.from({ length: n }, (_, j) => (r.seed === undefined || j === 0 ? { ...r } : { ...r, seed: r.seed + j })))
}

/** The rules between sampling fields (shared with the engine), as 422s in OpenAI's wording; `given` under node names. */
export function checkCombinations(given: Partial<CompletionRequest>): void {
  checkFieldCombinations(given, (field, rule, value) => new OnnxdError('invalid_value', `Invalid value for '${field}': must be ${rule}. Given: ${quote(value)}`))
}

/** The sampling fields of an OpenAI request, each under its node name, from the first of its OpenAI names given. */
export function samplingFields(given: Record<string, unknown>): Partial<CompletionRequest> {
  const out: Record<string, unknown> = {}
  for (const k of SAMPLING_FIELD_NAMES) {
    const v = openAiNames(k).map((name) => given[name]).find((x) => x !== undefined)
    if (v !== undefined) out[k] = v
  }
  return out as Partial<CompletionRequest>
}
