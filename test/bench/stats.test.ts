import { describe, expect, it } from 'vitest'
import { mean, median, percentile, poissonArrivals, SeededRandom, std, summarize } from '../../src/bench/stats.js'

describe('percentile', () => {
  it('interpolates linearly between closest ranks, as numpy.percentile does', () => {
    const xs = [15, 20, 35, 40, 50]
    // numpy.percentile([15, 20, 35, 40, 50], [0, 25, 50, 90, 99, 100]) = 15, 20, 35, 46, 49.6, 50
    expect(percentile(xs, 0)).toBe(15)
    expect(percentile(xs, 25)).toBe(20)
    expect(percentile(xs, 50)).toBe(35)
    expect(percentile(xs, 90)).toBeCloseTo(46, 10)
    expect(percentile(xs, 99)).toBeCloseTo(49.6, 10)
    expect(percentile(xs, 100)).toBe(50)
  })

  it('ignores input order, and is NaN for no sample', () => {
    expect(percentile([4, 1, 3, 2], 50)).toBe(2.5)
    expect(median([3, 1, 2])).toBe(2)
    expect(percentile([], 50)).toBeNaN()
    expect(percentile([7], 99)).toBe(7)
  })

  it('rejects a percentile outside [0, 100]', () => {
    expect(() => percentile([1], 101)).toThrow(RangeError)
  })
})

describe('mean, std, summarize', () => {
  it('uses the population std (numpy ddof=0)', () => {
    expect(mean([1, 2, 3, 4])).toBe(2.5)
    expect(std([1, 2, 3, 4])).toBeCloseTo(Math.sqrt(1.25), 12)
  })

  it('summarizes an empty sample to zeros so reports stay finite', () => {
    expect(summarize([])).toEqual({ n: 0, mean: 0, median: 0, std: 0, p90: 0, p99: 0 })
    expect(summarize([1, 2, 3])).toMatchObject({ n: 3, mean: 2, median: 2 })
  })
})

describe('seeded randomness', () => {
  it('gives the same stream for the same seed and purpose, another for another seed', () => {
    const a = new SeededRandom(42, 'x')
    const b = new SeededRandom(42, 'x')
    const c = new SeededRandom(43, 'x')
    const xs = Array.from({ length: 5 }, () => a.next())
    expect(Array.from({ length: 5 }, () => b.next())).toEqual(xs)
    expect(Array.from({ length: 5 }, () => c.next())).not.toEqual(xs)
  })

  it('draws integers within the inclusive range', () => {
    const r = new SeededRandom(1, 'int')
    const xs = Array.from({ length: 2000 }, () => r.int(3, 7))
    expect(Math.min(...xs)).toBe(3)
    expect(Math.max(...xs)).toBe(7)
  })
})

describe('poissonArrivals', () => {
  it('is reproducible from its seed', () => {
    expect(poissonArrivals(5, 100, 7)).toEqual(poissonArrivals(5, 100, 7))
    expect(poissonArrivals(5, 100, 7)).not.toEqual(poissonArrivals(5, 100, 8))
  })

  it('has the requested mean rate and exponential gaps', () => {
    const rate = 4
    const n = 20_000
    const t = poissonArrivals(rate, n, 1)
    const gaps = t.map((x, i) => x - (i ? t[i - 1] : 0))
    expect(gaps.every((g) => g > 0)).toBe(true)
    // Mean gap 1/rate; for exponential gaps the std equals the mean. 20k samples: within 3%.
    expect(mean(gaps)).toBeCloseTo(1 / rate, 2)
    expect(Math.abs(n / t[n - 1] - rate) / rate).toBeLessThan(0.03)
    expect(Math.abs(std(gaps) - 1 / rate) / (1 / rate)).toBeLessThan(0.05)
  })

  it('sends everything at once for an infinite rate, and rejects a non-positive one', () => {
    expect(poissonArrivals(Infinity, 3, 0)).toEqual([0, 0, 0])
    expect(() => poissonArrivals(0, 3, 0)).toThrow(RangeError)
  })
})
