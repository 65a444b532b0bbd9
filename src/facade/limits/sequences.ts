// Concurrent sequences per API key: each node request a completion makes (one per choice, `n`, and per prompt)
// holds one sequence from dispatch until its answer or stream ends, so that one key's burst of large-`n` requests
// cannot take every running and waiting slot of the nodes. Counted in this facade's memory: in a fleet of facades
// (shared Redis counters or not) the bound holds per facade. Imports: shared errors.
import { OnnxdError } from '../../shared/errors.js'

/** The `Retry-After` of a key over its bound: sequences end as their answers do, so a second is a fair first wait. */
export const SEQUENCES_RETRY_AFTER_S = 1

export class SequenceLimiter {
  private readonly held = new Map<string, number>()

  /** `perKey`: the most sequences one key may hold at once; 0 = unlimited. */
  constructor(private readonly perKey: number) {}

  /**
   * Takes `n` sequences for `keyId`, or throws: 422 when `n` alone is over the bound (no wait would help), 429 with
   * `Retry-After` when the key already holds too many. Returns the release (idempotent), to call when they end.
   */
  acquire(keyId: string, n: number): () => void {
    const limit = this.perKey
    if (limit === 0) return () => {}
    if (n > limit) {
      throw new OnnxdError('invalid_value', `Invalid value for 'n': this request needs ${n} sequences (one per choice and prompt); an API key may run at most ${limit} at once`, { param: 'n' })
    }
    const now = this.held.get(keyId) ?? 0
    if (now + n > limit) {
      throw new OnnxdError(
        'rate_limited',
        `Concurrency limit reached for this API key: it runs ${now} of its ${limit} sequences and this request needs ${n} more (one per choice and prompt)`,
        { retryAfterS: SEQUENCES_RETRY_AFTER_S },
      )
    }
    this.held.set(keyId, now + n)
    let released = false
    return () => {
      if (released) return
      released = true
      const left = (this.held.get(keyId) ?? n) - n
      if (left > 0) this.held.set(keyId, left)
      else this.held.delete(keyId)
    }
  }

  /** Sequences `keyId` holds now. */
  holding(keyId: string): number {
    return this.held.get(keyId) ?? 0
  }
}
