// Requests-per-minute limits, per API key (the key's own limit, else the default) and fleet-wide (one counter for
// every key of this facade). Counters live in a RateLimitStore, so a shared backend can serve many facades.
// Imports: store interfaces, shared errors.
import type { ApiKey, RateLimitStore } from '../../store/interfaces.js'
import { OnnxdError } from '../../shared/errors.js'

export const WINDOW_MS = 60_000
export const FLEET_BUCKET = 'fleet'

export interface RateLimitOptions {
  /** Default per-key limit; 0 = unlimited. */
  keyRpm: number
  /** Fleet-wide limit; 0 = unlimited. */
  fleetRpm: number
}

/** What the caller may advertise in `x-ratelimit-*` headers. */
export interface RateLimitState {
  limit: number
  remaining: number
  resetAtMs: number
}

const retryAfterS = (resetAtMs: number, nowMs: number): number => Math.max(1, Math.ceil((resetAtMs - nowMs) / 1000))

export class RateLimiter {
  constructor(
    private readonly counters: RateLimitStore,
    private readonly opts: RateLimitOptions,
    private readonly now: () => number = Date.now,
  ) {}

  /** Counts one request of this key; throws 429 with `retryAfterS` when the key or the fleet is over its limit. */
  async admit(key: ApiKey): Promise<RateLimitState | null> {
    const now = this.now()
    let state: RateLimitState | null = null
    const keyLimit = key.rpmLimit ?? this.opts.keyRpm
    if (keyLimit > 0) {
      const h = await this.counters.hit(`key:${key.id}`, keyLimit, WINDOW_MS, now)
      if (!h.allowed) {
        throw new OnnxdError('rate_limited', `Rate limit reached for this API key: ${keyLimit} requests per minute`, {
          retryAfterS: retryAfterS(h.resetAtMs, now),
        })
      }
      state = { limit: keyLimit, remaining: h.remaining, resetAtMs: h.resetAtMs }
    }
    if (this.opts.fleetRpm > 0) {
      const h = await this.counters.hit(FLEET_BUCKET, this.opts.fleetRpm, WINDOW_MS, now)
      if (!h.allowed) {
        throw new OnnxdError(
          'rate_limited',
          `Fleet-wide rate limit reached: ${this.opts.fleetRpm} requests per minute across all keys`,
          { retryAfterS: retryAfterS(h.resetAtMs, now) },
        )
      }
    }
    return state
  }
}
