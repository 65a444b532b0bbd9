// Admission of a /v1 request: its credential (401), then, for an API key, its rate limits (429). With counters in a
// shared backend (Redis: a round trip away, as a shared store's key lookup is), a key this facade has admitted before
// is counted while it is looked up, under the id and limit it had then: the request waits for one round trip instead
// of two. The lookup still decides. A key revoked since gets its 401; a key whose limit changed is counted again under
// its new limit (that request counts twice). Either way this facade then forgets or updates what it knew, so a change
// to a key costs at most one extra count per facade, in that key's own bucket and the fleet's. Keys that never passed
// a lookup (unknown, malformed) are never counted ahead. Imports: auth, rate limits, store interfaces.
import type { ApiKey } from '../../store/interfaces.js'
import type { Authenticator, Principal, RouteAuth } from '../auth/authenticate.js'
import type { RateLimiter, RateLimitVerdict } from './rate-limit.js'

/** Keys remembered (least recently admitted forgotten first): their ids and limits, by the hash of the secret. */
export const ADMITTED_KEYS_KEPT = 10_000

export interface Admitted {
  principal: Principal
  /** The binding rate limit (its `refused` set when over), or null: unlimited, or not an API key. */
  limit: RateLimitVerdict | null
}

type KeyLimit = Pick<ApiKey, 'id' | 'rpmLimit'>

export class Admission {
  private readonly seen = new Map<string, KeyLimit>()

  /** `overlap`: count a known key while it is looked up (for counters a round trip away); off, one after the other. */
  constructor(
    private readonly auth: Authenticator,
    private readonly limiter: RateLimiter,
    private readonly overlap: boolean,
    private readonly kept = ADMITTED_KEYS_KEPT,
  ) {}

  async admit(header: string | undefined, want: RouteAuth): Promise<Admitted> {
    // Filled as the key's lookup starts: its hash, what this facade knew of it, and the count made meanwhile.
    const ahead: { hash?: string; guess?: KeyLimit; early?: Promise<RateLimitVerdict | null> } = {}
    const startAhead = (hash: Buffer): void => {
      ahead.hash = hash.toString('base64')
      ahead.guess = this.seen.get(ahead.hash)
      ahead.early = ahead.guess && this.limiter.admit(ahead.guess)
      // Settled below unless the lookup fails first: never an unhandled rejection.
      ahead.early?.catch(() => undefined)
    }
    let principal: Principal
    try {
      principal = await this.auth.authenticate(header, want, this.overlap ? startAhead : undefined)
    } catch (e) {
      if (ahead.hash !== undefined) this.seen.delete(ahead.hash)
      throw e
    }
    if (principal.kind !== 'key') return { principal, limit: null }
    const { key } = principal
    const { hash, guess, early } = ahead
    if (hash !== undefined) this.remember(hash, key)
    if (early && guess!.id === key.id && guess!.rpmLimit === key.rpmLimit) return { principal, limit: await early }
    if (early) await early
    return { principal, limit: await this.limiter.admit(key) }
  }

  private remember(hash: string, key: ApiKey): void {
    // Re-inserted, so that the Map's order is least recently admitted first.
    this.seen.delete(hash)
    this.seen.set(hash, { id: key.id, rpmLimit: key.rpmLimit })
    if (this.seen.size > this.kept) this.seen.delete(this.seen.keys().next().value!)
  }
}
