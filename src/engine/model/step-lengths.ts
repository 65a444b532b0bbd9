// Each row's length in a step, as GroupQueryAttention's fed inputs take it (decoder-graph.ts feedAttentionLengths):
// one helper for both step runtimes (session.ts's JS path, capi-session.ts). Imports: engine model types only.
import type { ForwardInput } from './step-io.js'

/**
 * Each row's real tokens once this step's are in: `x.lengths` when the caller gave them (the batcher always does),
 * else the count of ones in the row's mask (GroupQueryAttention's right-padded rows: the same number).
 */
export function rowLengths(x: ForwardInput): Int32Array {
  if (x.lengths) return x.lengths
  const width = x.pastLen + x.seq
  const out = new Int32Array(x.rows)
  for (let r = 0; r < x.rows; r++) {
    let n = 0
    for (let k = r * width; k < (r + 1) * width; k++) n += x.mask[k]
    out[r] = n
  }
  return out
}

/** GroupQueryAttention's seqlens_k: each row's length - 1 (the index of its last real token), into `out`. */
export function seqlensK(lengths: Int32Array, out: Int32Array): Int32Array {
  for (let r = 0; r < lengths.length; r++) out[r] = lengths[r] - 1
  return out
}
