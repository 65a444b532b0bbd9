// What one forward step takes and gives, in either step runtime (session.ts's JS API, capi-session.ts's C API): the
// graph's signature as discovered at load, the KV tensors, a step's input and outputs, the rows of a cache. Plain
// types (and the rollback rule, an empty past), in their own module so that the session, its C-API runner, the step
// helpers and the scheduler share one definition without importing each other. Imports: nothing.

export type IntDtype = 'int64' | 'int32'
export type KvDtype = 'float32' | 'float16'
export type KvData = Float32Array | Uint16Array

/** One past/present tensor, viewed as [outer, batch, heads, seq, headDim]; outer is 2 for stacked (GPT-2) caches. */
export interface KvTensor {
  data: KvData
  /** The graph's own dims (4-D, or 5-D for stacked). */
  dims: number[]
}

/**
 * What a present output holds, and so where a step's new rows sit in it:
 * - `new`: only the new rows, [batch, heads, seq, headDim] (graphs rewritten by decoder-graph.ts); slot j.
 * - `appended`: concat(past, new); slot pastLen + j.
 * - `in-place`: GroupQueryAttention writes row r's new tokens right after its own length; slot len_r + j.
 */
export type PresentLayout = 'new' | 'appended' | 'in-place'

export interface Signature {
  ids: { name: string; dtype: IntDtype }
  mask: { name: string; dtype: IntDtype } | null
  positions: { name: string; dtype: IntDtype } | null
  kv: {
    layers: number
    /** True for legacy caches that stack key and value: past_<i> [2, batch, heads, past, headDim]. */
    stacked: boolean
    heads: number
    headDim: number
    dtype: KvDtype
    pastNames: string[]
    /** The graph outputs that carry each past input's present rows (same order as pastNames). */
    presentNames: string[]
    present: PresentLayout
  }
  /**
   * `at`: the input naming the positions whose logits the graph computes, the same for every row ([batch, n, vocab]
   * for n positions; decoder-graph.ts positionLogits); null: every position's ([batch, seq, vocab]).
   */
  logits: { name: string; dtype: KvDtype; vocab: number; at: string | null }
  /** The output holding each row's greedy next token (argmax of its logits) at each computed position, or null. */
  nextToken: string | null
  /**
   * GroupQueryAttention's lengths as inputs (decoder-graph.ts feedAttentionLengths): `seqlens` int32 [batch] (each
   * row's length - 1), `total` int32 scalar (the step's total sequence length); null when the graph computes them.
   */
  lengths: { seqlens: string; total: string } | null
}

/** A forward step over a batch: `rows` × `seq` new tokens, on top of `past` (seq length `pastLen`). */
export interface ForwardInput {
  rows: number
  seq: number
  pastLen: number
  /** [rows * seq] token ids (pad slots hold any valid id). */
  ids: Int32Array
  /** [rows * (pastLen + seq)] 1 for real slots, 0 for padding; may be empty when the graph takes no mask (signature.mask null) and `lengths` is given. */
  mask: Uint8Array
  /** [rows] each row's real tokens once this step's are in (cache length + its new tokens); else counted from `mask`. */
  lengths?: Int32Array
  /** [rows * seq] position of each new token in its own sequence. */
  positions: Int32Array
  past: KvTensor[]
  /** The cache the step runs over, when its runtime binds the cache itself (a device cache; `past` is then empty). */
  cache?: KvRows
  /**
   * The positions in [0, seq) whose logits the step computes, for every row, ascending, on graphs that take them
   * (signature.logits.at); absent: the last one. The session sets it from the step's picks.
   */
  logitsAt?: Int32Array
}

/**
 * Bytes copied into a step's inputs and out of its outputs. What ORT reads or writes in place does not count: on the
 * CPU the past, read over the cache's own memory by either runtime, and outputs written into an input's memory, such
 * as GroupQueryAttention's presents over the cache. On a GPU provider this is what crosses between host and device.
 */
export interface StepTraffic {
  in: number
  out: number
  /** The step ran as the session's captured graph (WebGPU graph capture, captured-step.ts). */
  replayed?: boolean
}

export interface ForwardOutput {
  /** Float32 logits of the requested (row, position) pairs, [picks.length * vocab]. */
  logits: Float32Array
  present: KvTensor[]
  traffic: StepTraffic
}

export interface GreedyOutput {
  /** Each row's argmax at each of the step's logits positions, [rows * positions] (one per row by default: its last). */
  tokens: Int32Array
  present: KvTensor[]
  traffic: StepTraffic
}

/**
 * The rows of a KV cache as the scheduler keeps them: each row one sequence, `lens[r]` its tokens in the cache. Two
 * kinds hold them: the host cache (scheduler/kv.ts KvCache: typed arrays a step reads in place and appends to) and
 * the device cache (model/device-kv.ts DeviceKv: tensors in GPU memory that a step writes in place and JS never
 * reads). The step runtime that made a cache is the one that runs steps over it.
 */
export interface KvRows {
  /** Each row's tokens in the cache. */
  readonly lens: number[]
  readonly rows: number
  /** Slots per row: the past length a step over this cache feeds. */
  readonly cap: number
  /** The cache's memory kept for its rows, in bytes. */
  bytes(): number
  /** Room for `rows` rows of `slots` tokens, and up to `maxRows` rows ahead. */
  reserve(rows: number, slots: number, maxRows?: number): void
  addRows(n: number): void
  /** Room for each row's next `counts[r]` tokens before a step writes them in place. */
  makeRoom(counts: readonly number[]): void
  maskRow(mask: Uint8Array, r: number, seq: number, count: number): void
  /** The step's past tensors, in host memory; empty for a device cache (its step runtime binds its own). */
  past(): KvTensor[]
  /** Row r gained `counts[r]` tokens in the step that returned `present`. */
  append(present: KvTensor[], counts: readonly number[]): void
  /**
   * Sets row r back to its first `len` tokens (a rollback): the tokens a step wrote after them, a draft's rejected
   * ones, are dropped, and the row's next step writes over them.
   */
  truncate(r: number, len: number): void
  /** Appends row `r` of `src` (a cache of the same kind) as a new last row. */
  takeRow(src: KvRows, r: number): void
  /** Removes row `r` by moving the last row into its place. */
  removeRow(r: number): void
  /** Lets go of every row (the cache is dropped). */
  clear(): void
  /** Gives the memory back once no row is left. */
  release(): void
}

/** A row's length after a rollback to `len` tokens, which must be within what it holds. */
export function truncatedLength(held: number, len: number): number {
  if (!Number.isInteger(len) || len < 0 || len > held) throw new RangeError(`cannot set a row of ${held} tokens back to ${len}`)
  return len
}

/** Past tensors of length 0 for `rows` rows: a step over no cache. */
export function emptyPast(kv: Signature['kv'], rows: number): KvTensor[] {
  const dims = kv.stacked ? [2, rows, kv.heads, 0, kv.headDim] : [rows, kv.heads, 0, kv.headDim]
  return kv.pastNames.map(() => ({ data: kv.dtype === 'float16' ? new Uint16Array(0) : new Float32Array(0), dims }))
}
