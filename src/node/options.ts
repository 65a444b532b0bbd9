// The worker node's options: one TypeBox schema, read once at start-up from a config-file section, the environment
// (ONNXD_*) and command-line flags (flags win) by the shared loader; plus their mapping onto the engine's PoolOptions.
// Imports: shared options and config file, engine types, typebox.
import { totalmem } from 'node:os'
import { readFileSync } from 'node:fs'
import { OnnxdError } from '../shared/errors.js'
import { Type, type Static } from '@sinclair/typebox'
import { LOG_LEVELS, readConfigSection } from '../shared/config-file.js'
import { flagInput, loadOptions, optionFlags, optionName, type Env, type OptionsSpec } from '../shared/options.js'
import { DEFAULT_MODEL_DIR, DTYPES, modelIdFor, PROVIDERS } from '../shared/model.js'
import { RUNTIME_CHOICES, parseWebgpuOptions, type PoolOptions } from '../engine/index.js'
import { hubModelId } from './hub-model.js'

export { DEFAULT_MODEL_DIR }

const MiB = 1024 * 1024

export const NodeOptions = Type.Object(
  {
    port: Type.Integer({ minimum: 0, maximum: 65535, default: 8081 }),
    host: Type.String({ minLength: 1, default: '127.0.0.1' }),
    /** Model bundle directory, or a Hugging Face hub id (`owner/name`) fetched into the hub cache before loading. */
    model: Type.String({ minLength: 1, default: DEFAULT_MODEL_DIR }),
    /** The hub revision (branch, tag or commit) of a hub id --model; default `main`. */
    revision: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
    /** The id the model is served under (default: the bundle's folder name). */
    modelId: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
    /** Which ONNX variant of the bundle to load (`onnx/model_<dtype>.onnx`); absent: the bundle's default. */
    dtype: Type.Optional(Type.Union(DTYPES.map((d) => Type.Literal(d)))),
    /** A Jinja chat template file used in place of the bundle's (vLLM's --chat-template), e.g. one that renders tools. */
    chatTemplate: Type.Optional(Type.String({ minLength: 1 })),
    provider: Type.Union(
      PROVIDERS.map((p) => Type.Literal(p)),
      { default: 'cpu' },
    ),
    deviceId: Type.Integer({ minimum: 0, default: 0 }),
    /** Run on CPU when the requested GPU provider is missing, instead of failing start-up. */
    allowCpuFallback: Type.Boolean({ default: false }),
    /** Which ORT API runs the steps: auto (runtime.ts defaultRuntime: capi on cpu and webgpu, js on cuda and tensorrt), onnxruntime-node's JS API, or ORT's C API (falls back to js where it cannot load or run the graph). */
    runtime: Type.Union(
      RUNTIME_CHOICES.map((r) => Type.Literal(r)),
      { default: 'auto' },
    ),
    /**
     * The longest sequence served, prompt and output (vLLM's --max-model-len): requests past it are refused as past
     * the context, and /health reports it as the context length. Default: the model's context length.
     */
    maxModelLen: Type.Optional(Type.Integer({ minimum: 2 })),
    /**
     * WebGPU graph capture: the decode step over all the device cache's slots is recorded once and replayed at every
     * later step (provider webgpu, runtime capi, a GroupQueryAttention model; refused elsewhere).
     */
    graphCapture: Type.Boolean({ default: false }),
    /**
     * Serve a 4-bit file's weights (com.microsoft MatMulNBits: onnx-community's q4, onnxruntime-genai's int4 CPU
     * builds) on ORT's int8 kernels, converted at load: faster at 16 and more rows on CPUs where ORT's 4-bit kernel is
     * the slower one, at twice the 4-bit weights' memory. Provider cpu only; refused for a file with no MatMulNBits.
     */
    nbitsAsInt8: Type.Boolean({ default: false }),
    /**
     * WebGPU provider options passed on to ORT, `key=value` comma-separated (`validationMode=disabled`): the keys and
     * values of the engine's WEBGPU_OPTIONS. Provider webgpu, runtime capi only.
     */
    webgpuOptions: Type.Optional(Type.String({ minLength: 1, maxLength: 1024 })),
    /** Worker threads, each an engine replica with its own session. One worker using all cores suits CPU best. */
    workers: Type.Integer({ minimum: 1, maximum: 256, default: 1 }),
    /** ONNX Runtime intra-op threads per worker; 0 = all cores. */
    intraOpThreads: Type.Integer({ minimum: 0, maximum: 1024, default: 0 }),
    maxRunning: Type.Integer({ minimum: 1, default: 64 }),
    maxWaiting: Type.Integer({ minimum: 0, default: 256 }),
    maxBatchedTokens: Type.Integer({ minimum: 1, default: 512 }),
    /** KV-cache budget of the whole node, MiB, split evenly between workers. Default: a quarter of the memory the process may use (the container's limit, else the host's), at most 4096. */
    kvBudgetMb: Type.Integer({ minimum: 1 }),
    /** Turns automatic prefix caching off: every prompt is computed whole (it is on by default). */
    noPrefixCaching: Type.Boolean({ default: false }),
    /**
     * Speculative decoding by n-gram lookup in each sequence's own tokens: up to this many draft tokens per row and
     * decode step, checked in that step, when every row decodes greedily; 0 (the default) is off.
     */
    speculativeTokens: Type.Integer({ minimum: 0, maximum: 16, default: 0 }),
    /** Speculative decoding drafts only while at most this many sequences run (vLLM's disable-by-batch-size). */
    speculativeMaxRows: Type.Integer({ minimum: 1, maximum: 1024, default: 4 }),
    heartbeatTimeoutMs: Type.Integer({ minimum: 100, default: 5000 }),
    /** A worker whose step loop shows no life for this long is replaced (its requests end with a retryable 500). */
    stallTimeoutMs: Type.Integer({ minimum: 100, default: 30_000 }),
    /** A structured output's grammar that takes longer to compile is refused (422), its grammar thread replaced. */
    grammarCompileMs: Type.Integer({ minimum: 100, default: 10_000 }),
    /** Each worker's grammar thread is replaced (its memory given back) when its heap grows past this, MiB. */
    grammarMemoryMb: Type.Integer({ minimum: 64, maximum: 2048, default: 512 }),
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
  revision: 'ONNXD_REVISION',
  modelId: 'ONNXD_MODEL_ID',
  dtype: 'ONNXD_DTYPE',
  chatTemplate: 'ONNXD_CHAT_TEMPLATE',
  provider: 'ONNXD_PROVIDER',
  deviceId: 'ONNXD_DEVICE_ID',
  allowCpuFallback: 'ONNXD_ALLOW_CPU_FALLBACK',
  runtime: 'ONNXD_RUNTIME',
  maxModelLen: 'ONNXD_MAX_MODEL_LEN',
  graphCapture: 'ONNXD_GRAPH_CAPTURE',
  nbitsAsInt8: 'ONNXD_NBITS_AS_INT8',
  webgpuOptions: 'ONNXD_WEBGPU_OPTIONS',
  workers: 'ONNXD_WORKERS',
  intraOpThreads: 'ONNXD_INTRA_OP_THREADS',
  maxRunning: 'ONNXD_MAX_RUNNING',
  maxWaiting: 'ONNXD_MAX_WAITING',
  maxBatchedTokens: 'ONNXD_MAX_BATCHED_TOKENS',
  kvBudgetMb: 'ONNXD_KV_BUDGET_MB',
  noPrefixCaching: 'ONNXD_NO_PREFIX_CACHING',
  speculativeTokens: 'ONNXD_SPECULATIVE_TOKENS',
  speculativeMaxRows: 'ONNXD_SPECULATIVE_MAX_ROWS',
  heartbeatTimeoutMs: 'ONNXD_HEARTBEAT_TIMEOUT_MS',
  stallTimeoutMs: 'ONNXD_STALL_TIMEOUT_MS',
  grammarCompileMs: 'ONNXD_GRAMMAR_COMPILE_MS',
  grammarMemoryMb: 'ONNXD_GRAMMAR_MEMORY_MB',
  tokenizerThreads: 'ONNXD_TOKENIZER_THREADS',
  drainTimeoutMs: 'ONNXD_DRAIN_TIMEOUT_MS',
  bodyLimit: 'ONNXD_NODE_BODY_LIMIT',
  logLevel: 'ONNXD_LOG_LEVEL',
}

/** The command-line flag of each option, without dashes (`device-id` for deviceId). */
export const NODE_FLAGS: Record<Field, string> = optionFlags(NODE_ENV)

export type { Env }

/** Machine facts that defaults depend on; tests pass their own. */
export interface SystemInfo {
  /** The memory this process may use (memoryLimitBytes()). */
  totalMemBytes: number
}

/**
 * The memory this process may use: the host's, or the container's limit (cgroup, as a Kubernetes pod's memory limit
 * sets it) when that is lower. A node sized by the host's memory inside a smaller container would be OOM-killed.
 */
export function memoryLimitBytes(): number {
  const limit = process.constrainedMemory?.() ?? 0
  return limit > 0 ? Math.min(totalmem(), limit) : totalmem()
}

/** min(25% of the memory this process may use, 4096 MiB), in MiB. */
export function defaultKvBudgetMb(sys: SystemInfo): number {
  return Math.max(1, Math.min(Math.floor((sys.totalMemBytes * 0.25) / MiB), 4096))
}

const SPEC: OptionsSpec<typeof NodeOptions> = {
  name: 'node',
  schema: NodeOptions,
  env: NODE_ENV,
  check: (v) => [
    // Every running sequence decodes one token per step, so a step must fit one token per running sequence.
    ...(typeof v.maxBatchedTokens === 'number' && typeof v.maxRunning === 'number' && v.maxBatchedTokens < v.maxRunning
      ? [`${optionName(NODE_ENV, 'maxBatchedTokens')} must be >= maxRunning (${NODE_ENV.maxRunning}). Given: ${v.maxBatchedTokens} and ${v.maxRunning}`]
      : []),
    ...(typeof v.webgpuOptions === 'string'
      ? v.provider !== 'webgpu'
        ? [`${optionName(NODE_ENV, 'webgpuOptions')} applies to --provider webgpu (${NODE_ENV.provider}); given provider ${String(v.provider)}`]
        : parseWebgpuOptions(v.webgpuOptions).problems.map((p) => `${optionName(NODE_ENV, 'webgpuOptions')}: ${p}`)
      : []),
    // A revision picks a commit of a hub model: for a local bundle it would be silently ignored.
    ...(typeof v.revision === 'string' && typeof v.model === 'string' && hubModelId(v.model) === null
      ? [`${optionName(NODE_ENV, 'revision')} applies to a Hugging Face hub id --model (owner/name); ${v.model} is a local bundle`]
      : []),
  ],
}

/**
 * Reads the node's options: `file` (the `node` section of onnxd.config.json) under the environment under `flags`
 * (see loadOptions). Lists every problem in one `OnnxdError('config')`, naming each field with its variable and
 * flag. Frozen.
 */
export function loadNodeOptions(
  env: Env,
  flags: Partial<Record<Field, unknown>> = {},
  file: Record<string, unknown> = {},
  sys: SystemInfo = { totalMemBytes: memoryLimitBytes() },
): NodeOptions {
  return loadOptions(SPEC, env, flags, file, { kvBudgetMb: defaultKvBudgetMb(sys) })
}

export { CONFIG_FILE } from '../shared/config-file.js'

/** The `node` section of the config file: `path` if given (must exist), else ./onnxd.config.json if present. */
export const readNodeConfig = (path?: string): Record<string, unknown> => readConfigSection('node', path)

/** Flags named like the options (`--device-id`, `--max-running`) as loader input; others are ignored. */
export function nodeFlags(values: Record<string, unknown>): Partial<Record<Field, unknown>> {
  return flagInput(NODE_FLAGS, values)
}

/** The id the model is served under: `modelId`, else the hub id (as vLLM does), else the bundle's folder name. */
export function servedModelId(opts: Pick<NodeOptions, 'model' | 'modelId'>): string {
  return opts.modelId ?? hubModelId(opts.model) ?? modelIdFor(opts.model)
}

/** The text of a --chat-template file; a config error naming the file when it cannot be read. */
export function readChatTemplate(path: string): string {
  try {
    return readFileSync(path, 'utf8')
  } catch (e) {
    throw new OnnxdError('config', `--chat-template ${path}: cannot read it (${(e as Error).message})`)
  }
}

/** The engine pool's options for these node options. */
export function toPoolOptions(opts: NodeOptions): PoolOptions {
  const pool: PoolOptions = {
    modelDir: opts.model,
    modelId: servedModelId(opts),
    provider: opts.provider,
    deviceId: opts.deviceId,
    allowCpuFallback: opts.allowCpuFallback,
    runtime: opts.runtime,
    graphCapture: opts.graphCapture,
    nbitsAsInt8: opts.nbitsAsInt8,
    workers: opts.workers,
    intraOpThreads: opts.intraOpThreads,
    maxRunning: opts.maxRunning,
    maxWaiting: opts.maxWaiting,
    maxBatchedTokens: opts.maxBatchedTokens,
    // The pool hands kvBudgetBytes to every worker; memory is per machine, so split the node's budget.
    kvBudgetBytes: Math.floor((opts.kvBudgetMb * MiB) / opts.workers),
    prefixCaching: !opts.noPrefixCaching,
    speculativeTokens: opts.speculativeTokens,
    speculativeMaxRows: opts.speculativeMaxRows,
    heartbeatTimeoutMs: opts.heartbeatTimeoutMs,
    stallTimeoutMs: opts.stallTimeoutMs,
    tokenizerThreads: opts.tokenizerThreads,
    grammar: { compileMs: opts.grammarCompileMs, heapBytes: opts.grammarMemoryMb * MiB },
  }
  if (opts.dtype !== undefined) pool.dtype = opts.dtype
  if (opts.maxModelLen !== undefined) pool.maxModelLen = opts.maxModelLen
  if (opts.webgpuOptions !== undefined) pool.webgpuOptions = parseWebgpuOptions(opts.webgpuOptions).options
  if (opts.chatTemplate !== undefined) pool.chatTemplate = readChatTemplate(opts.chatTemplate)
  return pool
}
