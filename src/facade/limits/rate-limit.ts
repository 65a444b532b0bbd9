// Requests-per-minute limits, per API key (the key's own limit, else the default) and fleet-wide (one counter for
// every key of this facade), and the `x-ratelimit-*` headers that show a client the binding one. Counters live in a
// RateLimitStore, so a shared backend can serve many facades. Imports: store interfaces, shared errors.
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

/** A counter after this request: what the caller advertises in `x-ratelimit-*` headers. */
export interface RateLimitState {
  limit: number
  remaining: number
  resetAtMs: number
}

/** The binding limit (fewest remaining) of a request, and the 429 to answer if it was over a limit. */
export interface RateLimitVerdict extends RateLimitState {
  refused: OnnxdError | null
}

/** Whole seconds until `resetAtMs`, at least 1: the `Retry-After` value and the reset header's. */
const secondsUntil = (resetAtMs: number, nowMs: number): number => Math.max(1, Math.ceil((resetAtMs - nowMs) / 1000))

/** A duration as OpenAI writes `x-ratelimit-reset-requests` (Go's form): `1s`, `59s`, `1m0s`, `6m0s`, `1h0m0s`. */
export function formatDuration(seconds: number): string {
  const h = Math.floor(seconds / 3600)
  const m = Math.floor((seconds % 3600) / 60)
  const s = seconds % 60
  if (h > 0) return `${h}h${m}m${s}s`
  if (m > 0) return `${m}m${s}s`
  return `${s}s`
}

/** The `x-ratelimit-*-requests` headers of a request's binding limit. */
export function rateLimitHeaders(s: RateLimitState, nowMs: number): Record<string, string> {
  return {
    'x-ratelimit-limit-requests': String(s.limit),
    'x-ratelimit-remaining-requests': String(s.remaining),
    'x-ratelimit-reset-requests': formatDuration(secondsUntil(s.resetAtMs, nowMs)),
  }
}

/** Of two limits, the one that binds: fewer remaining, or (equal) the one that resets later. */
const binding = (a: RateLimitState | null, b: RateLimitState): RateLimitState =>
  a === null || b.remaining < a.remaining || (b.remaining === a.remaining && b.resetAtMs > a.resetAtMs) ? b : a

export class RateLimiter {
  constructor(
    private readonly counters: RateLimitStore,
    private readonly opts: RateLimitOptions,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Counts one request of this key against its limit, then (if allowed) the fleet's. Returns the binding limit, with
   * `refused` set to the 429 (`retryAfterS` in whole seconds) when the key or the fleet is over; null when unlimited.
   */
  async admit(key: Pick<ApiKey, 'id' | 'rpmLimit'>): Promise<RateLimitVerdict | null> {
    const now = this.now()
    const keyLimit = key.rpmLimit ?? this.opts.keyRpm
    const checks = [
      ...(keyLimit > 0 ? [{ bucket: `key:${key.id}`, limit: keyLimit, fleet: false }] : []),
      ...(this.opts.fleetRpm > 0 ? [{ bucket: FLEET_BUCKET, limit: this.opts.fleetRpm, fleet: true }] : []),
    ]
    if (checks.length === 0) return null
    // One step for both: the fleet is counted only when the key's limit let the request through.
    const hits = await this.counters.hits(checks, WINDOW_MS, now)
    let state: RateLimitState | null = null
    for (const [i, h] of hits.entries()) {
      const { limit, fleet } = checks[i]!
      const counter = { limit, remaining: h.remaining, resetAtMs: h.resetAtMs }
      if (!h.allowed) {
        const message = fleet
          ? `Fleet-wide rate limit reached: ${limit} requests per minute across all keys`
          : `Rate limit reached for this API key: ${limit} requests per minute`
        return { ...counter, refused: new OnnxdError('rate_limited', message, { retryAfterS: secondsUntil(h.resetAtMs, now) }) }
      }
      state = binding(state, counter)
    }
    return state && { ...state, refused: null }
  }
}
