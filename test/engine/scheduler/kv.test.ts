// KvCache on small synthetic shapes. Every value a fake present tensor carries encodes (tensor, outer, sequence,
// head, token position, d), so past() can be checked slot by slot: each live slot [0, len) of each row must hold
// exactly its own sequence's token. Pad positions of a present carry GARBAGE, which must never reach the cache.
import { describe, expect, it } from 'vitest'
import { KvCache, type KvShape } from '../../../src/engine/scheduler/kv.js'
import type { KvData, KvTensor, PresentLayout } from '../../../src/engine/model/step-io.js'

const GARBAGE = 60000
const MAX_SEQS = 8
const MAX_POS = 256

const shapeOf = (present: PresentLayout, over: Partial<KvShape> = {}): KvShape => ({
  tensors: 2,
  outer: 1,
  heads: 2,
  headDim: 3,
  dtype: 'float32',
  present,
  ...over,
})

/** The value of element d of token `pos` of sequence `sid`, in tensor t, half o, head h (never 0, never GARBAGE). */
function code(s: KvShape, t: number, o: number, sid: number, h: number, pos: number, d: number): number {
  if (sid >= MAX_SEQS || pos >= MAX_POS) throw new Error('test encoding out of range')
  const v = ((((t * s.outer + o) * MAX_SEQS + sid) * s.heads + h) * MAX_POS + pos) * s.headDim + d + 1
  if (v >= GARBAGE) throw new Error('test encoding out of range')
  return v
}

const alloc = (s: KvShape, n: number): KvData => (s.dtype === 'float16' ? new Uint16Array(n) : new Float32Array(n))

/** A cache and, beside it, which sequence each row holds and how many tokens it should have. */
interface Sim {
  shape: KvShape
  kv: KvCache
  rows: Array<{ sid: number; len: number }>
}

// Slots grow in chunks of 32 here, so the small shapes below cross several chunks.
const newSim = (shape: KvShape): Sim => ({ shape, kv: new KvCache(shape, 32), rows: [] })

function addRows(sim: Sim, ...sids: number[]): void {
  sim.kv.addRows(sids.length)
  for (const sid of sids) sim.rows.push({ sid, len: 0 })
}

function removeRow(sim: Sim, r: number): void {
  sim.kv.removeRow(r)
  sim.rows[r] = sim.rows[sim.rows.length - 1]
  sim.rows.pop()
}

function takeRow(dst: Sim, src: Sim, r: number): void {
  dst.kv.takeRow(src.kv, r)
  dst.rows.push({ ...src.rows[r] })
}

/**
 * The present outputs a step of `seq` positions over the cache (past length kv.cap) returns when row r gained
 * counts[r] tokens:
 * - new: [rows, heads, seq, headDim], the row's new tokens in the last counts[r] positions (pads first);
 * - appended: [rows, heads, cap + seq, headDim], the past in slots [0, len), new tokens in the last counts[r] slots;
 * - in-place: [rows, heads, cap + seq, headDim], the new tokens right after the row's length.
 * Everything else holds GARBAGE.
 */
function presentOf(sim: Sim, seq: number, counts: readonly number[]): KvTensor[] {
  const { shape: s, kv } = sim
  const { outer: O, heads: H, headDim: D } = s
  const rows = sim.rows.length
  const P = s.present === 'new' ? seq : kv.cap + seq
  const dims = O === 1 ? [rows, H, P, D] : [O, rows, H, P, D]
  return Array.from({ length: s.tensors }, (_, t) => {
    const data = alloc(s, O * rows * H * P * D).fill(GARBAGE)
    for (let o = 0; o < O; o++) {
      for (let r = 0; r < rows; r++) {
        const { sid, len } = sim.rows[r]
        const n = counts[r]
        for (let h = 0; h < H; h++) {
          const base = ((o * rows + r) * H + h) * P
          const put = (slot: number, pos: number): void => {
            for (let d = 0; d < D; d++) data[(base + slot) * D + d] = code(s, t, o, sid, h, pos, d)
          }
          if (s.present === 'new') for (let k = 0; k < n; k++) put(P - n + k, len + k)
          else if (s.present === 'appended') {
            for (let p = 0; p < len; p++) put(p, p)
            for (let k = 0; k < n; k++) put(P - n + k, len + k)
          } else for (let p = 0; p < len + n; p++) put(p, p)
        }
      }
    }
    return { data, dims }
  })
}

/** One step: row r gains counts[r] tokens out of `seq` positions. */
function step(sim: Sim, seq: number, counts: readonly number[]): void {
  expect(counts).toHaveLength(sim.rows.length)
  sim.kv.append(presentOf(sim, seq, counts), counts)
  sim.rows.forEach((row, r) => (row.len += counts[r]))
}

/** past() holds every row's tokens in its slots [0, len), under the documented dims, and no pad value anywhere. */
function expectPast(sim: Sim): void {
  const { shape: s, kv } = sim
  const { tensors: T, outer: O, heads: H, headDim: D } = s
  const rows = sim.rows.length
  expect(kv.rows).toBe(rows)
  expect(kv.lens).toEqual(sim.rows.map((r) => r.len))
  const cap = kv.cap
  for (const r of sim.rows) expect(cap).toBeGreaterThanOrEqual(r.len)
  const dims = O === 1 ? [rows, H, cap, D] : [O, rows, H, cap, D]
  const past = kv.past()
  expect(past).toHaveLength(T)
  const bad: string[] = []
  past.forEach((p, t) => {
    expect(p.dims).toEqual(dims)
    expect(p.data).toBeInstanceOf(s.dtype === 'float16' ? Uint16Array : Float32Array)
    expect(p.data.length).toBe(O * rows * H * cap * D)
    expect(p.data.indexOf(GARBAGE)).toBe(-1)
    for (let o = 0; o < O; o++) {
      for (let r = 0; r < rows; r++) {
        const { sid, len } = sim.rows[r]
        for (let h = 0; h < H; h++) {
          for (let slot = 0; slot < len; slot++) {
            for (let d = 0; d < D; d++) {
              const got = p.data[(((o * rows + r) * H + h) * cap + slot) * D + d]
              const want = code(s, t, o, sid, h, slot, d)
              if (got !== want) bad.push(`tensor ${t} outer ${o} row ${r} head ${h} slot ${slot} d ${d}: ${got}, want ${want}`)
            }
          }
        }
      }
    }
  })
  expect(bad.slice(0, 5)).toEqual([])
}

const roundUp32 = (n: number): number => Math.ceil(n / 32) * 32
const maxLen = (sim: Sim): number => sim.rows.reduce((m, r) => Math.max(m, r.len), 0)
const bufferOf = (sim: Sim): ArrayBufferLike => sim.kv.past()[0].data.buffer

describe('KvCache.append: where a step\'s new tokens land', () => {
  for (const layout of ['new', 'appended', 'in-place'] as const) {
    it(`${layout}: each row's counts[r] new tokens follow its length; rows with count 0 are untouched`, () => {
      const sim = newSim(shapeOf(layout))
      addRows(sim, 0, 1, 2)
      expect(sim.kv.cap).toBe(0)
      expectPast(sim)
      // A left-padded prefill chunk: row 0 fills it, row 1 has 2 pads, row 2 has nothing yet.
      step(sim, 4, [4, 2, 0])
      expect(sim.kv.cap).toBe(32)
      expectPast(sim)
      step(sim, 1, [1, 1, 1])
      expectPast(sim)
      step(sim, 3, [3, 0, 2])
      expect(sim.kv.lens).toEqual([8, 3, 3])
      expectPast(sim)
      step(sim, 1, [0, 1, 0])
      expect(sim.kv.lens).toEqual([8, 4, 3])
      expectPast(sim)
    })
  }

  it('in-place: reads row r\'s new tokens from slot lens[r], not from the end of the present', () => {
    const sim = newSim(shapeOf('in-place'))
    addRows(sim, 0, 1)
    step(sim, 5, [5, 1])
    // Right padding: row 1's single token sits at slot 1 of a present 32 + 2 slots long.
    step(sim, 2, [2, 1])
    expect(sim.kv.lens).toEqual([7, 2])
    expectPast(sim)
  })
})

describe('KvCache: the slot stride grows and shrinks without losing tokens', () => {
  /** Two rows decoding at different rates until row 0 holds `until` tokens; checks every step. */
  function decodeTo(sim: Sim, until: number, onStep?: (capChanged: boolean) => void): void {
    for (let i = 0; sim.rows[0].len < until; i++) {
      const cap = sim.kv.cap
      step(sim, 1, [1, i % 3 === 0 ? 1 : 0])
      expect(sim.kv.cap).toBe(roundUp32(maxLen(sim)))
      expectPast(sim)
      onStep?.(sim.kv.cap !== cap)
    }
  }

  for (const layout of ['new', 'appended', 'in-place'] as const) {
    it(`${layout}: without reserve(), the buffers are reallocated only when the stride grows`, () => {
      const sim = newSim(shapeOf(layout))
      addRows(sim, 0, 1)
      step(sim, 5, [5, 3])
      expect(sim.kv.cap).toBe(32)
      let grew = 0
      let buf = bufferOf(sim)
      decodeTo(sim, 70, (capChanged) => {
        const now = bufferOf(sim)
        expect(now !== buf).toBe(capChanged)
        if (capChanged) grew++
        buf = now
      })
      expect(sim.kv.cap).toBe(96)
      expect(grew).toBe(2)
    })
  }

  it('with reserve() first, the stride grows in place within one buffer', () => {
    const sim = newSim(shapeOf('new'))
    sim.kv.reserve(2, 100)
    addRows(sim, 0, 1)
    step(sim, 5, [5, 3])
    const buf = bufferOf(sim)
    // Sized for 2 rows of 128 slots, 2 tensors of float32.
    expect(sim.kv.bytes()).toBe(2 * 2 * 2 * 128 * 3 * 4)
    const caps = new Set<number>()
    decodeTo(sim, 100, () => {
      caps.add(sim.kv.cap)
      expect(bufferOf(sim)).toBe(buf)
    })
    expect([...caps]).toEqual([32, 64, 96, 128])
    expect(sim.kv.bytes()).toBe(2 * 2 * 2 * 128 * 3 * 4)
  })

  it('rows joining a few at a time: reserve() rounds rows up to a power of two within maxRows, so buffers are reallocated log2 times', () => {
    /** The buffers a cache goes through as rows join one at a time (a prefill of 5 tokens each) up to `total`. */
    const buffersOf = (total: number, maxRows: (rows: number) => number): number => {
      const sim = newSim(shapeOf('new'))
      const buffers = new Set<ArrayBufferLike>()
      let sid = 0
      while (sim.rows.length < total) {
        const before = sim.rows.length
        const n = 1
        sim.kv.reserve(before + n, 40, maxRows(before + n))
        addRows(sim, ...Array.from({ length: n }, () => sid++))
        step(sim, 5, sim.rows.map((_, r) => (r >= before ? 5 : 0)))
        buffers.add(bufferOf(sim))
        expectPast(sim)
      }
      return buffers.size
    }
    // Reserving exactly what joined takes three buffers to reach 8 rows; reserving ahead in powers of two, two.
    expect(buffersOf(8, (rows) => rows)).toBe(3)
    expect(buffersOf(8, () => 64)).toBe(2)
    // The caller's bound wins: 5 rows with room for 6 reserve 6, not 8.
    const bounded = newSim(shapeOf('new'))
    bounded.kv.reserve(5, 40, 6)
    addRows(bounded, 0)
    step(bounded, 2, [2])
    expect(bounded.kv.bytes()).toBe(2 * 6 * 2 * 64 * 3 * 4)
  })

  it('reserve() on a cache that already holds rows: grows once by reallocation, then in place', () => {
    const sim = newSim(shapeOf('appended'))
    addRows(sim, 0, 1)
    step(sim, 6, [6, 4])
    const small = bufferOf(sim)
    sim.kv.reserve(2, 100)
    expect(bufferOf(sim)).toBe(small)
    expectPast(sim)
    decodeTo(sim, 33)
    expect(sim.kv.cap).toBe(64)
    const big = bufferOf(sim)
    expect(big).not.toBe(small)
    decodeTo(sim, 90)
    expect(sim.kv.cap).toBe(96)
    expect(bufferOf(sim)).toBe(big)
  })

  for (const reserved of [false, true]) {
    const how = reserved ? 'in place (reserved)' : 'in place (not reserved)'
    it(`shrinks ${how} after the long row leaves, keeping the other rows and the buffers`, () => {
      const sim = newSim(shapeOf('new'))
      if (reserved) sim.kv.reserve(3, 100)
      addRows(sim, 0, 1, 2)
      step(sim, 20, [20, 5, 20])
      for (let i = 0; i < 50; i++) step(sim, 1, [1, 0, 0])
      expect(sim.kv.lens).toEqual([70, 5, 20])
      expect(sim.kv.cap).toBe(96)
      const before = bufferOf(sim)
      removeRow(sim, 0)
      expect(sim.kv.cap).toBe(32)
      expectPast(sim)
      // The buffers stay: their pages are mapped, and rows may grow again.
      expect(bufferOf(sim)).toBe(before)
      step(sim, 1, [1, 1])
      expectPast(sim)
    })

    it(`shrinks ${how} when the long row is the last one`, () => {
      const sim = newSim(shapeOf('in-place'))
      if (reserved) sim.kv.reserve(2, 100)
      addRows(sim, 0, 1)
      step(sim, 9, [9, 7])
      for (let i = 0; i < 60; i++) step(sim, 1, [0, 1])
      expect(sim.kv.cap).toBe(96)
      removeRow(sim, 1)
      expect(sim.kv.cap).toBe(32)
      expectPast(sim)
    })
  }

  it('keeps the stride while two thirds of it are not yet idle', () => {
    const sim = newSim(shapeOf('new'))
    addRows(sim, 0, 1)
    step(sim, 40, [40, 20])
    expect(sim.kv.cap).toBe(64)
    removeRow(sim, 0)
    // 20 tokens would fit in 32 slots, but only half of the 64 are idle: no shrink.
    expect(sim.kv.cap).toBe(64)
    expectPast(sim)
  })
})

describe('KvCache.removeRow', () => {
  it('moves the last row into the removed one, removes the last row, and frees everything on release() at zero rows', () => {
    const sim = newSim(shapeOf('new'))
    addRows(sim, 0, 1, 2)
    step(sim, 7, [4, 7, 2])
    step(sim, 1, [1, 1, 1])
    removeRow(sim, 0)
    expect(sim.rows.map((r) => r.sid)).toEqual([2, 1])
    expect(sim.kv.lens).toEqual([3, 8])
    expectPast(sim)
    removeRow(sim, 1)
    expect(sim.kv.lens).toEqual([3])
    expectPast(sim)
    step(sim, 1, [1])
    expectPast(sim)
    // Not while a row is left.
    sim.kv.release()
    expectPast(sim)
    removeRow(sim, 0)
    expect(sim.kv.rows).toBe(0)
    expect(sim.kv.cap).toBe(0)
    expectPast(sim)
    // An empty cache keeps its memory for the next rows until the batcher, idle, releases it.
    expect(sim.kv.bytes()).toBeGreaterThan(0)
    sim.kv.release()
    expect(sim.kv.bytes()).toBe(0)
    expectPast(sim)
    // The cache is usable again afterwards.
    addRows(sim, 3)
    step(sim, 2, [2])
    expectPast(sim)
  })
})

describe('KvCache.takeRow', () => {
  for (const reserved of [false, true]) {
    it(`copies a row of a cache with another stride as the new last row${reserved ? ' (reserved)' : ''}`, () => {
      const main = newSim(shapeOf('new'))
      if (reserved) main.kv.reserve(3, 100)
      addRows(main, 0)
      step(main, 5, [5])
      expect(main.kv.cap).toBe(32)

      const prefill = newSim(shapeOf('new'))
      prefill.kv.reserve(2, 40)
      addRows(prefill, 1, 2)
      step(prefill, 40, [40, 12])
      expect(prefill.kv.cap).toBe(64)

      takeRow(main, prefill, 0)
      expect(main.kv.cap).toBe(64)
      expectPast(main)
      takeRow(main, prefill, 1)
      expect(main.kv.lens).toEqual([5, 40, 12])
      expectPast(main)
      // The source is left as it was.
      expectPast(prefill)
      step(main, 1, [1, 1, 1])
      expectPast(main)

      // And into a cache whose stride is larger than the source's.
      const short = newSim(shapeOf('new'))
      addRows(short, 3)
      step(short, 4, [4])
      expect(short.kv.cap).toBe(32)
      takeRow(main, short, 0)
      expect(main.kv.lens).toEqual([6, 41, 13, 4])
      expectPast(main)
    })
  }
})

describe('KvCache.maskRow', () => {
  for (const layout of ['new', 'appended', 'in-place'] as const) {
    it(`${layout}: marks the cached tokens and the row's new tokens`, () => {
      const sim = newSim(shapeOf(layout))
      addRows(sim, 0, 1, 2)
      step(sim, 5, [3, 0, 5])
      const cap = sim.kv.cap
      expect(cap).toBe(32)
      const seq = 4
      const counts = [2, 0, 4]
      const width = cap + seq
      const mask = new Uint8Array(3 * width)
      counts.forEach((c, r) => sim.kv.maskRow(mask, r, seq, c))
      for (let r = 0; r < 3; r++) {
        const len = sim.kv.lens[r]
        const want = Array.from({ length: width }, (_, j) =>
          layout === 'in-place' ? Number(j < len + counts[r]) : Number(j < len || j >= width - counts[r]),
        )
        expect([...mask.subarray(r * width, (r + 1) * width)]).toEqual(want)
      }
    })
  }
})

describe('KvCache: stacked caches (outer 2)', () => {
  const stacked = shapeOf('appended', { outer: 2, tensors: 2 })

  it('past() is [2, rows, heads, cap, headDim] with the live rows packed', () => {
    const sim = newSim(stacked)
    addRows(sim, 0, 1, 2)
    step(sim, 5, [3, 5, 2])
    expectPast(sim)
    // Fewer rows than allocated: each half's live rows are packed.
    removeRow(sim, 0)
    expect(sim.kv.past()[0].dims).toEqual([2, 2, 2, 32, 3])
    expectPast(sim)
    step(sim, 1, [1, 1])
    expectPast(sim)
    // Growth past one chunk reallocates and keeps every token.
    for (let i = 0; i < 30; i++) step(sim, 1, [1, 0])
    expect(sim.kv.cap).toBe(64)
    expectPast(sim)
    removeRow(sim, 1)
    expectPast(sim)
  })

  it('reserve() allocates rows ahead; past() still returns only the live ones', () => {
    const sim = newSim(stacked)
    sim.kv.reserve(4, 10)
    addRows(sim, 0, 1)
    step(sim, 3, [3, 2])
    // 4 rows of 32 slots held per tensor, 2 rows shown.
    expect(sim.kv.bytes()).toBe(2 * (2 * 4 * 2 * 32 * 3 * 4))
    expectPast(sim)
    const other = newSim(stacked)
    addRows(other, 3)
    step(other, 4, [4])
    takeRow(sim, other, 0)
    expectPast(sim)
  })
})

describe('KvCache: float16 caches', () => {
  it('keeps the raw Uint16 values through steps, growth and row moves', () => {
    const sim = newSim(shapeOf('new', { dtype: 'float16' }))
    addRows(sim, 0, 1, 2)
    step(sim, 6, [6, 4, 1])
    expectPast(sim)
    for (let i = 0; i < 30; i++) step(sim, 1, [1, 1, 0])
    expect(sim.kv.cap).toBe(64)
    expectPast(sim)
    removeRow(sim, 0)
    expectPast(sim)
  })
})
