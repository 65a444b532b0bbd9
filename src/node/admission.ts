// The node's admission state (AdmissionState: admitting or draining, and the completions in flight) and its
// graceful drain: stop admitting (health turns `draining`, new completions 503), let in-flight requests finish
// within a grace period, then end the rest with an error. Imports: engine types, shared errors.
import type { EngineClient } from '../engine/index.js'
import { OnnxdError } from '../shared/errors.js'

export interface DrainResult {
  /** Every in-flight request finished within the grace period. */
  drained: boolean
  /** Requests ended with an error because the grace period ran out. */
  aborted: number
}

/** What the app exposes as `app.node`. */
export interface NodeControl {
  readonly draining: boolean
  /** Completions currently being answered. */
  inFlight(): number
  /** Resolves once no completion is being answered. */
  whenIdle(): Promise<void>
  /**
   * Stops admitting (the engine too), waits up to `timeoutMs` (default: the drainTimeoutMs option) for in-flight
   * requests, then ends those left with a 503 (JSON) or an error event (SSE). The app keeps listening, so routers
   * see `draining` on /health; close the app and the engine afterwards.
   */
  drain(timeoutMs?: number): Promise<DrainResult>
}

type Abort = (err: OnnxdError) => void

export class AdmissionState implements NodeControl {
  #draining = false
  readonly #inflight = new Set<Abort>()
  #idleWaiters: Array<() => void> = []
  #drainPromise: Promise<DrainResult> | null = null

  constructor(
    private readonly engine: EngineClient,
    private readonly defaultTimeoutMs: number,
  ) {}

  get draining(): boolean {
    return this.#draining
  }

  inFlight(): number {
    return this.#inflight.size
  }

  /** Registers a request being answered; `abort` ends it early. Returns its release function (call once, in finally). */
  track(abort: Abort): () => void {
    this.#inflight.add(abort)
    return () => {
      this.#inflight.delete(abort)
      if (this.#inflight.size === 0) {
        const waiters = this.#idleWaiters
        this.#idleWaiters = []
        for (const w of waiters) w()
      }
    }
  }

  /** Resolves once no request is in flight. */
  whenIdle(): Promise<void> {
    if (this.#inflight.size === 0) return Promise.resolve()
    return new Promise((resolve) => this.#idleWaiters.push(resolve))
  }

  /** Readiness goes false first: later requests are refused while in-flight ones go on. */
  stopAdmitting(): void {
    if (this.#draining) return
    this.#draining = true
    this.engine.drain()
  }

  /** Ends every in-flight request now; returns how many there were. */
  abortAll(reason = 'The node shut down before the request finished'): number {
    const all = [...this.#inflight]
    for (const abort of all) abort(new OnnxdError('not_ready', reason, { retryAfterS: 1 }))
    return all.length
  }

  drain(timeoutMs: number = this.defaultTimeoutMs): Promise<DrainResult> {
    // A second SIGTERM (or a drain racing app.close()) joins the first drain instead of starting another clock.
    this.#drainPromise ??= this.#drain(timeoutMs)
    return this.#drainPromise
  }

  async #drain(timeoutMs: number): Promise<DrainResult> {
    this.stopAdmitting()
    let timer: NodeJS.Timeout | undefined
    const timedOut = await Promise.race([
      this.whenIdle().then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), timeoutMs))),
    ])
    clearTimeout(timer)
    if (!timedOut) return { drained: true, aborted: 0 }
    const aborted = this.abortAll()
    await this.whenIdle()
    return { drained: false, aborted }
  }
}
