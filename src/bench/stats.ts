// Summary statistics of the benchmark (numpy-compatible percentiles, mean, std) and seeded Poisson arrivals.
// Pure functions over arrays; no I/O. Imports: the builder's seeded PRNG.
import { Rng } from '../shared/prng.js'

export const mean = (xs: readonly number[]): number => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN)

/** Population standard deviation (numpy's default, ddof=0), as vLLM's benchmark reports `std_*`. */
export function std(xs: readonly number[]): number {
  const m = mean(xs)
  return Math.sqrt(mean(xs.map((x) => (x - m) ** 2)))
}

/** Relative standard deviation in percent. */
export const rsd = (xs: readonly number[]): number => (std(xs) / mean(xs)) * 100

/**
 * The p-th percentile (0..100) with linear interpolation between closest ranks: numpy.percentile's default
 * ("linear"), which is what vLLM's benchmark_serving uses. NaN for an empty sample.
 */
export function percentile(xs: readonly number[], p: number): number {
  if (!xs.length) return NaN
  if (!(p >= 0 && p <= 100)) throw new RangeError(`percentile must be in [0, 100]. Given: ${p}`)
  const s = [...xs].sort((a, b) => a - b)
  const h = ((s.length - 1) * p) / 100
  const lo = Math.floor(h)
  const hi = Math.min(s.length - 1, lo + 1)
  return s[lo] + (h - lo) * (s[hi] - s[lo])
}

export const median = (xs: readonly number[]): number => percentile(xs, 50)

/** The summary vLLM prints for each latency: mean, median (p50), std, and the chosen percentiles. */
export interface Summary {
  mean: number
  median: number
  std: number
  p90: number
  p99: number
}

/** Summary of a sample; an empty sample summarizes to zeros with `n: 0`, so reports stay finite. */
export function summarize(xs: readonly number[]): Summary & { n: number } {
  if (!xs.length) return { n: 0, mean: 0, median: 0, std: 0, p90: 0, p99: 0 }
  return { n: xs.length, mean: mean(xs), median: median(xs), std: std(xs), p90: percentile(xs, 90), p99: percentile(xs, 99) }
}

/** A seeded uniform source in [0, 1): xoshiro128** streams keyed by (seed, purpose), so each use is independent. */
export class SeededRandom {
  private readonly rng: Rng

  constructor(seed: number, purpose: string) {
    this.rng = new Rng(seed, purpose)
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.rng.nextUint32() / 4294967296
  }

  /** Uniform integer in [lo, hi] (both inclusive). */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1))
  }
}

/**
 * Arrival times (seconds from the start) of `n` requests of a Poisson process with `rate` requests/s: exponential
 * gaps with mean 1/rate, drawn from a seeded stream so a run is reproducible. An infinite rate sends all at 0.
 */
export function poissonArrivals(rate: number, n: number, seed: number): number[] {
  if (!(rate > 0)) throw new RangeError(`request rate must be > 0. Given: ${rate}`)
  if (rate === Infinity) return new Array<number>(n).fill(0)
  const r = new SeededRandom(seed, 'arrivals')
  const out: number[] = []
  let t = 0
  for (let i = 0; i < n; i++) {
    // 1 - u is in (0, 1], so the log is finite.
    t += -Math.log(1 - r.next()) / rate
    out.push(t)
  }
  return out
}
