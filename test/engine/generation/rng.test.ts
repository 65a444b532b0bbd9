import { describe, expect, it } from 'vitest'
import { Rng, randomSeed } from '../../../src/engine/generation/rng.js'

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

  it('draws random seeds that are safe integers and differ', () => {
    const a = randomSeed()
    const b = randomSeed()
    expect(Number.isSafeInteger(a) && a >= 0).toBe(true)
    expect(a).not.toBe(b)
  })
})
