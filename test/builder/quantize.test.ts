// The builder's weight encodings, on known values: float16 bits (round to nearest even, subnormals, overflow),
// 4-bit blocks as MatMulNBits reads them (symmetric, scale = largest-magnitude value / -8, low nibble first,
// a partial last block; asymmetric with zero points), and per-tensor int8 as quantize_dynamic writes it (round half to even).
import { describe, expect, it } from 'vitest'
import { floatToHalf, quantizeInt8, quantizeInt8PerChannel, quantizeQ4, Q4_BLOCK } from '../../src/builder/quantize.js'
import { halfToFloat } from '../../src/engine/model/fp16.js'

describe('floatToHalf', () => {
  it('gives the known bit patterns', () => {
    expect(floatToHalf(1)).toBe(0x3c00)
    expect(floatToHalf(-2)).toBe(0xc000)
    expect(floatToHalf(65504)).toBe(0x7bff)
    expect(floatToHalf(65520)).toBe(0x7c00) // rounds up past the largest half: infinity
    expect(floatToHalf(-Infinity)).toBe(0xfc00)
    expect(floatToHalf(2 ** -24)).toBe(0x0001) // smallest subnormal
    expect(floatToHalf(2 ** -26)).toBe(0x0000)
    expect(floatToHalf(1 + 2 ** -11)).toBe(0x3c00) // a tie rounds to the even mantissa
    expect(floatToHalf(1 + 3 * 2 ** -11)).toBe(0x3c02)
    expect(Number.isNaN(halfToFloat(floatToHalf(NaN)))).toBe(true)
  })

  it('round-trips every finite half through the engine decoder', () => {
    for (let h = 0; h < 0x10000; h++) {
      if ((h & 0x7c00) === 0x7c00) continue
      expect(floatToHalf(halfToFloat(h)) === h || (h === 0x8000 && floatToHalf(-0) === 0x8000)).toBe(true)
    }
  })
})

describe('quantizeQ4', () => {
  it('int8 per channel: one scale per column (axis 1) or row (axis 0), each max|v| / 127 (63 with reduce_range) of its channel', () => {
    // [2, 3]: columns have max |v| 2, 30, 0.5; rows 30 and 10.
    const v = Float32Array.of(1.2, -30, 0.5, -2, 10, 0.2)
    const byCol = quantizeInt8PerChannel(v, 2, 3, 1)
    expect(Array.from(byCol.scales)).toEqual([Math.fround(2 / 127), Math.fround(30 / 127), Math.fround(0.5 / 127)])
    expect(Array.from(byCol.q)).toEqual([76, -127, 127, -127, 42, 51])
    const byRow = quantizeInt8PerChannel(v, 2, 3, 0)
    expect(Array.from(byRow.scales)).toEqual([Math.fround(30 / 127), Math.fround(10 / 127)])
    expect(Array.from(byRow.q)).toEqual([5, -127, 2, -25, 127, 3])
    // reduce_range: 7-bit weights, max|v| / 63.
    const reduced = quantizeInt8PerChannel(v, 2, 3, 1, 63)
    expect(Array.from(reduced.scales)).toEqual([Math.fround(2 / 63), Math.fround(30 / 63), Math.fround(0.5 / 63)])
    expect(Array.from(reduced.q)).toEqual([38, -63, 63, -63, 21, 25])
  })

  it('at 8 bits, blocks of 64: one byte per value, scale = the largest-magnitude value / -128, within half a step', () => {
    const K = 64
    const v = Array.from({ length: K }, (_, k) => Math.sin(k) * (k === 5 ? 3 : 1))
    const q = quantizeQ4(K, 1, (k) => v[k], 8, 64)
    expect(q.blocks).toBe(1)
    expect(q.packed.length).toBe(64)
    expect(q.scales[0]).toBeCloseTo((Math.sin(5) * 3) / -128, 6)
    expect(q.packed[5]).toBe(0)
    for (let k = 0; k < K; k++) expect(Math.abs((q.packed[k] - 128) * q.scales[0] - v[k])).toBeLessThanOrEqual(Math.abs(q.scales[0]) / 2 + 1e-6)
  })

  it('packs a block low nibble first with scale = the largest-magnitude value / -8', () => {
    // K = 32, N = 1: values k * 0.1 - 1.6 (largest magnitude -1.6 at k = 0).
    const v = Array.from({ length: Q4_BLOCK }, (_, k) => k * 0.1 - 1.6)
    const q = quantizeQ4(Q4_BLOCK, 1, (k) => v[k])
    expect(q.blocks).toBe(1)
    expect(q.scales[0]).toBeCloseTo(0.2, 6)
    // q = floor(v / 0.2 + 8.5): k = 0 -> 0, k = 1 -> floor(-7.5 + 8.5) = 1, k = 2 -> 1, k = 3 -> floor(-6.5 + 8.5) = 2.
    expect(q.packed[0]).toBe(0 | (1 << 4))
    expect(q.packed[1]).toBe(1 | (2 << 4))
    // Every value dequantizes to within half a step.
    for (let k = 0; k < Q4_BLOCK; k++) {
      const nib = (q.packed[k >> 1] >> ((k & 1) * 4)) & 15
      expect(Math.abs((nib - 8) * q.scales[0] - v[k])).toBeLessThanOrEqual(0.1 + 1e-6)
    }
  })

  it('lays out [N, blocks, 16] with a zero-padded last block, column by column', () => {
    const K = 40
    const N = 3
    const at = (k: number, n: number): number => (n + 1) * (k % 2 === 0 ? 1 : -1) * (k + 1)
    const q = quantizeQ4(K, N, at)
    expect(q.blocks).toBe(2)
    expect(q.packed.length).toBe(N * 2 * 16)
    expect(q.scales.length).toBe(N * 2)
    for (let n = 0; n < N; n++) {
      // Block 0 of column n: largest magnitude is k = 31 (odd, negative): scale = 32(n+1) / 8 = 4(n + 1).
      expect(q.scales[n * 2]).toBeCloseTo(4 * (n + 1), 5)
      // Block 1: k = 32..39, largest magnitude at k = 39 (negative).
      expect(q.scales[n * 2 + 1]).toBeCloseTo((40 * (n + 1)) / 8, 5)
      // Past K the block holds 8 (zero after dequantization).
      const last = (n * 2 + 1) * 16
      for (let j = 4; j < 16; j++) expect(q.packed[last + j]).toBe(0x88)
    }
  })

  it('with zero points: a block spans min(0, least) to max(0, greatest) in 15 steps, its zero point packed low nibble first', () => {
    // K = 80, N = 2: three blocks per column, all values >= 0 in block 0 (min 0), skewed in block 1, block 2 padded.
    const K = 80
    const at = (k: number, n: number): number => (k < 32 ? k * 0.1 : k < 64 ? (k - 40) * 0.25 : -0.5 - k * 0.01) * (n + 1)
    const q = quantizeQ4(K, 2, at, 4, Q4_BLOCK, true)
    expect(q.blocks).toBe(3)
    // Two bytes of zero points per column (three blocks at 4 bits each).
    expect(q.zeros?.length).toBe(4)
    const zp = (n: number, b: number): number => (q.zeros![n * 2 + (b >> 1)] >> ((b & 1) * 4)) & 15
    for (let n = 0; n < 2; n++) {
      // Block 0: [0, 3.1(n+1)]: zero point 0, scale range / 15.
      expect(zp(n, 0)).toBe(0)
      expect(q.scales[n * 3]).toBeCloseTo((3.1 * (n + 1)) / 15, 5)
      // Block 1: [-2(n+1), 5.75(n+1)]: zero point round(2 / (7.75 / 15)) = 4.
      expect(zp(n, 1)).toBe(4)
      // Block 2 (k 64..79, all negative, padded to 32): [min, 0], zero point 15; padding dequantizes to 0.
      expect(zp(n, 2)).toBe(15)
      for (let k = 0; k < Q4_BLOCK * 3; k++) {
        const b = Math.floor(k / Q4_BLOCK)
        const nib = (q.packed[(n * 3 + b) * 16 + ((k % Q4_BLOCK) >> 1)] >> ((k & 1) * 4)) & 15
        const want = k < K ? at(k, n) : 0
        expect(Math.abs((nib - zp(n, b)) * q.scales[n * 3 + b] - want)).toBeLessThanOrEqual(q.scales[n * 3 + b] / 2 + 1e-6)
      }
    }
    // Symmetric (the default) carries none.
    expect(quantizeQ4(K, 2, at).zeros).toBeUndefined()
  })

  it('gives scale 0 and all 8s for an all-zero block', () => {
    const q = quantizeQ4(Q4_BLOCK, 1, () => 0)
    expect(q.scales[0]).toBe(0)
    expect([...q.packed]).toEqual(Array(16).fill(0x88))
  })
})

describe('quantizeInt8', () => {
  it('scales by max|v| / 127 and rounds halves to even', () => {
    const { q, scale } = quantizeInt8(Float32Array.of(-127, 2.5, 3.5, -2.5, 0.4, 100))
    expect(scale).toBe(1)
    expect([...q]).toEqual([-127, 2, 4, -2, 0, 100])
    const r = quantizeInt8(Float32Array.of(0.5, -0.25))
    expect(r.scale).toBeCloseTo(0.5 / 127, 9)
    expect([...r.q]).toEqual([127, -64]) // -63.5 rounds to the even -64
  })
})
