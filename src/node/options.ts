// The worker node's options: one TypeBox schema, read once at start-up from a config-file section, the environment
// (ONNXD_*) and command-line flags (flags win); plus their mapping onto the engine's PoolOptions.
// Imports: shared errors, engine types, typebox.
import { totalmem } from 'node:os'
import { basename, resolve } from 'node:path'
import { Type, type Static, type TSchema } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import { OnnxdError } from '../shared/errors.js'
import { LOG_LEVELS, readConfigSection } from '../shared/config-file.js'
import type { PoolOptions } from '../engine/index.js'

/** The embedded default model; the CLI builds it on first use when no other model is configured. */
export const DEFAULT_MODEL_DIR = 'models/onnxd-tiny'

const MiB = 1024 * 1024

export const NodeOptions = Type.Object(
  {
    port: Type.Integer({ minimum: 0, maximum: 65535, default: 8081 }),
    host: Type.String({ minLength: 1, default: '127.0.0.1' }),
    /** Model bundle directory. */
    model: Type.String({ minLength: 1, default: DEFAULT_MODEL_DIR }),
    /** The id the model is served under (default: the bundle's folder name). */
    modelId: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
    /** Which ONNX variant of the bundle to load (`onnx/model_<dtype>.onnx`); absent: the bundle's default. */
    dtype: Type.Optional(
      Type.Union([Type.Literal('fp32'), Type.Literal('fp16'), Type.Literal('q4'), Type.Literal('int8'), Type.Literal('quantized')]),
    ),
    provider: Type.Union([Type.Literal('cpu'), Type.Literal('cuda'), Type.Literal('tensorrt')], { default: 'cpu' }),
    deviceId: Type.Integer({ minimum: 0, default: 0 }),
    /** Run on CPU when the requested GPU provider is missing, instead of failing start-up. */
    allowCpuFallback: Type.Boolean({ default: false }),
    /** Worker threads, each an engine replica with its own session. One worker using all cores suits CPU best. */
    workers: Type.Integer({ minimum: 1, maximum: 256, default: 1 }),
    /** ONNX Runtime intra-op threads per worker; 0 = all cores. */
    intraOpThreads: Type.Integer({ minimum: 0, maximum: 1024, default: 0 }),
    maxRunning: Type.Integer({ minimum: 1, default: 64 }),
    maxWaiting: Type.Integer({ minimum: 0, default: 256 }),
    maxBatchedTokens: Type.Integer({ minimum: 1, default: 512 }),
    /** KV-cache budget of the whole node, MiB, split evenly between workers. Default: a quarter of system memory, at most 4096. */
    kvBudgetMb: Type.Integer({ minimum: 1 }),
    heartbeatTimeoutMs: Type.Integer({ minimum: 100, default: 5000 }),
    /** A worker whose step loop shows no life for this long is replaced (its requests end with a retryable 500). */
    stallTimeoutMs: Type.Integer({ minimum: 100, default: 30_000 }),
    /** Threads that render chat templates and tokenize prompts, apart from the workers' step loops. */
    tokenizerThreads: Type.Integer({ minimum: 1, maximum: 64, default: 1 }),
    /** Grace period for in-flight requests after SIGTERM before the pool closes. */
    drainTimeoutMs: Type.Integer({ minimum: 0, default: 30_000 }),
    /** Largest accepted request body, bytes (413 above). */
    bodyLimit: Type.Integer({ minimum: 1024, default: 4 * MiB }),
    logLevel: Type.Union(
      LOG_LEVELS.map((l) => Type.Literal(l)),
      { default: 'info' },
    ),
  },
  { additionalProperties: false },
)
export type NodeOptions = Static<typeof NodeOptions>

type Field = keyof NodeOptions

/** The environment variable of each option. */
export const NODE_ENV: Record<Field, string> = {
  port: 'ONNXD_NODE_PORT',
  host: 'ONNXD_NODE_HOST',
  model: 'ONNXD_MODEL',
  modelId: 'ONNXD_MODEL_ID',
  dtype: 'ONNXD_DTYPE',
  provider: 'ONNXD_PROVIDER',
  deviceId: 'ONNXD_DEVICE_ID',
  allowCpuFallback: 'ONNXD_ALLOW_CPU_FALLBACK',
  workers: 'ONNXD_WORKERS',
  intraOpThreads: 'ONNXD_INTRA_OP_THREADS',
  maxRunning: 'ONNXD_MAX_RUNNING',
  maxWaiting: 'ONNXD_MAX_WAITING',
  maxBatchedTokens: 'ONNXD_MAX_BATCHED_TOKENS',
  kvBudgetMb: 'ONNXD_KV_BUDGET_MB',
  heartbeatTimeoutMs: 'ONNXD_HEARTBEAT_TIMEOUT_MS',
  stallTimeoutMs: 'ONNXD_STALL_TIMEOUT_MS',
  tokenizerThreads: 'ONNXD_TOKENIZER_THREADS',
  drainTimeoutMs: 'ONNXD_DRAIN_TIMEOUT_MS',
  bodyLimit: 'ONNXD_NODE_BODY_LIMIT',
  logLevel: 'ONNXD_LOG_LEVEL',
}

/** The command-line flag of each option, without dashes (`device-id` for deviceId). */
export const NODE_FLAGS: Record<Field, string> = Object.fromEntries(
  Object.keys(NODE_ENV).map((k) => [k, k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)]),
) as Record<Field, string>

export type Env = Record<string, string | undefined>

/** Machine facts that defaults depend on; tests pass their own. */
export interface SystemInfo {
  totalMemBytes: number
}

/** min(25% of system memory, 4096 MiB), in MiB. */
export function defaultKvBudgetMb(sys: SystemInfo): number {
  return Math.max(1, Math.min(Math.floor((sys.totalMemBytes * 0.25) / MiB), 4096))
}

/** The JSON type each field takes, for converting strings strictly (TypeBox's Value.Convert turns "1.5" into 1). */
function kindOf(schema: TSchema): string {
  if (typeof schema.type === 'string') return schema.type
  return 'string' // literal unions of strings
}

const INTEGER = /^[+-]?\d+$/
const BOOLEAN: Record<string, boolean> = { true: true, false: false, '1': true, '0': false, yes: true, no: false, on: true, off: false }

function fromString(field: Field, raw: string): unknown {
  const s = raw.trim()
  switch (kindOf(NodeOptions.properties[field])) {
    case 'integer':
      return INTEGER.test(s) ? Number(s) : raw
    case 'number':
      return s !== '' && Number.isFinite(Number(s)) ? Number(s) : raw
    case 'boolean':
      return BOOLEAN[s.toLowerCase()] ?? raw
    default:
      return s
  }
}

/** What a field's schema asks for, in words ("must be an integer >= 1", "must be one of cpu, cuda, tensorrt"). */
function requirement(schema: TSchema, value: unknown): string | null {
  if (Array.isArray(schema.anyOf)) return `must be one of ${(schema.anyOf as TSchema[]).map((s) => String(s.const)).join(', ')}`
  switch (schema.type) {
    case 'integer':
    case 'number': {
      const kind = schema.type === 'integer' ? 'an integer' : 'a number'
      if (typeof value !== 'number' || (schema.type === 'integer' && !Number.isInteger(value))) return `must be ${kind}`
      if (typeof schema.minimum === 'number' && value < schema.minimum) return `must be >= ${schema.minimum}`
      if (typeof schema.maximum === 'number' && value > schema.maximum) return `must be <= ${schema.maximum}`
      return null
    }
    case 'boolean':
      return 'must be true or false (also 1/0, yes/no, on/off)'
    case 'string':
      if (typeof value !== 'string') return 'must be a string'
      if (typeof schema.minLength === 'number' && value.length < schema.minLength) return 'must not be empty'
      if (typeof schema.maxLength === 'number' && value.length > schema.maxLength) return `must be at most ${schema.maxLength} characters`
      return null
  }
  return null
}

function describe(field: Field): string {
  return `${field} (${NODE_ENV[field]}, --${NODE_FLAGS[field]})`
}

/**
 * Reads the node's options: `file` (the `node` section of onnxd.config.json) under the environment under `flags`.
 * Lists every problem in one `OnnxdError('config')`, naming each field with its variable and flag. Frozen.
 */
export function loadNodeOptions(
  env: Env,
  flags: Partial<Record<Field, unknown>> = {},
  file: Record<string, unknown> = {},
  sys: SystemInfo = { totalMemBytes: totalmem() },
): NodeOptions {
  const problems: string[] = []
  const raw: Record<string, unknown> = { ...file }
  for (const [field, name] of Object.entries(NODE_ENV) as [Field, string][]) {
    const v = env[name]
    if (v !== undefined && v !== '') raw[field] = fromString(field, v)
  }
  for (const [field, v] of Object.entries(flags) as [Field, unknown][]) {
    if (v === undefined) continue
    raw[field] = typeof v === 'string' && field in NODE_ENV ? fromString(field, v) : v
  }
  raw.kvBudgetMb ??= defaultKvBudgetMb(sys)

  const value = Value.Default(NodeOptions, raw) as Record<string, unknown>
  const seen = new Set<string>()
  for (const e of Value.Errors(NodeOptions, value)) {
    const field = e.path.split('/')[1] ?? ''
    if (seen.has(field)) continue // one problem per field: a union reports each branch
    seen.add(field)
    if (!(field in NODE_ENV)) {
      problems.push(`${field || '(root)'}: unknown option`)
      continue
    }
    const f = field as Field
    const what = requirement(NodeOptions.properties[f], e.value) ?? e.message
    problems.push(`${describe(f)}: ${what}. Given: ${JSON.stringify(e.value)}`)
  }
  if (problems.length === 0) {
    const v = value as NodeOptions
    if (v.maxBatchedTokens < v.maxRunning) {
      // Every running sequence decodes one token per step, so a step must fit one token per running sequence.
      problems.push(
        `${describe('maxBatchedTokens')} must be >= maxRunning (${NODE_ENV.maxRunning}). Given: ${v.maxBatchedTokens} and ${v.maxRunning}`,
      )
    }
  }
  if (problems.length > 0) {
    throw new OnnxdError('config', `invalid node configuration:\n  - ${problems.join('\n  - ')}`, { problems })
  }
  return deepFreeze(value as NodeOptions)
}

export { CONFIG_FILE } from '../shared/config-file.js'

/** The `node` section of the config file: `path` if given (must exist), else ./onnxd.config.json if present. */
export const readNodeConfig = (path?: string): Record<string, unknown> => readConfigSection('node', path)

/** Flags named like the options (`--device-id`, `--max-running`) as loader input; others are ignored. */
export function nodeFlags(values: Record<string, unknown>): Partial<Record<Field, unknown>> {
  const out: Partial<Record<Field, unknown>> = {}
  for (const [field, flag] of Object.entries(NODE_FLAGS) as [Field, string][]) {
    if (values[flag] !== undefined) out[field] = values[flag]
  }
  return out
}

/** The id the model is served under: `modelId`, else the bundle's folder name (as the pool does). */
export function servedModelId(opts: Pick<NodeOptions, 'model' | 'modelId'>): string {
  return opts.modelId ?? basename(resolve(opts.model))
}

/** The engine pool's options for these node options. */
export function toPoolOptions(opts: NodeOptions): PoolOptions {
  const pool: PoolOptions = {
    modelDir: opts.model,
    modelId: servedModelId(opts),
    provider: opts.provider,
    deviceId: opts.deviceId,
    allowCpuFallback: opts.allowCpuFallback,
    workers: opts.workers,
    intraOpThreads: opts.intraOpThreads,
    maxRunning: opts.maxRunning,
    maxWaiting: opts.maxWaiting,
    maxBatchedTokens: opts.maxBatchedTokens,
    // The pool hands kvBudgetBytes to every worker; memory is per machine, so split the node's budget.
    kvBudgetBytes: Math.floor((opts.kvBudgetMb * MiB) / opts.workers),
    heartbeatTimeoutMs: opts.heartbeatTimeoutMs,
    stallTimeoutMs: opts.stallTimeoutMs,
    tokenizerThreads: opts.tokenizerThreads,
  }
  if (opts.dtype !== undefined) pool.dtype = opts.dtype
  return pool
}

function deepFreeze<T>(v: T): T {
  if (v && typeof v === 'object') {
    for (const x of Object.values(v)) deepFreeze(x)
    Object.freeze(v)
  }
  return v
}
