// The facade's view of its store (SQLite or PostgreSQL): up or down, and the store as the facade's parts use it. Every
// call goes through a guard: a failure the store calls an outage (Store.isOutage) becomes a typed 503
// (`store_unavailable`, with Retry-After) and turns the state down; the next call that succeeds, or a probe
// (Store.ping every `probeMs` while down), turns it up again. Each transition is logged once (warn, then info), not
// each failed call; failed calls are counted per operation for metrics. Imports: store interfaces, shared errors.
import { OnnxdError } from '../shared/errors.js'
import type { Store } from '../store/interfaces.js'

/** Retry-After of a request refused while the store is down, seconds (the spec's backoff starts at 1 s). */
export const STORE_RETRY_AFTER_S = 1

/** How often a store that is down is probed. */
export const STORE_PROBE_MS = 1000

/** The calls the guard watches. */
export type StoreOperation = Exclude<keyof Store, 'close' | 'isOutage'>

/** Every watched call; a method added to Store without a line here does not compile. */
const OPERATIONS: Record<StoreOperation, true> = {
  createAccount: true,
  getAccount: true,
  listAccounts: true,
  updateProfile: true,
  creditAccount: true,
  setSubscription: true,
  createKey: true,
  findKeyByHash: true,
  getKey: true,
  listKeys: true,
  revokeKey: true,
  recordCompletion: true,
  saveInFlight: true,
  settleStaleInFlight: true,
  usage: true,
  saveResponse: true,
  getResponse: true,
  deleteResponse: true,
  ping: true,
}

export interface StoreHealthOptions {
  log?: { warn(obj: object, msg: string): void; info(obj: object, msg: string): void }
  probeMs?: number
  now?: () => number
}

const messageOf = (e: unknown): string => (e instanceof Error ? e.message : String(e))

export class StoreHealth {
  /** The store, guarded: what the facade's parts are given. Other properties (a pool, a db) pass through. */
  readonly store: Store
  #up = true
  #downSince = 0
  #failedWhileDown = 0
  readonly #errors = new Map<StoreOperation, number>()
  readonly #recovered: (() => void)[] = []
  #probe: NodeJS.Timeout | null = null
  #closed = false

  constructor(
    private readonly inner: Store,
    private readonly opts: StoreHealthOptions = {},
  ) {
    this.store = guard(inner, this)
  }

  /** False from a call that failed on an outage until a call or a probe succeeds. */
  get up(): boolean {
    return this.#up
  }

  /** Failed store calls since start (outages and refused operations), per operation. */
  errors(): ReadonlyMap<StoreOperation, number> {
    return this.#errors
  }

  /** `fn` runs each time the store answers again after an outage. */
  onRecovered(fn: () => void): void {
    this.#recovered.push(fn)
  }

  /** Counts a failed call; returns what to throw: a 503 for an outage, else the error as it was. */
  failed(operation: StoreOperation, e: unknown): unknown {
    this.#errors.set(operation, (this.#errors.get(operation) ?? 0) + 1)
    if (!this.inner.isOutage(e)) return e
    if (this.#up) {
      this.#up = false
      this.#downSince = this.#now()
      this.#failedWhileDown = 0
      this.opts.log?.warn({ operation, error: messageOf(e) }, 'store unavailable: requests that need it are answered 503 until it answers again')
      this.#schedule()
    }
    this.#failedWhileDown++
    return new OnnxdError('store_unavailable', `The store failed (${operation}): ${messageOf(e)}`, { retryAfterS: STORE_RETRY_AFTER_S })
  }

  /** A call succeeded: the store is up, if it was not. */
  succeeded(): void {
    if (this.#up) return
    this.#up = true
    if (this.#probe) clearTimeout(this.#probe)
    this.#probe = null
    this.opts.log?.info({ down_ms: this.#now() - this.#downSince, failed_calls: this.#failedWhileDown }, 'store reachable again')
    for (const fn of this.#recovered) fn()
  }

  /** Stops probing. */
  close(): void {
    this.#closed = true
    if (this.#probe) clearTimeout(this.#probe)
    this.#probe = null
  }

  #now(): number {
    return (this.opts.now ?? Date.now)()
  }

  /** The next probe, while down. */
  #schedule(): void {
    if (this.#probe || this.#closed || this.#up) return
    this.#probe = setTimeout(() => {
      this.#probe = null
      this.inner.ping().then(
        () => this.succeeded(),
        () => this.#schedule(),
      )
    }, this.opts.probeMs ?? STORE_PROBE_MS)
    this.#probe.unref()
  }
}

/** `inner` with each watched method reporting its outcome to `health`; everything else passes through. */
function guard(inner: Store, health: StoreHealth): Store {
  const made = new Map<PropertyKey, unknown>()
  return new Proxy(inner, {
    get(target, prop) {
      const value: unknown = Reflect.get(target, prop, target)
      if (typeof value !== 'function') return value
      let fn = made.get(prop)
      if (fn === undefined) {
        const method = value as (...args: unknown[]) => Promise<unknown>
        fn =
          typeof prop === 'string' && Object.hasOwn(OPERATIONS, prop)
            ? (...args: unknown[]): Promise<unknown> => {
                const op = prop as StoreOperation
                let out: Promise<unknown>
                try {
                  out = method.apply(target, args)
                } catch (e) {
                  return Promise.reject(health.failed(op, e))
                }
                return out.then(
                  (v) => {
                    health.succeeded()
                    return v
                  },
                  (e: unknown) => {
                    throw health.failed(op, e)
                  },
                )
              }
            : method.bind(target)
        made.set(prop, fn)
      }
      return fn
    },
  })
}
