// The rate-limit counters: one behavioural suite run against the in-process store and against Redis (a throwaway
// redis-server, or ONNXD_TEST_REDIS_URL; skipped with the reason when neither exists), plus what only a shared
// backend promises: facades counting on one Redis admit exactly N in a window between them, and a Redis that
// does not answer lets requests through (fail open), counted.
import { randomBytes } from 'node:crypto'
import { createClient } from 'redis'
import { afterAll, describe, expect, it } from 'vitest'
import type { RateLimitHit, RateLimitStore } from '../../src/store/interfaces.js'
import { MemoryRateLimitStore } from '../../src/store/memory-rate-limit.js'
import { RedisRateLimitStore } from '../../src/store/redis-rate-limit.js'
import { startRedis } from '../helpers/servers.js'

const started = await startRedis()
if (started.reason) console.warn(`Redis suites skipped: ${started.reason}`)
afterAll(async () => {
  await started.server?.stop()
})

/** Each Redis store gets its own key prefix, so tests sharing the server do not share counters. */
const redis = (warn?: (m: string) => void): RedisRateLimitStore =>
  new RedisRateLimitStore({ url: started.server!.url, prefix: `t${randomBytes(4).toString('hex')}:`, warn })

// A window start a few minutes ahead: Redis expires a window's key when it ends, so the windows must lie in the future.
const t0 = (Math.floor(Date.now() / 60_000) + 5) * 60_000

/** One bucket's hit. */
const hit = async (s: RateLimitStore, bucket: string, limit: number, windowMs: number, nowMs: number): Promise<RateLimitHit> =>
  (await s.hits([{ bucket, limit }], windowMs, nowMs))[0]!

const backends: { name: string; make: () => RateLimitStore; skip: string | null }[] = [
  { name: 'MemoryRateLimitStore', make: () => new MemoryRateLimitStore(), skip: null },
  { name: 'RedisRateLimitStore', make: () => redis(), skip: started.reason },
]

for (const b of backends) {
  describe.skipIf(b.skip !== null)(`${b.name}${b.skip ? ` (skipped: ${b.skip})` : ''}`, () => {
    it('counts per bucket in windows aligned to the epoch and resets at the window end', async () => {
      const s = b.make()
      try {
        expect(await hit(s, 'a', 2, 60_000, t0 + 10)).toEqual({ allowed: true, count: 1, remaining: 1, resetAtMs: t0 + 60_000 })
        expect((await hit(s, 'a', 2, 60_000, t0 + 20)).allowed).toBe(true)
        expect(await hit(s, 'a', 2, 60_000, t0 + 30)).toEqual({ allowed: false, count: 3, remaining: 0, resetAtMs: t0 + 60_000 })
        expect((await hit(s, 'b', 2, 60_000, t0 + 30)).allowed).toBe(true)
        expect(await hit(s, 'a', 2, 60_000, t0 + 60_000)).toMatchObject({ allowed: true, count: 1, resetAtMs: t0 + 120_000 })
      } finally {
        await s.close()
      }
    })

    it('counts several buckets in order in one step, and none after the first over its limit', async () => {
      const s = b.make()
      try {
        const both = [
          { bucket: 'key', limit: 1 },
          { bucket: 'fleet', limit: 5 },
        ]
        expect((await s.hits(both, 60_000, t0)).map((h) => [h.allowed, h.count, h.remaining])).toEqual([
          [true, 1, 0],
          [true, 1, 4],
        ])
        // The key is over: the fleet is not counted (another key's request still finds 4 places).
        expect((await s.hits(both, 60_000, t0)).map((h) => [h.allowed, h.count])).toEqual([[false, 2]])
        expect(await hit(s, 'fleet', 5, 60_000, t0)).toMatchObject({ allowed: true, count: 2 })
        expect(await s.hits([], 60_000, t0)).toEqual([])
      } finally {
        await s.close()
      }
    })
  })
}

describe('MemoryRateLimitStore', () => {
  it('sweeps ended windows once the map is large', async () => {
    const s = new MemoryRateLimitStore(2)
    await hit(s, 'a', 1, 1000, 0)
    await hit(s, 'b', 1, 1000, 0)
    await hit(s, 'c', 1, 1000, 5000) // sweeps a and b
    expect((await hit(s, 'a', 1, 1000, 5000)).count).toBe(1)
  })
})

describe.skipIf(started.server === null)(`RedisRateLimitStore, shared${started.reason ? ` (skipped: ${started.reason})` : ''}`, () => {
  it('two facades on one Redis admit exactly N in a window between them', async () => {
    const prefix = `t${randomBytes(4).toString('hex')}:`
    const a = new RedisRateLimitStore({ url: started.server!.url, prefix })
    const b = new RedisRateLimitStore({ url: started.server!.url, prefix })
    try {
      const hits = await Promise.all(Array.from({ length: 100 }, (_, i) => hit(i % 2 ? a : b, 'fleet', 37, 60_000, t0 + i)))
      expect(hits.filter((h) => h.allowed)).toHaveLength(37)
      expect(hits.map((h) => h.count).sort((x, y) => x - y)).toEqual(Array.from({ length: 100 }, (_, i) => i + 1))
      expect(a.failures + b.failures).toBe(0)
    } finally {
      await a.close()
      await b.close()
    }
  })

  it('the window key expires when its window ends', async () => {
    const s = redis()
    try {
      const start = Math.floor(Date.now() / 1000) * 1000
      await hit(s, 'short', 5, 1000, start)
      const later = await new Promise<number>((resolve) => setTimeout(() => resolve(Date.now()), start + 1100 - Date.now()))
      // The next window is a new key; the old one is gone rather than left to pile up.
      expect((await hit(s, 'short', 5, 1000, later)).count).toBe(1)
      expect((await hit(s, 'short', 5, 1000, start)).count).toBe(1)
    } finally {
      await s.close()
    }
  })
})

describe.skipIf(started.server === null)(`RedisRateLimitStore, Redis connected but silent${started.reason ? ` (skipped: ${started.reason})` : ''}`, () => {
  it('fails open once a hit has waited timeoutMs, then counts again when Redis answers', async () => {
    const url = started.server!.url
    const warnings: string[] = []
    const s = new RedisRateLimitStore({ url, prefix: `t${randomBytes(4).toString('hex')}:`, warn: (m) => warnings.push(m), timeoutMs: 200 })
    const admin = createClient({ url })
    await admin.connect()
    try {
      expect((await hit(s, 'k', 5, 60_000, t0)).count).toBe(1)
      // Redis holds every client's commands for 1.5 s: the hit gives up at 200 ms, allowed and not counted.
      await admin.sendCommand(['CLIENT', 'PAUSE', '1500', 'ALL'])
      expect(await hit(s, 'k', 5, 60_000, t0)).toEqual({ allowed: true, count: 0, remaining: 5, resetAtMs: t0 + 60_000 })
      expect(s.failures).toBe(1)
      expect(warnings[0]).toMatch(/Redis did not answer \(.*timed out.*\); allowing requests/i)
      await admin.sendCommand(['CLIENT', 'UNPAUSE'])
      // The command that timed out still ran once Redis resumed: the count goes on from there.
      expect((await hit(s, 'k', 5, 60_000, t0)).count).toBe(3)
      expect(s.failures).toBe(1)
    } finally {
      await admin.sendCommand(['CLIENT', 'UNPAUSE']).catch(() => undefined)
      await admin.close()
      await s.close()
    }
  })
})

describe('RedisRateLimitStore, Redis down', () => {
  it('fails open: allows the request, counts the failure, warns once', async () => {
    const warnings: string[] = []
    const s = new RedisRateLimitStore({ url: 'redis://127.0.0.1:1', warn: (m) => warnings.push(m), timeoutMs: 200 })
    try {
      expect(await hit(s, 'k', 1, 60_000, t0)).toEqual({ allowed: true, count: 0, remaining: 1, resetAtMs: t0 + 60_000 })
      expect((await hit(s, 'k', 1, 60_000, t0)).allowed).toBe(true)
      expect(s.failures).toBe(2)
      expect(warnings).toHaveLength(1)
      expect(warnings[0]).toMatch(/Redis did not answer.*allowing requests/)
    } finally {
      await s.close()
    }
  })
})
