// Billing: who may spend (402 before dispatch), what a completion costs, and its usage kept durable as it goes:
// each completion in flight is a Tab whose delivered tokens are saved in batches (every `flushTokens` tokens of a
// completion or every `flushMs`, whichever comes first), then settled with its debit in one store transaction when
// it ends. Rows a crash left behind are settled by `settleStale` at start and every few intervals, so a SIGKILL loses
// at most the tokens of one interval. A final record the store does not accept (an outage) is kept in the spool and
// sent again, with backoff, until it does; the store bills a completion id once, so sending again is safe.
// Imports: store, shared errors, facade options, the spool.
import type { Account, ApiKey, InFlightCompletion, SettledInFlight, Store } from '../../store/interfaces.js'
import { randomBase62 } from '../../store/ids.js'
import { isOnnxdError, OnnxdError } from '../../shared/errors.js'
import { DEFAULT_PRICE, type ModelPrice } from '../options.js'
import type { SpooledUsage, UsageSpool } from './spool.js'

/** Tokens a completion consumed: what the node reported, or what was counted when a stream ended early. */
export interface TokenCounts {
  promptTokens: number
  completionTokens: number
}

export class PriceTable {
  /** Nano-units per token: prices are units per 1M tokens, i.e. micro-units per token, kept to 3 decimals. */
  private readonly nanos = new Map<string, { prompt: number; completion: number }>()
  private readonly fallback: { prompt: number; completion: number }

  /** `prices` per model id, `*` for the rest; `defaultPrice` when there is no `*`. */
  constructor(
    private readonly prices: Readonly<Record<string, ModelPrice>>,
    private readonly defaultPrice: ModelPrice = DEFAULT_PRICE,
  ) {
    const nanos = (p: ModelPrice) => ({ prompt: Math.round(p.prompt * 1000), completion: Math.round(p.completion * 1000) })
    for (const [model, p] of Object.entries(prices)) this.nanos.set(model, nanos(p))
    this.fallback = nanos(prices['*'] ?? defaultPrice)
  }

  /** Integer micro-units, rounded up per completion. */
  costMicros(model: string, t: TokenCounts): number {
    const p = this.nanos.get(model) ?? this.fallback
    return Math.ceil((t.promptTokens * p.prompt + t.completionTokens * p.completion) / 1000)
  }

  /** The prices in force, as configured, with `*` (the fallback) always present. */
  table(): Record<string, ModelPrice> {
    return { ...this.prices, '*': this.prices['*'] ?? this.defaultPrice }
  }
}

export interface MeterOptions {
  /** Save delivered usage at least this often (ms). */
  flushMs: number
  /** Save as soon as one completion has delivered this many tokens since its last save. */
  flushTokens: number
  now?: () => number
  /**
   * Keeps the final records the store does not accept, and hands them back until it does (`start` loads what an
   * earlier run left). Without one, such a failure is thrown to the caller.
   */
  spool?: UsageSpool
  /** Where failures of background saves go. */
  log?: MeterLog
}

export interface MeterLog {
  debug(obj: object, msg: string): void
  info(obj: object, msg: string): void
  warn(obj: object, msg: string): void
  error(obj: object, msg: string): void
}

/** Rows not renewed for this many intervals belong to a facade that is gone. */
const LEASE_INTERVALS = 5

/** Spooled records are sent again after this long, doubling after each failed try up to the maximum. */
export const REPLAY_MIN_MS = 500
export const REPLAY_MAX_MS = 30_000
/** Most spooled records sent at once. */
const REPLAY_CHUNK = 256

/** A failure the store's guard calls an outage (StoreHealth): already logged once, when the store went down. */
const isOutage = (e: unknown): boolean => isOnnxdError(e) && e.code === 'store_unavailable'

/** One completion in flight: what its client received so far, saved as it goes, and settled exactly once. */
export class Tab {
  private counts: TokenCounts = { promptTokens: 0, completionTokens: 0 }
  /** Tokens delivered since the last save began. */
  unsaved = 0
  dirty = true
  settled = false

  constructor(
    private readonly meter: Meter,
    readonly id: string,
    readonly account: Account,
    readonly key: ApiKey,
    readonly model: string,
    readonly startedAt: number,
  ) {}

  /** What the client has received so far (running totals). Saves when `flushTokens` have piled up. */
  progress(t: TokenCounts): void {
    if (this.settled) return
    const before = this.counts
    if (t.promptTokens === before.promptTokens && t.completionTokens === before.completionTokens) return
    this.counts = { promptTokens: t.promptTokens, completionTokens: t.completionTokens }
    this.dirty = true
    this.unsaved += Math.max(0, t.completionTokens - before.completionTokens)
    this.meter.tokensDelivered(this)
  }

  /** The row to save. */
  row(): InFlightCompletion {
    return {
      id: this.id,
      accountId: this.account.id,
      keyId: this.key.id,
      model: this.model,
      ...this.counts,
      costMicros: this.meter.prices.costMicros(this.model, this.counts),
      startedAt: this.startedAt,
    }
  }

  /** Records the final usage and its debit (and removes the saved row) in one transaction. Once; returns the cost. */
  settle(t: TokenCounts): Promise<number> {
    if (this.settled) throw new OnnxdError('internal', `completion ${this.id} is already settled`)
    this.settled = true
    return this.meter.settle(this, t)
  }
}

export class Meter {
  /** This facade's name on the rows it saves: rows of a facade that stops renewing them are settled by others. */
  readonly owner = `facade_${randomBase62(16)}`
  private readonly tabs = new Map<string, Tab>()
  private readonly now: () => number
  private timer: NodeJS.Timeout | null = null
  private ticks = 0
  /** The save under way, the tabs whose rows it writes, and whether another was asked for meanwhile. */
  private saving: Promise<void> | null = null
  private inSave = new Set<string>()
  private again = false
  /** The spool's next replay, the one under way, and the wait before the next after a failure. */
  private replayTimer: NodeJS.Timeout | null = null
  private replaying: Promise<void> | null = null
  private replayDelayMs = REPLAY_MIN_MS
  /** Spooled records refused for a reason other than an outage, already logged. */
  private readonly refused = new Set<string>()
  private closed = false

  constructor(
    private readonly store: Store,
    readonly prices: PriceTable,
    private readonly opts: MeterOptions,
  ) {
    this.now = opts.now ?? Date.now
  }

  /** 402 when the account may not spend: subscription inactive, or balance exhausted. */
  checkCanSpend(account: Account): void {
    if (account.subscription !== 'active') {
      throw new OnnxdError('payment_required', 'Subscription inactive: reactivate the subscription to use the API')
    }
    if (account.balanceMicros <= 0) {
      throw new OnnxdError('payment_required', 'Account balance exhausted: add credit to continue')
    }
  }

  /** Opens the tab of a completion that has begun to stream; it is saved with the next batch. */
  open(id: string, account: Account, key: ApiKey, model: string): Tab {
    const tab = new Tab(this, id, account, key, model, this.now())
    this.tabs.set(id, tab)
    return tab
  }

  /** Completions in flight. */
  get inFlight(): number {
    return this.tabs.size
  }

  /** Usage records kept in the spool, waiting for the store to accept them. */
  get spooled(): number {
    return this.opts.spool?.size ?? 0
  }

  /**
   * Settles what a previous run left in flight, starts sending again what it left in the spool, then saves and
   * renews on a timer.
   */
  async start(): Promise<SettledInFlight> {
    const settled = await this.settleStale()
    const kept = this.opts.spool?.load() ?? 0
    if (kept > 0) {
      this.opts.log?.info({ records: kept }, 'recording the usage an earlier run kept in its spool')
      void this.replay()
    }
    this.timer ??= setInterval(() => this.tick(), this.opts.flushMs)
    this.timer.unref()
    return settled
  }

  /**
   * Stops the timers and saves what is in flight (a completion still running is settled by itself, or at next
   * start). What the spool holds stays on disk for the next start.
   */
  async close(): Promise<void> {
    this.closed = true
    if (this.timer) clearInterval(this.timer)
    this.timer = null
    if (this.replayTimer) clearTimeout(this.replayTimer)
    this.replayTimer = null
    await this.replaying
    await this.flush()
    await this.opts.spool?.close()
  }

  /** The store answers again after an outage: what the spool holds is sent at once. */
  storeRecovered(): void {
    this.replayDelayMs = REPLAY_MIN_MS
    if (this.replayTimer) clearTimeout(this.replayTimer)
    this.replayTimer = null
    if (this.spooled > 0 && !this.closed) void this.replay()
  }

  /**
   * Sends every spooled record to the store (one replay at a time; the store ignores a completion id it has). After a
   * failure the rest waits for the next try, `replayDelayMs` later, doubling each time, or for `storeRecovered`.
   */
  replay(): Promise<void> {
    this.replaying ??= this.replayAll().finally(() => (this.replaying = null))
    return this.replaying
  }

  private async replayAll(): Promise<void> {
    const spool = this.opts.spool
    if (!spool) return
    let failed = false
    let recorded = 0
    const all = spool.pending()
    for (let i = 0; i < all.length && !failed && !this.closed; i += REPLAY_CHUNK) {
      const chunk = all.slice(i, i + REPLAY_CHUNK)
      const outcomes = await Promise.allSettled(chunk.map((u) => this.store.recordCompletion(u)))
      const done: Promise<void>[] = []
      outcomes.forEach((o, j) => {
        const u = chunk[j]!
        if (o.status === 'fulfilled') {
          recorded++
          this.refused.delete(u.id)
          done.push(spool.done(u.id).catch((e: unknown) => this.opts.log?.warn({ err: e }, 'could not write to the usage spool')))
          return
        }
        failed = true
        if (isOutage(o.reason) || this.refused.has(u.id)) return
        this.refused.add(u.id)
        this.opts.log?.error({ err: o.reason, id: u.id }, 'the store refused spooled usage; it stays in the spool and is sent again')
      })
      await Promise.all(done)
    }
    if (recorded > 0) this.opts.log?.info({ recorded, left: spool.size }, 'recorded usage kept in the spool')
    if (failed) this.replayDelayMs = Math.min(2 * this.replayDelayMs, REPLAY_MAX_MS)
    else this.replayDelayMs = REPLAY_MIN_MS
    if (spool.size > 0) this.scheduleReplay()
  }

  private scheduleReplay(): void {
    if (this.replayTimer || this.closed) return
    this.replayTimer = setTimeout(() => {
      this.replayTimer = null
      void this.replay()
    }, this.replayDelayMs)
    this.replayTimer.unref()
  }

  /** Logs a failed store call: an outage briefly (the store's guard logged the outage once), anything else in full. */
  private storeFailed(e: unknown, msg: string, fields: object = {}): void {
    if (isOutage(e)) this.opts.log?.debug({ ...fields, code: 'store_unavailable' }, msg)
    else this.opts.log?.warn({ ...fields, err: e }, msg)
  }

  /** Settles every row whose owner stopped renewing it `LEASE_INTERVALS` intervals ago. */
  async settleStale(): Promise<SettledInFlight> {
    const now = this.now()
    const settled = await this.store.settleStaleInFlight(now - LEASE_INTERVALS * this.opts.flushMs, now)
    if (settled.completions > 0) this.opts.log?.info({ ...settled }, 'settled completions left in flight by a facade that stopped')
    return settled
  }

  /** Called by a tab that delivered tokens. */
  tokensDelivered(tab: Tab): void {
    if (tab.unsaved >= this.opts.flushTokens) void this.flush()
  }

  /**
   * Saves every tab with unsaved progress and renews this facade's rows, in one store transaction. Saves never
   * overlap: one asked for during another runs right after it.
   */
  flush(): Promise<void> {
    if (this.saving) {
      this.again = true
      return this.saving
    }
    const run = async (): Promise<void> => {
      do {
        this.again = false
        // Nothing new still renews the lease of the rows in flight.
        if (this.tabs.size === 0) return
        const tabs = [...this.tabs.values()].filter((t) => t.dirty)
        this.inSave = new Set(tabs.map((t) => t.id))
        const rows = tabs.map((t) => {
          t.dirty = false
          t.unsaved = 0
          return t.row()
        })
        try {
          await this.store.saveInFlight(this.owner, rows, this.now())
        } catch (e) {
          for (const t of tabs) t.dirty = true
          this.storeFailed(e, 'could not save the usage of completions in flight', { rows: rows.length })
          return
        }
      } while (this.again)
    }
    this.saving = run().finally(() => {
      this.saving = null
      this.inSave = new Set()
    })
    return this.saving
  }

  private tick(): void {
    void this.flush()
    if (++this.ticks % LEASE_INTERVALS === 0) {
      this.settleStale().catch((e: unknown) => this.storeFailed(e, 'could not settle stale completions'))
    }
  }

  /**
   * Final record of a tab, in one transaction. It waits for a save under way only when that save writes this tab's
   * row (which could otherwise come back after the record removed it); a save of other rows only renews this one's
   * lease, which the record's removal makes moot. No later save picks the tab up: it has left `tabs`.
   */
  async settle(tab: Tab, t: TokenCounts): Promise<number> {
    this.tabs.delete(tab.id)
    if (this.saving && this.inSave.has(tab.id)) await this.saving
    return this.record(tab.account, tab.key, tab.model, t, tab.id, true)
  }

  /**
   * Records one completion's usage and debits its cost, atomically (settling its in-flight row when `inFlight`), under
   * the completion's `id`. With a spool, a record the store does not accept is kept and sent again until it is (this
   * then resolves once it is kept, in memory and, unless the disk fails too, on disk): it never throws.
   */
  async record(account: Account, key: ApiKey, model: string, t: TokenCounts, id: string, inFlight = false): Promise<number> {
    const costMicros = this.prices.costMicros(model, t)
    const at = this.now()
    const usage: SpooledUsage = {
      id,
      accountId: account.id,
      keyId: key.id,
      model,
      promptTokens: t.promptTokens,
      completionTokens: t.completionTokens,
      costMicros,
      at,
      // last_used_at has minute resolution: one write per key per minute, not one per completion.
      touchKey: key.lastUsedAt === null || at / 1000 - key.lastUsedAt >= 60,
      ...(inFlight ? { inFlightId: id } : {}),
    }
    try {
      await this.store.recordCompletion(usage)
    } catch (e) {
      const spool = this.opts.spool
      if (!spool) throw e
      this.storeFailed(e, 'could not record the usage of a completion: kept in the spool until the store accepts it', { id })
      const kept = spool.add(usage)
      this.scheduleReplay()
      try {
        await kept
      } catch (err) {
        this.opts.log?.error({ err, id }, 'could not write usage to the spool: it is kept in memory only until the store accepts it')
      }
    }
    return costMicros
  }
}
