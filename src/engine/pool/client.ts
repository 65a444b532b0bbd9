// What a server holds of the engine: EngineClient, the interface EnginePool (pool.ts) implements and test fakes
// stand in for, and the plain data it speaks: the pool's options, its health, the observer of its steps. Defined
// here, beside the pool, and re-exported by the engine's entry (../index.ts), which other layers import. Types only.
// Imports: engine types, shared.
import type { EngineRequest, EngineStats, SeqEvent } from '../types.js'
import type { BatcherObserver, BatcherOptions } from '../scheduler/batcher.js'
import type { Dtype, Provider } from '../../shared/model.js'
import type { Runtime, RuntimeChoice } from '../model/runtime.js'
import type { GrammarLimits } from '../generation/grammar.js'

/** Batcher limits apply per worker; `kvBudgetBytes` is each worker's share of the node's budget. */
export interface PoolOptions extends Partial<BatcherOptions> {
  /** Model bundle directory, and the id it is served under (default: the folder name). */
  modelDir: string
  modelId?: string
  dtype?: Dtype
  /** A chat template (its text) in place of the bundle's. */
  chatTemplate?: string
  provider?: Provider
  deviceId?: number
  allowCpuFallback?: boolean
  /** Worker threads, each an engine replica with its own session. */
  workers?: number
  /** ORT intra-op threads per worker (0 = ORT's default: all cores). */
  intraOpThreads?: number
  /** Which ORT API runs the steps (default 'auto': model/runtime.ts's defaultRuntime for the provider); 'capi' falls back to 'js' where the C API cannot load. */
  runtime?: RuntimeChoice
  /** The longest sequence served, prompt and output (vLLM's --max-model-len); default the model's context length. */
  maxModelLen?: number
  /** WebGPU graph capture of the decode step (model/captured-step.ts); refused where it cannot run. */
  graphCapture?: boolean
  /** 4-bit (MatMulNBits) weights served on ORT's int8 kernels (model/int8-weights.ts); CPU only. */
  nbitsAsInt8?: boolean
  /** WebGPU provider options passed on to ORT (model/runtime.ts WEBGPU_OPTIONS); refused where they cannot apply. */
  webgpuOptions?: Readonly<Record<string, string>>
  /** A worker whose step loop shows no sign of life for this long is unhealthy. */
  heartbeatTimeoutMs?: number
  /** ... and for this long is replaced: its requests end with worker_crashed and a fresh replica loads (default 30 s). */
  stallTimeoutMs?: number
  /** Threads that render chat templates and tokenize prompts, apart from the replicas' step loops (default 1). */
  tokenizerThreads?: number
  /** Structured outputs' grammar thread in each worker: compile time limit and heap bound (grammar.ts). */
  grammar?: Partial<GrammarLimits>
  /** Test hook: lets tests crash or stall a worker through EngineClient.inject(). */
  faultInjection?: boolean
}

export interface WorkerHealth {
  threadId: number
  ready: boolean
  /** Milliseconds since the worker's step loop last showed life. */
  heartbeatAgeMs: number
  stats: EngineStats | null
}

export interface PoolHealth {
  status: 'loading' | 'ready' | 'unhealthy' | 'draining'
  model: string
  provider: Provider
  /** The API the workers' steps run on (what they report once loaded; the configured one until then). */
  runtime: Runtime
  /** How the weights are served where that differs from the file (--nbits-as-int8); absent otherwise. */
  weights?: string
  contextLength: number | null
  /** Worker threads the pool is configured to run (`--workers`), loaded or not. */
  configuredWorkers: number
  /** The live workers that have loaded the model, each ready unless it is being replaced. */
  workers: WorkerHealth[]
  running: number
  waiting: number
  /** Sequences the pool can take now: free running slots plus free queue places, over all workers. */
  capacity: number
  /** Running slots a new sequence would take at once, without waiting: free slots less those already claimed by waiters. */
  freeSlots: number
  kvUsedBytes: number
  prefixCacheBytes: number
  kvBudgetBytes: number
  restarts: number
}

/** A batcher's observations, merged over every worker, plus the pool's own events. */
export interface EngineObserver extends BatcherObserver {
  onWorkerRestart?(): void
}

export interface EngineClient {
  /** Starts the workers if needed; resolves once every one has loaded the model (rejects with the load error, e.g. a bad bundle). */
  ready(): Promise<void>
  /** Starts a request; events arrive on `sink` (accepted, tokens, done | error). Returns a cancel function. */
  submit(req: EngineRequest, sink: (e: SeqEvent) => void): () => void
  /**
   * How many tokens a text prompt is: `messages` through the chat template (with `tools`), or `prompt`, rendered and
   * tokenized as submit() would, on a tokenizer thread; nothing runs on the model. Rejects with the error a
   * completion of it would get before it reached a replica (503 while loading or draining, a prompt over the byte
   * bound, no tokenizer, a template that fails).
   */
  countTokens(req: Pick<EngineRequest, 'messages' | 'prompt' | 'tools'>): Promise<number>
  health(): PoolHealth
  /** Stops admitting (health turns draining); in-flight requests go on. */
  drain(): void
  close(): Promise<void>
  /** Test hook (only with faultInjection): crash a worker, or stall its step loop for `ms`. */
  inject?(fault: { kind: 'crash' } | { kind: 'stall'; ms: number }): Promise<void>
}
