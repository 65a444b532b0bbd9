// EnginePool, the main-thread side of the engine: a piscina pool of worker threads, each running one Engine
// (engine.ts), behind the EngineClient interface (client.ts) that the node holds. Routes requests to workers, relays
// their events, merges their stats and observations, and tracks health. Imports: engine, shared.
import { availableParallelism } from 'node:os'
import { randomUUID } from 'node:crypto'
import { BroadcastChannel, MessageChannel } from 'node:worker_threads'
import { Piscina } from 'piscina'
import { fromErrorData, OnnxdError, toErrorData } from '../../shared/errors.js'
import type { EngineClient, EngineObserver, PoolHealth, PoolOptions, WorkerHealth } from './client.js'
import type { Provider } from '../../shared/model.js'
import type { EngineOptions } from '../engine.js'
import { batcherOptions } from '../engine.js'
import type { EngineRequest, EngineStats, SeqEvent } from '../types.js'
import { checkOnePrompt } from '../../shared/prompt-input.js'
import { intendedRuntime, type Runtime } from '../model/runtime.js'
import { promptByteLimit, promptTextBytes, type PromptBound } from '../tokenizer/prompt.js'
import { GateTable, gateBuffer } from './gate.js'
import type { Broadcast, PortCommand, Task, TokenizeReply, TokenizeTask, TokenizerWorkerData, WorkerData } from './protocol.js'

/** A worker entry: the compiled .js next to this file in production; under tsx/vitest the .ts source via tsx. */
function workerEntry(name: 'worker' | 'tokenizer-worker'): { filename: string; execArgv: string[] } {
  const fromTs = import.meta.url.endsWith('.ts')
  return {
    filename: new URL(`../worker/${name}.${fromTs ? 'ts' : 'js'}`, import.meta.url).href,
    execArgv: fromTs ? ['--import', 'tsx'] : [],
  }
}

/** How long a replica's step loop may show no life before it is replaced (DESIGN: a stalled replica is replaced). */
export const DEFAULT_STALL_TIMEOUT_MS = 30_000

interface WorkerState {
  ready: boolean
  stats: EngineStats | null
}

/** A request the pool is answering: which replica holds it once accepted, and how to end it from outside. */
interface Inflight {
  threadId?: number
  cancel(): void
  fail(err: OnnxdError): void
}

const isFull = (e: Error): boolean => /queue is at limit|no task queue available/i.test(e.message)

export class EnginePool implements EngineClient {
  private piscina: Piscina<Task, null> | null = null
  /** Threads that render chat templates and tokenize, off the engine replicas' step loops. */
  private tokenizers: Piscina<TokenizeTask, TokenizeReply> | null = null
  private readonly gates = new GateTable(gateBuffer())
  private readonly channel: BroadcastChannel
  private readonly channelName: string
  private readonly workers = new Map<number, WorkerState>()
  private readonly nWorkers: number
  private readonly heartbeatTimeoutMs: number
  private readonly stallTimeoutMs: number
  private readonly engineOptions: EngineOptions
  private info: { model: string; contextLength: number; provider: Provider; runtime: Runtime; weights: string | null } | null = null
  private bound: PromptBound | null = null
  private draining = false
  private closing = false
  private restarts = 0
  private loadError: Error | null = null
  /** Every worker has loaded the model once (what ready() waits for): from then on health may say `ready`. */
  private started = false
  private readonly readyWaiters: Array<{ resolve: () => void; reject: (e: Error) => void }> = []
  private readonly inflight = new Set<Inflight>()
  /** Replicas being replaced after a stall: no longer counted ready, never replaced twice. */
  private readonly replacing = new Set<number>()
  private monitor: NodeJS.Timeout | null = null

  constructor(
    private readonly opts: PoolOptions,
    private readonly observer: EngineObserver = {},
  ) {
    this.nWorkers = Math.max(1, opts.workers ?? 1)
    this.heartbeatTimeoutMs = opts.heartbeatTimeoutMs ?? 5000
    this.stallTimeoutMs = opts.stallTimeoutMs ?? DEFAULT_STALL_TIMEOUT_MS
    this.channelName = `onnxd-pool-${randomUUID()}`
    this.channel = new BroadcastChannel(this.channelName)
    this.channel.onmessage = (ev) => this.onBroadcast((ev as { data: Broadcast }).data)
    this.channel.unref()
    this.engineOptions = {
      modelDir: opts.modelDir,
      id: opts.modelId,
      dtype: opts.dtype,
      chatTemplate: opts.chatTemplate,
      provider: opts.provider,
      deviceId: opts.deviceId,
      allowCpuFallback: opts.allowCpuFallback,
      runtime: opts.runtime,
      graphCapture: opts.graphCapture,
      nbitsAsInt8: opts.nbitsAsInt8,
      webgpuOptions: opts.webgpuOptions,
      maxModelLen: opts.maxModelLen,
      // One worker on CPU uses every core; several split them.
      intraOpThreads: opts.intraOpThreads || Math.max(1, Math.floor(availableParallelism() / this.nWorkers)),
      ...batcherOptions(opts),
      grammar: opts.grammar,
    }
  }

  /**
   * Starts the worker threads (ready() does, once). Nothing starts at construction, so a caller that cannot bind
   * its port never has model loads in flight to wait for.
   */
  private start(): void {
    if (this.piscina || this.closing) return
    const limits = batcherOptions(this.opts)
    const workerData: WorkerData = { engine: this.engineOptions, channel: this.channelName, gates: this.gates.buffer, faultInjection: this.opts.faultInjection ?? false }
    const engineEntry = workerEntry('worker')
    const capacity = limits.maxRunning + limits.maxWaiting + 8
    this.piscina = new Piscina<Task, null>({
      filename: engineEntry.filename,
      execArgv: engineEntry.execArgv,
      minThreads: this.nWorkers,
      maxThreads: this.nWorkers,
      // Never let an idle worker exit: it holds a loaded model.
      idleTimeout: Infinity,
      // Each request is a long-lived task; a worker batches all of its tasks together.
      concurrentTasksPerWorker: capacity,
      maxQueue: 0,
      atomics: 'disabled',
      workerData,
    })
    this.piscina.on('workerDestroy', () => {
      if (this.closing) return
      this.restarts++
      this.observer.onWorkerRestart?.()
    })
    this.piscina.on('error', (e: Error) => {
      if (!this.info) this.failLoad(e)
    })
    const tokData: TokenizerWorkerData = { modelDir: this.opts.modelDir, modelId: this.opts.modelId, chatTemplate: this.opts.chatTemplate }
    const tokEntry = workerEntry('tokenizer-worker')
    const tokThreads = Math.max(1, this.opts.tokenizerThreads ?? 1)
    this.tokenizers = new Piscina<TokenizeTask, TokenizeReply>({
      filename: tokEntry.filename,
      execArgv: tokEntry.execArgv,
      minThreads: tokThreads,
      maxThreads: tokThreads,
      idleTimeout: Infinity,
      // Prompts waiting to be tokenized count against the node's capacity like sequences waiting in a replica.
      maxQueue: capacity * this.nWorkers,
      atomics: 'disabled',
      workerData: tokData,
    })
    this.tokenizers.run({ kind: 'info' }).then(
      (r) => {
        if (r.kind === 'info') this.bound = { maxTokenBytes: r.maxTokenBytes, lengthPreserving: r.lengthPreserving }
        this.settleReady()
      },
      (e: Error) => this.failLoad(new OnnxdError('bad_bundle', `tokenizer: ${e.message}`)),
    )
    this.monitor = setInterval(() => this.replaceStalled(), Math.max(50, Math.min(1000, this.stallTimeoutMs / 4)))
    this.monitor.unref()
  }

  private failLoad(e: Error): void {
    this.loadError ??= e
    for (const w of this.readyWaiters.splice(0)) w.reject(e)
  }

  private readyCount(): number {
    let n = 0
    for (const [id, w] of this.liveWorkers()) if (w.ready && !this.replacing.has(id)) n++
    return n
  }

  private isReady(): boolean {
    return this.bound !== null && this.readyCount() >= this.nWorkers
  }

  private settleReady(): void {
    if (!this.isReady()) return
    this.started = true
    for (const w of this.readyWaiters.splice(0)) w.resolve()
  }

  private onBroadcast(m: Broadcast): void {
    switch (m.type) {
      case 'ready':
        this.workers.set(m.threadId, { ready: true, stats: m.stats })
        this.info = { model: m.model, contextLength: m.contextLength, provider: m.provider as Provider, runtime: m.runtime, weights: m.weights }
        this.settleReady()
        break
      case 'failed':
        if (!this.info) this.failLoad(new OnnxdError('bad_bundle', m.error))
        break
      case 'stats': {
        const w = this.workers.get(m.threadId)
        if (w) w.stats = m.stats
        break
      }
      case 'observed':
        for (const s of m.steps) this.observer.onStep?.(s)
        for (const f of m.finishes) this.observer.onFinish?.(f)
        break
    }
  }

  private liveWorkers(): Map<number, WorkerState> {
    // Drop workers piscina has replaced: their threads are gone.
    const alive = new Set((this.piscina?.threads ?? []).map((t) => t.threadId))
    for (const id of this.workers.keys()) {
      if (!alive.has(id)) {
        this.workers.delete(id)
        this.replacing.delete(id)
      }
    }
    this.gates.release(alive)
    return this.workers
  }

  ready(): Promise<void> {
    this.start()
    if (this.loadError) return Promise.reject(this.loadError)
    if (this.isReady()) return Promise.resolve()
    return new Promise((resolve, reject) => this.readyWaiters.push({ resolve, reject }))
  }

  submit(req: EngineRequest, sink: (e: SeqEvent) => void): () => void {
    const refuse = (err: OnnxdError): (() => void) => {
      sink({ type: 'error', error: toErrorData(err) })
      return () => {}
    }
    const closed = this.refusal()
    if (closed) return refuse(closed)
    if (req.input_ids !== undefined) return this.dispatch(req, sink)
    let encoding: Promise<number[]>
    try {
      encoding = this.encode(req)
    } catch (e) {
      return refuse(e as OnnxdError)
    }

    // Tokenized on a tokenizer thread; the replica gets the ids. Until then, cancel and fail end it here.
    let inner: (() => void) | null = null
    let ended = false
    const end = (err: OnnxdError): void => {
      if (ended) return
      ended = true
      this.inflight.delete(r)
      sink({ type: 'error', error: toErrorData(err) })
    }
    const r: Inflight = {
      cancel: () => (inner ? inner() : end(new OnnxdError('internal', 'request cancelled'))),
      fail: end,
    }
    this.inflight.add(r)
    encoding.then(
      (ids) => {
        if (ended) return
        ended = true // from here the dispatched request ends itself
        this.inflight.delete(r)
        inner = this.dispatch({ ...req, messages: undefined, prompt: undefined, input_ids: ids }, sink)
      },
      (e: OnnxdError) => end(e),
    )
    return () => r.cancel()
  }

  async countTokens(req: Pick<EngineRequest, 'messages' | 'prompt' | 'tools'>): Promise<number> {
    const closed = this.refusal()
    if (closed) throw closed
    return (await this.encode(req)).length
  }

  /** The 503 of a pool that takes no requests now (draining, closing, or still loading its model); else null. */
  private refusal(): OnnxdError | null {
    if (this.draining || this.closing) return new OnnxdError('not_ready', 'node is draining', { retryAfterS: 1 })
    if (!this.info || !this.piscina || !this.tokenizers) return new OnnxdError('not_ready', 'model is loading', { retryAfterS: 1 })
    return null
  }

  /**
   * A text prompt's token ids (messages through the chat template, with tools), from a tokenizer thread: the prompt
   * rule and the byte bound checked first (throws at once); rejects with the tokenizer's error, or queue_full.
   */
  private encode(req: Pick<EngineRequest, 'messages' | 'prompt' | 'input_ids' | 'tools'>): Promise<number[]> {
    checkOnePrompt(req)
    this.checkPromptBytes(req)
    return this.tokenizers!.run({ kind: 'encode', messages: req.messages, prompt: req.prompt, tools: req.tools }).then(
      (reply) => {
        if (reply.kind === 'ids') return reply.ids
        throw reply.kind === 'error' ? fromErrorData(reply.error) : new OnnxdError('internal', 'tokenizer answered out of turn')
      },
      (e: Error) => {
        throw isFull(e) ? new OnnxdError('queue_full', 'node is at capacity', { retryAfterS: 1 }) : new OnnxdError('internal', `tokenizer failed: ${e.message}`)
      },
    )
  }

  /**
   * Refuses, before any tokenizing, a text prompt with more bytes than the model's context can hold as tokens: one
   * client's megabyte prompts cost a length check, not seconds of tokenizer time.
   */
  private checkPromptBytes(req: Pick<EngineRequest, 'messages' | 'prompt' | 'tools'>): void {
    const b = this.bound
    const ctx = this.info?.contextLength
    if (!b || !ctx || b.maxTokenBytes === 0) return // no tokenizer: the tokenizer thread answers for it
    const limit = promptByteLimit(ctx, b)
    const bytes = promptTextBytes(req)
    if (bytes > limit) {
      throw new OnnxdError(
        'context_length_exceeded',
        `The prompt is ${bytes} bytes of text${req.tools?.length ? ' (messages and tools)' : ''}; this model's context of ${ctx} tokens holds at most ${limit} bytes (${b.maxTokenBytes} bytes per token at most${b.lengthPreserving ? '' : ', times 4 for its normalizer'})`,
      )
    }
  }

  /** Hands a request with prompt ids to a replica; its events flow back over a MessageChannel. */
  private dispatch(req: EngineRequest, sink: (e: SeqEvent) => void): () => void {
    const piscina = this.piscina!
    const { port1, port2 } = new MessageChannel()
    let ended = false
    const end = (): void => {
      ended = true
      port1.close()
      this.inflight.delete(r)
    }
    const r: Inflight = {
      cancel: () => {
        if (!ended) port1.postMessage({ type: 'cancel' } satisfies PortCommand)
      },
      fail: (err) => {
        if (ended) return
        end()
        sink({ type: 'error', error: toErrorData(err) })
      },
    }
    port1.on('message', (e: SeqEvent) => {
      if (ended) return
      if (e.type === 'accepted') r.threadId = e.threadId
      sink(e)
      if (e.type === 'done' || e.type === 'error') end()
    })
    this.inflight.add(r)
    piscina.run({ kind: 'request', req, port: port2 }, { transferList: [port2] }).catch((e: Error) => {
      // piscina refuses tasks past concurrentTasksPerWorker x workers: that is a full node, not a crash.
      r.fail(isFull(e) ? new OnnxdError('queue_full', 'node is at capacity', { retryAfterS: 1 }) : new OnnxdError('worker_crashed', `inference worker failed: ${e.message}`))
    })
    return r.cancel
  }

  /**
   * Replaces replicas whose step loop has shown no life for stallTimeoutMs: their requests end now with the
   * retryable worker_crashed (500), and the thread is terminated as soon as it is outside ONNX Runtime; piscina
   * then starts a fresh replica, which loads the model and takes requests again.
   */
  private replaceStalled(): void {
    if (this.closing || !this.piscina) return
    const now = Date.now()
    for (const [threadId, w] of this.liveWorkers()) {
      if (!w.ready || !w.stats || this.replacing.has(threadId) || now - w.stats.heartbeat <= this.stallTimeoutMs) continue
      this.replacing.add(threadId)
      const err = new OnnxdError('worker_crashed', `engine replica ${threadId} made no progress for ${now - w.stats.heartbeat} ms; it is being replaced`)
      for (const r of [...this.inflight]) if (r.threadId === threadId) r.fail(err)
      void this.gates.stop(threadId, Infinity, 20).then(() => {
        if (this.closing) return // close() terminates every thread itself
        void this.piscina?.threads.find((t) => t.threadId === threadId)?.terminate()
      })
    }
  }

  health(): PoolHealth {
    const now = Date.now()
    const workers: WorkerHealth[] = [...this.liveWorkers()].map(([threadId, w]) => ({
      threadId,
      ready: w.ready && !this.replacing.has(threadId),
      heartbeatAgeMs: w.stats ? now - w.stats.heartbeat : 0,
      stats: w.stats,
    }))
    const stats = workers.map((w) => w.stats).filter((s): s is EngineStats => s !== null)
    const sum = (f: (s: EngineStats) => number): number => stats.reduce((a, s) => a + f(s), 0)
    const readyCount = workers.filter((w) => w.ready).length
    const hung = workers.some((w) => w.heartbeatAgeMs > this.heartbeatTimeoutMs)
    // Ready once every worker has loaded the model, as ready() is; afterwards a replica being replaced leaves the
    // pool ready on the others (`workers` says how many serve), and unhealthy only when none does or one hangs.
    const status: PoolHealth['status'] = this.draining || this.closing
      ? 'draining'
      : !this.started
        ? this.loadError ? 'unhealthy' : 'loading'
        : hung || readyCount === 0
          ? 'unhealthy'
          : 'ready'
    return {
      status,
      model: this.info?.model ?? this.opts.modelId ?? '',
      provider: this.info?.provider ?? this.opts.provider ?? 'cpu',
      runtime: this.info?.runtime ?? intendedRuntime(this.opts.runtime, this.opts.provider ?? 'cpu'),
      ...(this.info?.weights ? { weights: this.info.weights } : {}),
      contextLength: this.info?.contextLength ?? null,
      configuredWorkers: this.nWorkers,
      workers,
      running: sum((s) => s.running + s.prefilling),
      waiting: sum((s) => s.waiting),
      capacity: sum((s) => Math.max(0, s.maxRunning - s.running - s.prefilling) + Math.max(0, s.maxWaiting - s.waiting)),
      freeSlots: sum((s) => Math.max(0, s.maxRunning - s.running - s.prefilling - s.waiting)),
      kvUsedBytes: sum((s) => s.kvUsedBytes),
      prefixCacheBytes: sum((s) => s.prefixCacheBytes),
      kvBudgetBytes: sum((s) => s.kvBudgetBytes),
      restarts: this.restarts,
    }
  }

  drain(): void {
    this.draining = true
  }

  async close(): Promise<void> {
    this.closing = true
    this.gates.close()
    if (this.monitor) clearInterval(this.monitor)
    for (const w of this.readyWaiters.splice(0)) w.reject(new OnnxdError('not_ready', 'pool closed'))
    for (const r of [...this.inflight]) r.cancel()
    if (this.piscina) {
      // A thread terminated inside ONNX Runtime aborts the process: each goes once its step (or load) has returned.
      await Promise.all(this.piscina.threads.map((t) => this.gates.stop(t.threadId, Infinity)))
      await this.piscina.destroy()
    }
    await this.tokenizers?.destroy()
    this.channel.close()
  }

  async inject(fault: { kind: 'crash' } | { kind: 'stall'; ms: number }): Promise<void> {
    if (!this.opts.faultInjection) throw new OnnxdError('invalid_request', 'fault injection is off')
    await this.piscina?.run(fault).catch(() => {})
  }
}

export function createEnginePool(opts: PoolOptions, observer?: EngineObserver): EngineClient {
  return new EnginePool(opts, observer)
}
