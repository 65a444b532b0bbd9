// Admission (src/facade/limits/admission.ts): with networked counters, a key this facade admitted before is counted
// while it is looked up (one round trip of waiting, not two); the lookup still decides (revoked keys get 401, changed
// limits are applied), and what is not a known, valid key is never counted before its lookup.
import { describe, expect, it } from 'vitest'
import { hashApiKey } from '../../src/facade/auth/api-keys.js'
import { Authenticator } from '../../src/facade/auth/authenticate.js'
import type { SessionVerifier } from '../../src/facade/auth/jwt.js'
import { Admission } from '../../src/facade/limits/admission.js'
import { RateLimiter } from '../../src/facade/limits/rate-limit.js'
import type { Account, ApiKey, KeyLookup, RateLimitCheck, RateLimitHit, RateLimitStore, Store } from '../../src/store/interfaces.js'
import { MemoryRateLimitStore } from '../../src/store/memory-rate-limit.js'
import { deferred, type Deferred } from '../helpers/deferred.js'

const SECRET = 'sk-svc-abcdefghijklmnopqrstuvwxyz012345'
const OTHER = 'sk-svc-ZYXWVUTSRQPONMLKJIHGFEDCBA543210'
const account: Account = { id: 'acct', name: 'a', email: null, balanceMicros: 1e9, subscription: 'active', createdAt: 0 } as unknown as Account
const keyRow = (over: Partial<ApiKey> = {}): ApiKey => ({
  id: 'key_1',
  accountId: account.id,
  name: null,
  redacted: 'x',
  rpmLimit: 5,
  createdAt: 0,
  lastUsedAt: null,
  revokedAt: null,
  ...over,
})

/** A store whose key lookups wait until the test answers them, and counters that log each hit as it starts. */
function rig(networked: boolean) {
  const lookups: Deferred<KeyLookup | null>[] = []
  const store = {
    findKeyByHash: () => {
      const d = deferred<KeyLookup | null>()
      lookups.push(d)
      return d.promise
    },
  } as unknown as Store
  const log: string[] = []
  const memory = new MemoryRateLimitStore()
  const counters: RateLimitStore = {
    hits(checks: readonly RateLimitCheck[], windowMs: number, nowMs: number): Promise<RateLimitHit[]> {
      log.push(checks.map((c) => `${c.bucket}<=${c.limit}`).join(' '))
      return memory.hits(checks, windowMs, nowMs)
    },
    ...(networked ? { failures: 0 } : {}),
    close: async () => undefined,
  }
  const admission = new Admission(
    new Authenticator(store, {} as SessionVerifier),
    new RateLimiter(counters, { keyRpm: 0, fleetRpm: 100 }, () => 1_000_000),
    networked,
  )
  const found = (secret: string, key: ApiKey): KeyLookup => ({ key, account, hash: hashApiKey(secret) })
  /** Starts an admission and lets the event loop run up to the lookup; `[p]`: a bare promise would be awaited. */
  const start = async (secret = SECRET): Promise<[ReturnType<Admission['admit']>]> => {
    const p = admission.admit(`Bearer ${secret}`, 'key')
    p.catch(() => undefined)
    await new Promise((r) => setImmediate(r))
    return [p]
  }
  return { lookups, log, found, start }
}

describe('Admission', () => {
  it('counts a key it admitted before while the key is looked up, and only then', async () => {
    const { lookups, log, found, start } = rig(true)
    const [first] = await start()
    // Never seen: nothing is counted before the lookup answers.
    expect(log).toEqual([])
    lookups[0]!.resolve(found(SECRET, keyRow()))
    await expect(first).resolves.toMatchObject({ limit: { limit: 5, remaining: 4, refused: null } })
    expect(log).toEqual(['key:key_1<=5 fleet<=100'])

    const [second] = await start()
    // Known: counted already, while its lookup is still out.
    expect(log).toHaveLength(2)
    lookups[1]!.resolve(found(SECRET, keyRow()))
    await expect(second).resolves.toMatchObject({ principal: { kind: 'key', key: { id: 'key_1' } }, limit: { remaining: 3 } })
    expect(log).toHaveLength(2) // counted once
  })

  it('a key revoked since gets its 401 and is not counted ahead again', async () => {
    const { lookups, log, found, start } = rig(true)
    const [first] = await start()
    lookups[0]!.resolve(found(SECRET, keyRow()))
    await first
    const [revoked] = await start()
    lookups[1]!.resolve(found(SECRET, keyRow({ revokedAt: 5 })))
    await expect(revoked).rejects.toMatchObject({ code: 'unauthorized' })
    expect(log).toHaveLength(2) // the one count made ahead
    const [again] = await start()
    expect(log).toHaveLength(2)
    lookups[2]!.resolve(found(SECRET, keyRow({ revokedAt: 5 })))
    await expect(again).rejects.toMatchObject({ code: 'unauthorized' })
    expect(log).toHaveLength(2)
  })

  it('a key whose limit changed is counted again under the new limit (that request counts twice), then known by it', async () => {
    const { lookups, log, found, start } = rig(true)
    const [first] = await start()
    lookups[0]!.resolve(found(SECRET, keyRow({ rpmLimit: 5 })))
    await first
    const [changed] = await start()
    lookups[1]!.resolve(found(SECRET, keyRow({ rpmLimit: 10 })))
    // Counted under 5 ahead (2 of 5), then under its new 10: 3 counted in the window.
    await expect(changed).resolves.toMatchObject({ limit: { limit: 10, remaining: 7, refused: null } })
    expect(log.slice(1)).toEqual(['key:key_1<=5 fleet<=100', 'key:key_1<=10 fleet<=100'])
    const [next] = await start()
    expect(log.slice(3)).toEqual(['key:key_1<=10 fleet<=100']) // counted ahead under the new limit
    lookups[2]!.resolve(found(SECRET, keyRow({ rpmLimit: 10 })))
    await expect(next).resolves.toMatchObject({ limit: { limit: 10, remaining: 6 } })
    expect(log).toHaveLength(4)
  })

  it('never counts ahead a key it has not admitted: unknown, malformed, or another key', async () => {
    const { lookups, log, found, start } = rig(true)
    const [first] = await start()
    lookups[0]!.resolve(found(SECRET, keyRow()))
    await first
    const [unknown] = await start(OTHER)
    expect(log).toHaveLength(1)
    lookups[1]!.resolve(null)
    await expect(unknown).rejects.toMatchObject({ code: 'unauthorized' })
    expect(log).toHaveLength(1)
    const [malformed] = await start('sk-svc-short')
    await expect(malformed).rejects.toMatchObject({ code: 'unauthorized' })
    expect(log).toHaveLength(1)
  })

  it('with counters in process, looks up first and counts after, every time', async () => {
    const { lookups, log, found, start } = rig(false)
    for (let i = 0; i < 2; i++) {
      const [p] = await start()
      expect(log).toHaveLength(i)
      lookups[i]!.resolve(found(SECRET, keyRow()))
      await p
      expect(log).toHaveLength(i + 1)
    }
  })
})
