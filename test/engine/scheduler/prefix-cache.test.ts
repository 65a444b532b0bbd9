// PrefixCache on synthetic KV data: what a lookup finds (whole blocks, the exact chain, within the limit), what an
// insert stores, and what eviction drops (least recently used leaves first, down to a byte bound); and KvCache's
// readSlots/loadPrefix, the copies between a cache row and the blocks.
import { describe, expect, it } from 'vitest'
import { PrefixCache } from '../../../src/engine/scheduler/prefix-cache.js'
import { KvCache, type KvShape } from '../../../src/engine/scheduler/kv.js'
import type { KvData } from '../../../src/engine/model/step-io.js'

const B = 4
/** A block whose every value is its first token, so a hit says which blocks it copied. */
const readOf = (ids: readonly number[], reads: number[] = []) => (from: number, n: number): KvData => {
  reads.push(from)
  return new Float32Array(n).fill(ids[from])
}
const firstTokens = (blocks: KvData[]): number[] => blocks.map((b) => b[0])
const seq = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i)

describe('PrefixCache', () => {
  it('finds the whole blocks a prompt starts with, up to the limit, and only reads blocks it does not hold', () => {
    const c = new PrefixCache(B)
    const a = seq(100, 10) // blocks [100..103], [104..107]; the last 2 tokens are no whole block
    const reads: number[] = []
    c.insert(a, readOf(a, reads))
    expect(reads).toEqual([0, 4])
    expect(c.size).toBe(2)
    expect(c.bytes).toBe(2 * B * 4)

    expect(c.lookup(a, a.length).tokens).toBe(8)
    expect(firstTokens(c.lookup([...seq(100, 8), 1, 2, 3], 10).blocks)).toEqual([100, 104])
    // The limit keeps the prompt's last token out of the cache: a prompt of exactly 8 reuses one block.
    expect(c.lookup(seq(100, 8), 7).tokens).toBe(4)
    expect(c.lookup(seq(100, 3), 2).tokens).toBe(0)

    // A longer prompt on the same prefix reads only its new blocks.
    const b = seq(100, 16)
    reads.length = 0
    c.insert(b, readOf(b, reads))
    expect(reads).toEqual([8, 12])
    expect(c.lookup(b, 16).tokens).toBe(16)
  })

  it('matches a block only after the same tokens: equal blocks at other places or after other prefixes miss', () => {
    const c = new PrefixCache(B)
    const a = [1, 2, 3, 4, 5, 6, 7, 8]
    c.insert(a, readOf(a))
    expect(c.lookup([9, 2, 3, 4, 5, 6, 7, 8], 8).tokens).toBe(0)
    expect(c.lookup([5, 6, 7, 8, 1, 2, 3, 4], 8).tokens).toBe(0)
    expect(c.lookup([1, 2, 3, 4, 5, 6, 7, 9], 8).tokens).toBe(4)
  })

  it('evicts the least recently used leaves first, never a block whose children are cached', () => {
    const c = new PrefixCache(B)
    const shared = seq(0, 4)
    const x = [...shared, ...seq(10, 4)]
    const y = [...shared, ...seq(20, 4)]
    const z = seq(30, 8)
    for (const p of [x, y, z]) c.insert(p, readOf(p))
    expect(c.size).toBe(5)
    c.lookup(x, 8) // x's chain is now the most recently used
    c.shrinkTo(c.bytes - 1) // one block goes: y's leaf (z's leaf was inserted later, x's was used since)
    expect(c.lookup(y, 8).tokens).toBe(4)
    expect(c.lookup(z, 8).tokens).toBe(8)
    expect(c.lookup(x, 8).tokens).toBe(8)
    c.shrinkTo(3 * B * 4)
    // Used in the order y, z, x: the shared block outlives its leaves only while one of them is cached.
    expect(c.size).toBe(3)
    expect(c.lookup(x, 8).tokens).toBe(8)
    expect(c.lookup(z, 8).tokens).toBe(4)
    c.shrinkTo(0)
    expect(c.size).toBe(0)
    expect(c.bytes).toBe(0)
    expect(c.lookup(x, 8).tokens).toBe(0)
  })

  it('at its bound, makes room for each new block by evicting a least recently used leaf and writing into its buffer', () => {
    const c = new PrefixCache(B)
    const bytes = B * 4
    const x = seq(0, 8)
    const y = seq(10, 8)
    for (const p of [x, y]) c.insert(p, readOf(p))
    const before = [...c.lookup(x, 8).blocks] // x's chain is now the most recently used; y's the least
    const intos: Array<KvData | undefined> = []
    const z = seq(20, 12)
    c.insert(z, (from, n, into) => {
      intos.push(into)
      return (into ?? new Float32Array(n)).fill(z[from])
    }, 4 * bytes)
    // Three new blocks at a bound of four: one evicted leaf of y's, then y's first block (a leaf once its child
    // went), then x's leaf; every new block went into an evicted block's buffer.
    expect(intos.every((i) => i !== undefined)).toBe(true)
    expect(c.bytes).toBe(4 * bytes)
    expect(c.lookup(y, 8).tokens).toBe(0)
    expect(c.lookup(x, 8).tokens).toBe(4)
    expect(intos[2]).toBe(before[1])
    expect(firstTokens(c.lookup(z, 12).blocks)).toEqual([20, 24, 28])
  })

  it('at its bound with nothing else to evict, caches what fits of a prompt and never evicts the chain it extends', () => {
    const c = new PrefixCache(B)
    const bytes = B * 4
    const z = seq(0, 16)
    const reads: number[] = []
    c.insert(z, readOf(z, reads), 2 * bytes)
    // The first block's size is known once it is read: the bound holds from the second on.
    expect(reads).toEqual([0, 4])
    expect(c.lookup(z, 16).tokens).toBe(8)
    expect(c.bytes).toBe(2 * bytes)
  })
})

describe('KvCache prefix copies', () => {
  for (const outer of [1, 2]) {
    it(`readSlots and loadPrefix carry a row's slots to another cache unchanged (${outer === 2 ? 'stacked' : 'unstacked'})`, () => {
      const shape: KvShape = { tensors: 2, outer, heads: 2, headDim: 3, dtype: 'float32', present: 'appended' }
      const H = shape.heads
      const D = shape.headDim
      const src = new KvCache(shape, 4)
      src.addRows(2)
      // A present of 2 rows x 10 tokens whose values encode (tensor, outer, row, head, position, d).
      const P = 10
      const present = [0, 1].map((t) => {
        const data = new Float32Array(outer * 2 * H * P * D)
        for (let i = 0; i < data.length; i++) data[i] = t * 100000 + i + 1
        return { data, dims: outer === 1 ? [2, H, P, D] : [outer, 2, H, P, D] }
      })
      src.append(present, [P, P])
      const blocks = [src.readSlots(1, 0, 4), src.readSlots(1, 4, 4)]
      const dst = new KvCache(shape, 4)
      dst.addRows(3)
      dst.loadPrefix(2, blocks, 4)
      expect(dst.lens).toEqual([0, 0, 8])
      expect(dst.readSlots(2, 0, 8)).toEqual(src.readSlots(1, 0, 8))
      expect(() => dst.loadPrefix(2, blocks, 4)).toThrow(/not empty/)
      // Given buffers, readSlots writes into them.
      const into = src.readSlots(0, 0, 4)
      expect(src.readSlots(1, 4, 4, into)).toBe(into)
      expect(into).toEqual(blocks[1])
      expect(() => src.readSlots(1, 0, 2, into)).toThrow(/another shape/)
      // One buffer per block: every tensor's slots, tensor by tensor.
      expect(blocks[0].length).toBe(shape.tensors * outer * H * 4 * D)
    })
  }
})
