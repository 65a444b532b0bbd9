// The quality check's math on synthetic logits: log-softmax, KL divergence (zero for identical distributions,
// known values otherwise, invariant to a shift of the logits), argmax ties, and agreement over positions.
import { describe, expect, it } from 'vitest'
import { argmax, compareLogits, klDivergence, logSoftmax } from '../../src/bench/quality.js'

describe('quality math', () => {
  it('log-softmax of equal logits is -log(vocab), and survives large logits', () => {
    for (const x of logSoftmax([5, 5, 5, 5], 0, 4)) expect(x).toBeCloseTo(-Math.log(4), 14)
    const big = logSoftmax([1000, 0], 0, 2)
    expect(big[0]).toBeCloseTo(0, 12)
    expect(big[1]).toBeCloseTo(-1000, 9)
  })

  it('KL of identical distributions is 0, also when the logits differ by a constant', () => {
    expect(klDivergence([0.3, -1, 2], [0.3, -1, 2])).toBe(0)
    expect(klDivergence([0.3, -1, 2], [10.3, 9, 12])).toBeCloseTo(0, 12)
  })

  it('KL has its known values', () => {
    // P = (1/2, 1/2), Q = (3/4, 1/4): KL = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3).
    expect(klDivergence([0, 0], [Math.log(3), 0])).toBeCloseTo(0.5 * Math.log(4 / 3), 12)
    // Not symmetric: KL(Q || P) = 3/4 ln(3/2) + 1/4 ln(1/2).
    expect(klDivergence([Math.log(3), 0], [0, 0])).toBeCloseTo(0.75 * Math.log(1.5) + 0.25 * Math.log(0.5), 12)
    // P one-hot in the limit: KL = -ln q(top).
    expect(klDivergence([0, -1e4], [0, 0])).toBeCloseTo(Math.log(2), 9)
  })

  it('argmax takes the first of equal maxima, within the given row', () => {
    expect(argmax([1, 3, 3, 0])).toBe(1)
    expect(argmax([9, 9, 1, 2, 2], 2, 3)).toBe(1)
  })

  it('agreement counts positions whose argmax matches, and KL is averaged over positions', () => {
    const V = 2
    const ref = Float32Array.of(0, 0, 2, 0, 0, 3, 1, 0) // argmax 0, 0, 1, 0
    const test = Float32Array.of(Math.log(3), 0, 2, 0, 3, 0, 0, 1) // argmax 0, 0, 0, 1
    const r = compareLogits(ref, test, V)
    expect(r.positions).toBe(4)
    expect(r.agreement).toBe(0.5)
    const kls = [0, 1, 2, 3].map((i) => klDivergence(ref, test, V, i * V, i * V))
    expect(kls[1]).toBe(0)
    expect(r.meanKl).toBeCloseTo((kls[0] + kls[2] + kls[3]) / 4, 12)
    expect(compareLogits(ref, ref, V)).toEqual({ positions: 4, agreement: 1, meanKl: 0 })
  })

  it('refuses logits that do not hold whole rows', () => {
    expect(() => compareLogits(new Float32Array(4), new Float32Array(6), 2)).toThrow(/do not both hold whole rows of 2/)
  })
})
