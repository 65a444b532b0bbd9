// The one PRNG (src/shared/prng.ts): both seedings repeat, differ by seed and key, and stay bit for bit what
// they were (the sampler's seeded draws and the builder's weights are compared across runs).
import { describe, expect, it } from 'vitest'
import { Rng, randomSeed } from '../../src/shared/prng.js'

const draws = (rng: Rng, n: number): number[] => Array.from({ length: n }, () => rng.next())

describe('Rng', () => {
  it('repeats its sequence for the same seed', () => {
    expect(draws(new Rng(1234), 100)).toEqual(draws(new Rng(1234), 100))
    expect(draws(new Rng(-7), 10)).toEqual(draws(new Rng(-7), 10))
  })

  it('gives different sequences for different seeds, including seeds differing only above bit 32', () => {
    const seeds = [0, 1, 2, -1, 2 ** 32, 2 ** 32 + 1, 2 ** 40, Number.MAX_SAFE_INTEGER]
    const firsts = seeds.map((s) => draws(new Rng(s), 4).join(','))
    expect(new Set(firsts).size).toBe(seeds.length)
  })

  it('draws floats in [0, 1) that look uniform', () => {
    const rng = new Rng(99)
    const bins = new Array<number>(10).fill(0)
    const n = 100_000
    let sum = 0
    let outside = 0
    for (let i = 0; i < n; i++) {
      const x = rng.next()
      if (!(x >= 0 && x < 1)) outside++
      bins[Math.floor(x * 10)]!++
      sum += x
    }
    expect(outside).toBe(0)
    expect(Math.abs(sum / n - 0.5)).toBeLessThan(0.01)
    // Each bin expects 10 000; 5 standard deviations is about ±475.
    for (const b of bins) expect(Math.abs(b - n / 10)).toBeLessThan(500)
  })

  it('gives 32-bit unsigned integers', () => {
    const rng = new Rng(5)
    let or = 0
    for (let i = 0; i < 1000; i++) {
      const u = rng.nextUint32()
      expect(Number.isInteger(u) && u >= 0 && u < 2 ** 32).toBe(true)
      or |= u
    }
    expect(or >>> 0).toBe(0xffffffff) // every bit gets set at some point
  })

  it('keeps both seedings bit for bit: a seeded request and a built model give what they gave before', () => {
    const first3 = (r: Rng): number[] => [r.nextUint32(), r.nextUint32(), r.nextUint32()]
    expect(first3(new Rng(42))).toEqual([3703172728, 122334830, 998575122])
    expect(first3(new Rng(42, 'model.embed_tokens.weight'))).toEqual([1314469980, 2443537148, 3989608078])
  })

  it('gives one independent stream per key, and normal samples for the builder', () => {
    const u = (r: Rng): number[] => Array.from({ length: 8 }, () => r.nextUint32())
    expect(u(new Rng(7, 'a'))).toEqual(u(new Rng(7, 'a')))
    expect(u(new Rng(7, 'a'))).not.toEqual(u(new Rng(7, 'b')))
    expect(u(new Rng(7, ''))).not.toEqual(u(new Rng(7)))
    const x = new Float32Array(20_001)
    new Rng(3, 'w').fillNormal(x, 2)
    const mean = x.reduce((a, b) => a + b, 0) / x.length
    const sd = Math.sqrt(x.reduce((a, b) => a + (b - mean) ** 2, 0) / x.length)
    expect(Math.abs(mean)).toBeLessThan(0.05)
    expect(Math.abs(sd - 2)).toBeLessThan(0.05)
  })

  it('draws random seeds that are safe integers and differ', () => {
    const a = randomSeed()
    const b = randomSeed()
    expect(Number.isSafeInteger(a) && a >= 0).toBe(true)
    expect(a).not.toBe(b)
  })
})
