// The KV cache of a batch, kept by the engine rather than passed through the graph. Each row is one sequence; its
// tokens fill slots [0, len) of a buffer [rows, heads, cap, headDim] per past input (cap is shared, so shorter rows
// end in masked-out holes). A step reads the buffers in place as its past and fetches only the new rows
// (decoder-graph.ts), which append() copies into the slots after each row's length. Sequences join and leave by
// copying one row. The slot stride follows the longest row (moving rows in place); the buffers are reallocated
// only when the rows outgrow them, never shrink while the batcher is busy, and go back when it is idle.
import { truncatedLength, type KvData, type KvDtype, type KvRows, type KvTensor, type PresentLayout, type Signature } from '../model/step-io.js'

/**
 * Slots grow in chunks, so rows are re-laid out once every `chunk` decode steps at most. Plain attention reads every
 * slot, idle or not: a decode step of the 135m preset (builder v3) at batch 64 took 213 ms over a past of 192 and
 * 247 ms over 256 on a 2-core Xeon. A batch of staggered rows pays for its longest row, not its mean.
 * GroupQueryAttention reads each row's own length but pays for the gap after it (docs/benchmarks.md, "What it is").
 * Chunks of 16 gained nothing against 64 that held up: in a continuous batch the longest row sets the width anyway.
 */
export const KV_CHUNK = 64

export interface KvShape {
  /** Past inputs (2 per layer, or 1 for stacked caches). */
  tensors: number
  /** 2 for stacked (GPT-2 `past_<i>` [2, batch, heads, past, headDim]) caches, else 1. */
  outer: number
  heads: number
  headDim: number
  dtype: KvDtype
  present: PresentLayout
}

/** The cache shape of a decoder session's signature. */
export function kvShapeOf(kv: Signature['kv']): KvShape {
  return { tensors: kv.pastNames.length, outer: kv.stacked ? 2 : 1, heads: kv.heads, headDim: kv.headDim, dtype: kv.dtype, present: kv.present }
}

/** Where rows live: the buffers, and their row and slot strides. */
interface Layout {
  bufs: KvData[]
  rowsCap: number
  cap: number
}

const alloc = (dtype: KvDtype, n: number): KvData => (dtype === 'float16' ? new Uint16Array(n) : new Float32Array(n))

/**
 * Copies src[s, s + n) to dst[d, ...). A decode step appends one token per row and head (n = headDim, 64 floats for
 * 135m): at that size an element loop takes half the time of subarray() + set(), which makes a view object per call
 * (11,520 calls a step at batch 64 for 135m).
 */
function copy(dst: KvData, d: number, src: KvData, s: number, n: number): void {
  if (n > 256) dst.set(src.subarray(s, s + n), d)
  else for (let k = 0; k < n; k++) dst[d + k] = src[s + k]
}

export class KvCache implements KvRows {
  /** Each row's tokens in the cache. */
  readonly lens: number[] = []
  private bufs: KvData[] = []
  /** Rows per half of a stacked cache (the stride of its outer dimension); unused for unstacked caches. */
  private rowsCap = 0
  /** Slots per row: the past length every step over this cache feeds. */
  cap = 0
  private room = { rows: 0, slots: 0 }

  constructor(
    private readonly shape: KvShape,
    private readonly chunk = KV_CHUNK,
  ) {}

  private roundUp(n: number): number {
    return Math.ceil(n / this.chunk) * this.chunk
  }

  get rows(): number {
    return this.lens.length
  }

  bytes(): number {
    return this.bufs.reduce((s, b) => s + b.byteLength, 0)
  }

  /** The past tensors of all rows, [rows, heads, cap, headDim] (or stacked 5-D): views of the buffers when they can be. */
  past(): KvTensor[] {
    const { outer: O, heads: H, headDim: D, dtype } = this.shape
    const rows = this.rows
    const dims = O === 1 ? [rows, H, this.cap, D] : [O, rows, H, this.cap, D]
    const rowSize = H * this.cap * D
    if (this.bufs.length === 0) return Array.from({ length: this.shape.tensors }, () => ({ data: alloc(dtype, 0), dims }))
    return this.bufs.map((b) => {
      if (O === 1 || rows === this.rowsCap) return { data: b.subarray(0, O * rows * rowSize), dims }
      // Stacked caches put the batch second: pack the live rows of each half.
      const data = alloc(dtype, O * rows * rowSize)
      for (let o = 0; o < O; o++) data.set(b.subarray(o * this.rowsCap * rowSize, (o * this.rowsCap + rows) * rowSize), o * rows * rowSize)
      return { data, dims }
    })
  }

  /**
   * Writes row r of a step's attention mask ([rows, cap + seq]): the row's cached tokens, then its `count` real new
   * tokens, which are the step's last ones. GroupQueryAttention reads a row's length from the mask's sum and wants
   * it right-padded; other graphs see the holes between a row's cache and its new tokens as padding.
   */
  maskRow(mask: Uint8Array, r: number, seq: number, count: number): void {
    const width = this.cap + seq
    const at = r * width
    const len = this.lens[r]
    if (this.shape.present === 'in-place') mask.fill(1, at, at + len + count)
    else {
      mask.fill(1, at, at + len)
      mask.fill(1, at + width - count, at + width)
    }
  }

  /** Adds `n` empty rows at the end. */
  addRows(n: number): void {
    this.fit(this.rows + n, this.cap)
    for (let i = 0; i < n; i++) this.lens.push(0)
  }

  /**
   * Stores a step's new rows from its present outputs: row r gained `counts[r]` real tokens, the last counts[r] of
   * the step's positions (pads come first in a left-padded prefill chunk). GroupQueryAttention writes them right
   * after the row's length instead.
   */
  append(present: KvTensor[], counts: readonly number[]): void {
    const { outer: O, heads: H, headDim: D } = this.shape
    const rows = this.rows
    let need = 0
    for (let r = 0; r < rows; r++) need = Math.max(need, this.lens[r] + counts[r])
    this.fit(rows, need)
    const cap = this.cap
    present.forEach((t, i) => {
      const P = t.dims[t.dims.length - 2]
      const srcRows = t.dims[t.dims.length - 4]
      const dst = this.bufs[i]
      // Presents bound onto the past (capi-session.ts): the step wrote its rows into this buffer, where they belong.
      if (this.shape.present === 'in-place' && O === 1 && P === cap && t.data.buffer === dst.buffer && t.data.byteOffset === dst.byteOffset) return
      for (let r = 0; r < rows; r++) {
        const n = counts[r]
        if (!n) continue
        const from = this.shape.present === 'in-place' ? this.lens[r] : P - n
        for (let o = 0; o < O; o++) {
          for (let h = 0; h < H; h++) {
            const s = (((o * srcRows + r) * H + h) * P + from) * D
            const d = (((o * this.rowsCap + r) * H + h) * cap + this.lens[r]) * D
            copy(dst, d, t.data, s, n * D)
          }
        }
      }
    })
    for (let r = 0; r < rows; r++) this.lens[r] += counts[r]
  }

  /**
   * Before a step over a GroupQueryAttention cache ('in-place' presents): makes room for each row's next `counts[r]`
   * tokens, so that the step can write them into the cache itself (past and present one buffer, capi-session.ts)
   * instead of returning presents as long as the whole cache. Other layouts grow in append(), after the step.
   */
  makeRoom(counts: readonly number[]): void {
    if (this.shape.present !== 'in-place') return
    let need = 0
    for (let r = 0; r < this.rows; r++) need = Math.max(need, this.lens[r] + counts[r])
    if (need > this.cap) this.fit(this.rows, need)
  }

  /**
   * A copy of row `r`'s slots [from, from + n) in one buffer, laid out [tensor, outer, heads, n, headDim]: written
   * into `into` (a buffer of that size, as an earlier call returned it), or else into a new one. One buffer per block
   * rather than one per past tensor: a block of 135m is 60 tensors, and 60 small buffers a block made the prefix
   * cache's inserts dearer (docs/benchmarks.md, "Between the steps at 64 streams").
   */
  readSlots(r: number, from: number, n: number, into?: KvData): KvData {
    const { outer: O, heads: H, headDim: D, dtype } = this.shape
    const size = O * H * n * D
    const block = into ?? alloc(dtype, size * this.bufs.length)
    if (into && into.length !== size * this.bufs.length) throw new Error('readSlots: a buffer of another shape')
    this.bufs.forEach((src, i) => {
      for (let o = 0; o < O; o++) {
        for (let h = 0; h < H; h++) {
          const s = (((o * this.rowsCap + r) * H + h) * this.cap + from) * D
          block.set(src.subarray(s, s + n * D), i * size + (o * H + h) * n * D)
        }
      }
    })
    return block
  }

  /**
   * Fills the empty row `r` with a cached prefix: `blocks` of `blockLen` slots each, laid out as readSlots() gives
   * them. The row then holds blocks.length * blockLen tokens.
   */
  loadPrefix(r: number, blocks: readonly KvData[], blockLen: number): void {
    if (this.lens[r] !== 0) throw new Error(`row ${r} is not empty`)
    const { outer: O, heads: H, headDim: D } = this.shape
    const len = blocks.length * blockLen
    this.fit(this.rows, Math.max(this.maxLen(), len))
    const n = blockLen * D
    const size = O * H * n
    blocks.forEach((block, k) => {
      this.bufs.forEach((dst, i) => {
        for (let o = 0; o < O; o++) {
          for (let h = 0; h < H; h++) {
            const d = (((o * this.rowsCap + r) * H + h) * this.cap + k * blockLen) * D
            const s = i * size + (o * H + h) * n
            dst.set(block.subarray(s, s + n), d)
          }
        }
      })
    })
    this.lens[r] = len
  }

  truncate(r: number, len: number): void {
    this.lens[r] = truncatedLength(this.lens[r], len)
  }

  /** Appends row `r` of `src` as a new last row. */
  takeRow(from: KvRows, r: number): void {
    if (!(from instanceof KvCache)) throw new Error('a host cache takes rows from host caches only')
    const src = from
    const len = src.lens[r]
    this.fit(this.rows + 1, Math.max(this.maxLen(), len))
    this.lens.push(len)
    this.copyRow({ bufs: src.bufs, rowsCap: src.rowsCap, cap: src.cap }, r, len, this.rows - 1)
  }

  /** Removes row `r` by moving the last row into its place (the caller mirrors that move). */
  removeRow(r: number): void {
    const last = this.rows - 1
    if (r !== last) {
      this.copyRow({ bufs: this.bufs, rowsCap: this.rowsCap, cap: this.cap }, last, this.lens[last], r)
      this.lens[r] = this.lens[last]
    }
    this.lens.pop()
    this.fit(this.rows, this.maxLen())
  }

  private maxLen(): number {
    return this.lens.reduce((m, l) => Math.max(m, l), 0)
  }

  private copyRow(src: Layout, from: number, len: number, to: number): void {
    const { outer: O, heads: H, headDim: D } = this.shape
    const n = len * D
    if (n === 0) return
    this.bufs.forEach((dst, i) => {
      for (let o = 0; o < O; o++) {
        for (let h = 0; h < H; h++) {
          const s = (((o * src.rowsCap + from) * H + h) * src.cap) * D
          const d = (((o * this.rowsCap + to) * H + h) * this.cap) * D
          dst.set(src.bufs[i].subarray(s, s + n), d)
        }
      }
    })
  }

  /** Drops every row (the memory goes with the object, or with release()). */
  clear(): void {
    this.lens.length = 0
  }

  /** Gives the buffers back once no row is left (the batcher calls it when idle). */
  release(): void {
    if (this.rows) return
    this.bufs = []
    this.rowsCap = 0
    this.cap = 0
  }

  /**
   * Sizes the buffers for `rows` rows of up to `slots` tokens each (the batcher's worst case for what it admitted),
   * so that rows growing up to it are re-laid out in place rather than reallocated. Never shrinks them. Rows are
   * reserved in powers of two, up to `maxRows` (what the caller's budget holds): a batch filling up a few rows at a
   * time then reallocates, and copies its rows into fresh pages, log2(rows) times instead of at every addition.
   * Measured on 135m at 64 streams (prompt 128, groups of 4): 31 ms per step outside the forward passes before this
   * rule, most of it those copies and their page faults; 19 ms after.
   */
  reserve(rows: number, slots: number, maxRows = rows): void {
    rows = Math.max(rows, Math.min(maxRows, 2 ** Math.ceil(Math.log2(Math.max(1, rows)))))
    this.room = { rows, slots: this.roundUp(slots) }
    this.fit(this.rows, this.maxLen())
  }

  /**
   * Makes room for `rows` rows of `slots` slots. The slot stride grows by `chunk` and shrinks when two thirds of it
   * are idle. Within the buffers (sized by reserve()) a new stride moves rows in place; otherwise they are
   * reallocated at the reserved size. Stacked caches always reallocate.
   */
  private fit(rows: number, slots: number): void {
    const { outer: O, heads: H, headDim: D, dtype } = this.shape
    const cap = slots > this.cap || this.roundUp(slots) * 3 <= this.cap ? this.roundUp(slots) : this.cap
    const held = this.bufs.length ? this.bufs[0].length : 0
    const need = O * rows * H * cap * D
    const want = Math.max(need, O * this.room.rows * H * this.room.slots * D)
    // Buffers are kept while they hold what is needed, even when rows have left: their pages are mapped already,
    // and the next rows would grow them again. They go back with release() when the batcher is idle.
    if (O === 1 && need <= held) {
      if (cap !== this.cap) this.relayout(cap)
      return
    }
    if (O > 1 && rows <= this.rowsCap && cap === this.cap) return
    const old: Layout = { bufs: this.bufs, rowsCap: this.rowsCap, cap: this.cap }
    this.rowsCap = O === 1 ? rows : Math.max(rows, this.room.rows)
    this.cap = cap
    this.bufs = Array.from({ length: this.shape.tensors }, () => alloc(dtype, O === 1 ? want : O * this.rowsCap * H * cap * D))
    if (old.bufs.length === 0) return
    for (let r = 0; r < Math.min(this.rows, rows); r++) this.copyRow(old, r, this.lens[r], r)
  }

  /** Changes the slot stride of an unstacked cache in place: from the last row down when it grows, else up. */
  private relayout(cap: number): void {
    const { heads: H, headDim: D } = this.shape
    const old = this.cap
    const blocks = this.rows * H
    for (const b of this.bufs) {
      for (let i = 0; i < blocks; i++) {
        const k = cap > old ? blocks - 1 - i : i
        const len = this.lens[Math.floor(k / H)] * D
        b.copyWithin(k * cap * D, k * old * D, k * old * D + len)
      }
    }
    this.cap = cap
  }
}
