import { describe, expect, it } from 'vitest'
import { MemoryRateLimitStore } from '../../src/store/memory-rate-limit.js'

describe('MemoryRateLimitStore', () => {
  it('counts per bucket in windows aligned to the epoch and resets at the window end', async () => {
    const s = new MemoryRateLimitStore()
    const t0 = 28_333_334 * 60_000 // a window start
    expect(await s.hit('a', 2, 60_000, t0 + 10)).toEqual({ allowed: true, count: 1, remaining: 1, resetAtMs: t0 + 60_000 })
    expect((await s.hit('a', 2, 60_000, t0 + 20)).allowed).toBe(true)
    expect(await s.hit('a', 2, 60_000, t0 + 30)).toEqual({ allowed: false, count: 3, remaining: 0, resetAtMs: t0 + 60_000 })
    expect((await s.hit('b', 2, 60_000, t0 + 30)).allowed).toBe(true)
    expect(await s.hit('a', 2, 60_000, t0 + 60_000)).toMatchObject({ allowed: true, count: 1, resetAtMs: t0 + 120_000 })
  })

  it('sweeps ended windows once the map is large', async () => {
    const s = new MemoryRateLimitStore(2)
    await s.hit('a', 1, 1000, 0)
    await s.hit('b', 1, 1000, 0)
    await s.hit('c', 1, 1000, 5000) // sweeps a and b
    expect((await s.hit('a', 1, 1000, 5000)).count).toBe(1)
  })
})
