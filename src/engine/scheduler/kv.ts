// Batched KV-cache surgery for continuous batching: concatenating batches when sequences join and selecting rows
// when they leave (TGI's Batch.concatenate / Batch.filter). Steps in between reuse present -> past without a copy.
import type { KvData, KvTensor } from '../model/session.js'

export type Padding = 'left' | 'right'

/** A batch's cache: one tensor per past input, and each row's real length within the padded `pastLen` slots. */
export interface KvBatch {
  tensors: KvTensor[]
  lens: number[]
  pastLen: number
}

/** View of a cache tensor as [outer, batch, heads, seq, headDim]. */
function view(t: KvTensor): { O: number; B: number; H: number; P: number; D: number } {
  const d = t.dims
  return d.length === 5 ? { O: d[0], B: d[1], H: d[2], P: d[3], D: d[4] } : { O: 1, B: d[0], H: d[1], P: d[2], D: d[3] }
}

const alloc = (like: KvData, n: number): KvData => (like instanceof Uint16Array ? new Uint16Array(n) : new Float32Array(n))

/**
 * Builds one batch from rows of several: `picks` lists [batchIndex, row] in output order. The result is padded to
 * the longest picked row, so rows that left also give back their slots.
 */
export function gather(batches: KvBatch[], picks: Array<[number, number]>, padding: Padding): KvBatch {
  const lens = picks.map(([b, r]) => batches[b].lens[r])
  const pastLen = lens.reduce((m, l) => Math.max(m, l), 0)
  const nTensors = batches[0].tensors.length
  const tensors: KvTensor[] = []
  for (let t = 0; t < nTensors; t++) {
    const first = batches[0].tensors[t]
    const { O, H, D } = view(first)
    const rows = picks.length
    const data = alloc(first.data, O * rows * H * pastLen * D)
    for (let i = 0; i < rows; i++) {
      const [b, r] = picks[i]
      const src = batches[b].tensors[t]
      const sv = view(src)
      const len = lens[i]
      const srcStart = padding === 'left' ? sv.P - len : 0
      const dstStart = padding === 'left' ? pastLen - len : 0
      for (let o = 0; o < O; o++) {
        for (let h = 0; h < H; h++) {
          const s = (((o * sv.B + r) * H + h) * sv.P + srcStart) * D
          const d = (((o * rows + i) * H + h) * pastLen + dstStart) * D
          data.set(src.data.subarray(s, s + len * D), d)
        }
      }
    }
    const dims = first.dims.length === 5 ? [O, rows, H, pastLen, D] : [rows, H, pastLen, D]
    tensors.push({ data, dims })
  }
  return { tensors, lens, pastLen }
}

/** Bytes held by a batch's cache tensors. */
export const kvBytes = (b: KvBatch): number => b.tensors.reduce((s, t) => s + t.data.byteLength, 0)
