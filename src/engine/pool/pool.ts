// The main-thread side of the engine: a piscina pool of engine workers behind the EngineClient interface.
// Routes requests to workers, relays their events, merges their stats and observations, and tracks health.
import { availableParallelism } from 'node:os'
import { randomUUID } from 'node:crypto'
import { BroadcastChannel, MessageChannel } from 'node:worker_threads'
import { Piscina } from 'piscina'
import { OnnxdError, toErrorData } from '../../shared/errors.js'
import type { EngineClient, EngineObserver, PoolHealth, PoolOptions, Provider, WorkerHealth } from '../index.js'
import type { EngineOptions } from '../engine.js'
import { batcherOptions } from '../engine.js'
import type { EngineRequest, EngineStats, SeqEvent } from '../types.js'
import type { Broadcast, PortCommand, Task, WorkerData } from './protocol.js'

/** Worker entry: the compiled .js next to this file in production; under tsx/vitest the .ts source via tsx. */
function workerEntry(): { filename: string; execArgv: string[] } {
  const fromTs = import.meta.url.endsWith('.ts')
  return {
    filename: new URL(`../worker/worker.${fromTs ? 'ts' : 'js'}`, import.meta.url).href,
    execArgv: fromTs ? ['--import', 'tsx'] : [],
  }
}

interface WorkerState {
  ready: boolean
  stats: EngineStats | null
}

export class EnginePool implements EngineClient {
  private readonly piscina: Piscina<Task, null>
  private readonly channel: BroadcastChannel
  private readonly workers = new Map<number, WorkerState>()
  private readonly nWorkers: number
  private readonly heartbeatTimeoutMs: number
  private info: { model: string; contextLength: number; provider: Provider } | null = null
  private draining = false
  private closing = false
  private restarts = 0
  private loadError: Error | null = null
  private readonly readyWaiters: Array<{ resolve: () => void; reject: (e: Error) => void }> = []
  private readonly inflight = new Set<() => void>()

  constructor(
    private readonly opts: PoolOptions,
    private readonly observer: EngineObserver = {},
  ) {
    this.nWorkers = Math.max(1, opts.workers ?? 1)
    this.heartbeatTimeoutMs = opts.heartbeatTimeoutMs ?? 5000
    const channelName = `onnxd-pool-${randomUUID()}`
    this.channel = new BroadcastChannel(channelName)
    this.channel.onmessage = (ev) => this.onBroadcast((ev as { data: Broadcast }).data)
    this.channel.unref()
    const limits = batcherOptions(opts)
    const engine: EngineOptions = {
      modelDir: opts.modelDir,
      id: opts.modelId,
      dtype: opts.dtype,
      provider: opts.provider,
      deviceId: opts.deviceId,
      allowCpuFallback: opts.allowCpuFallback,
      // One worker on CPU uses every core; several split them.
      intraOpThreads: opts.intraOpThreads || Math.max(1, Math.floor(availableParallelism() / this.nWorkers)),
      ...limits,
    }
    const workerData: WorkerData = { engine, channel: channelName, faultInjection: opts.faultInjection ?? false }
    const entry = workerEntry()
    const perWorker = limits.maxRunning + limits.maxWaiting + 8
    this.piscina = new Piscina<Task, null>({
      filename: entry.filename,
      execArgv: entry.execArgv,
      minThreads: this.nWorkers,
      maxThreads: this.nWorkers,
      // Never let an idle worker exit: it holds a loaded model.
      idleTimeout: Infinity,
      // Each request is a long-lived task; a worker batches all of its tasks together.
      concurrentTasksPerWorker: perWorker,
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
  }

  private failLoad(e: Error): void {
    this.loadError ??= e
    for (const w of this.readyWaiters.splice(0)) w.reject(e)
  }

  private onBroadcast(m: Broadcast): void {
    switch (m.type) {
      case 'ready':
        this.workers.set(m.threadId, { ready: true, stats: null })
        this.info = { model: m.model, contextLength: m.contextLength, provider: m.provider as Provider }
        if ([...this.workers.values()].filter((w) => w.ready).length >= this.nWorkers) {
          for (const w of this.readyWaiters.splice(0)) w.resolve()
        }
        break
      case 'failed':
        if (!this.info) this.failLoad(new OnnxdError('bad_bundle', m.error))
        break
      case 'stats': {
        const w = this.workers.get(m.threadId)
        if (w) w.stats = m.stats
        break
      }
      case 'step':
        this.observer.onStep?.(m.step)
        break
      case 'finish':
        this.observer.onFinish?.(m.finish)
        break
    }
  }

  private liveWorkers(): Map<number, WorkerState> {
    // Drop workers piscina has replaced: their threads are gone.
    const alive = new Set(this.piscina.threads.map((t) => t.threadId))
    for (const id of this.workers.keys()) if (!alive.has(id)) this.workers.delete(id)
    return this.workers
  }

  ready(): Promise<void> {
    if (this.loadError) return Promise.reject(this.loadError)
    if ([...this.liveWorkers().values()].filter((w) => w.ready).length >= this.nWorkers) return Promise.resolve()
    return new Promise((resolve, reject) => this.readyWaiters.push({ resolve, reject }))
  }

  submit(req: EngineRequest, sink: (e: SeqEvent) => void): () => void {
    if (this.draining || this.closing) {
      sink({ type: 'error', error: toErrorData(new OnnxdError('not_ready', 'node is draining', { retryAfterS: 1 })) })
      return () => {}
    }
    if (!this.info) {
      sink({ type: 'error', error: toErrorData(new OnnxdError('not_ready', 'model is loading', { retryAfterS: 1 })) })
      return () => {}
    }
    const { port1, port2 } = new MessageChannel()
    let ended = false
    const end = (): void => {
      ended = true
      port1.close()
      this.inflight.delete(cancel)
    }
    port1.on('message', (e: SeqEvent) => {
      if (ended) return
      sink(e)
      if (e.type === 'done' || e.type === 'error') end()
    })
    const cancel = (): void => {
      if (!ended) port1.postMessage({ type: 'cancel' } satisfies PortCommand)
    }
    this.inflight.add(cancel)
    this.piscina.run({ kind: 'request', req, port: port2 }, { transferList: [port2] }).catch((e: Error) => {
      if (ended) return
      // piscina refuses tasks past concurrentTasksPerWorker x workers: that is a full node, not a crash.
      const full = /queue is at limit|no task queue available/i.test(e.message)
      const err = full
        ? new OnnxdError('queue_full', 'node is at capacity', { retryAfterS: 1 })
        : new OnnxdError('worker_crashed', `inference worker failed: ${e.message}`)
      sink({ type: 'error', error: toErrorData(err) })
      end()
    })
    return cancel
  }

  health(): PoolHealth {
    const now = Date.now()
    const workers: WorkerHealth[] = [...this.liveWorkers()].map(([threadId, w]) => ({
      threadId,
      ready: w.ready,
      heartbeatAgeMs: w.stats ? now - w.stats.heartbeat : 0,
      stats: w.stats,
    }))
    const stats = workers.map((w) => w.stats).filter((s): s is EngineStats => s !== null)
    const sum = (f: (s: EngineStats) => number): number => stats.reduce((a, s) => a + f(s), 0)
    const readyCount = workers.filter((w) => w.ready).length
    const hung = workers.some((w) => w.heartbeatAgeMs > this.heartbeatTimeoutMs)
    const status: PoolHealth['status'] = this.draining || this.closing
      ? 'draining'
      : !this.info
        ? this.loadError ? 'unhealthy' : 'loading'
        : hung || readyCount === 0
          ? 'unhealthy'
          : 'ready'
    return {
      status,
      model: this.info?.model ?? this.opts.modelId ?? '',
      provider: this.info?.provider ?? this.opts.provider ?? 'cpu',
      contextLength: this.info?.contextLength ?? null,
      workers,
      running: sum((s) => s.running + s.prefilling),
      waiting: sum((s) => s.waiting),
      capacity: sum((s) => Math.max(0, s.maxRunning - s.running - s.prefilling) + Math.max(0, s.maxWaiting - s.waiting)),
      kvUsedBytes: sum((s) => s.kvUsedBytes),
      kvBudgetBytes: sum((s) => s.kvBudgetBytes),
      restarts: this.restarts,
    }
  }

  drain(): void {
    this.draining = true
  }

  async close(): Promise<void> {
    this.closing = true
    for (const w of this.readyWaiters.splice(0)) w.reject(new OnnxdError('not_ready', 'pool closed'))
    for (const cancel of this.inflight) cancel()
    await this.piscina.destroy()
    this.channel.close()
  }

  async inject(fault: { kind: 'crash' } | { kind: 'stall'; ms: number }): Promise<void> {
    if (!this.opts.faultInjection) throw new OnnxdError('invalid_request', 'fault injection is off')
    await this.piscina.run(fault).catch(() => {})
  }
}

export function createEnginePool(opts: PoolOptions, observer?: EngineObserver): EngineClient {
  return new EnginePool(opts, observer)
}
