// One forward step planned from each row's new tokens: what the step runtime is fed (ForwardInput), where each row's
// tokens sit in it, and how many the cache keeps. A row may carry any number of tokens, none included (a row that
// sits the step out): prefill chunks, one token per row in a decode step, or a token and its draft to verify.
//
// Rows are padded to the step's width, on the side the cache's layout wants. GroupQueryAttention ('in-place') writes
// row r's tokens right after its length and reads that length from the fed lengths, so its rows are right-padded:
// every row is fed `seq` tokens at positions len_r + j, the pads are written after the real ones (which never see
// them: attention is causal), and the cache keeps only the real ones; the next step writes over the pads. The other
// layouts keep what append() copies from the step's last `count` columns, so their rows are left-padded and the pads
// masked out. Imports: the step's types only.
import { emptyPast, type ForwardInput, type KvRows, type Signature } from '../model/step-io.js'

/** The mask of a step whose graph reads none (signature.mask null): the rows' lengths say it all. */
const NO_MASK = new Uint8Array(0)

export interface PlannedStep {
  x: ForwardInput
  /** Row r's real new tokens: what the cache keeps of the step (KvRows.append). */
  counts: number[]
  /** The column of row r's first new token ([0, seq)): its k-th is at first[r] + k, whose logits are x's pick r * seq + first[r] + k. */
  first: number[]
}

/**
 * Plans a step over `kv` that feeds row r the tokens `tokens[r]` at the positions after its length, and makes room
 * in the cache for what the step writes. `pad` is the id fed in padding slots (any valid id).
 *
 * `fresh`: every row is empty and `kv` is a host cache, and the step runs over no past at all (GroupQueryAttention's
 * first prompt: the one step where it takes several tokens per row at batch > 1, since it refuses them over a past
 * there). Right-padded rows then say their lengths through the fed lengths (or the mask), and append() copies each
 * row's tokens from the presents.
 */
export function planStep(kv: KvRows, sig: Signature, tokens: readonly ArrayLike<number>[], opts: { pad?: number; fresh?: boolean } = {}): PlannedStep {
  const rows = tokens.length
  const counts = tokens.map((t) => t.length)
  const seq = Math.max(1, ...counts)
  const inPlace = sig.kv.present === 'in-place'
  const fresh = opts.fresh === true
  if (fresh && kv.lens.some((l) => l > 0)) throw new Error('a step over no past needs rows with nothing in the cache')
  // In place, every row's `seq` slots after its length are written, its pads included.
  if (!fresh) kv.makeRoom(inPlace ? counts.map(() => seq) : counts)
  const P = fresh ? 0 : kv.cap
  const masked = sig.mask !== null
  const x: ForwardInput = {
    rows,
    seq,
    pastLen: P,
    ids: new Int32Array(rows * seq).fill(opts.pad ?? 0),
    mask: masked ? new Uint8Array(rows * (P + seq)) : NO_MASK,
    lengths: new Int32Array(rows),
    positions: new Int32Array(rows * seq),
    past: fresh ? emptyPast(sig.kv, rows) : kv.past(),
    cache: kv,
  }
  const first = counts.map((n) => (inPlace ? 0 : seq - n))
  for (let r = 0; r < rows; r++) {
    const len = kv.lens[r]
    const n = counts[r]
    const at = r * seq + first[r]
    for (let k = 0; k < n; k++) x.ids[at + k] = tokens[r][k]
    // Pads before a left-padded row's tokens sit at its length (they are masked out); after a right-padded row's,
    // they go on counting.
    for (let j = 0; j < seq; j++) x.positions[r * seq + j] = len + Math.max(0, j - first[r])
    if (fresh) {
      // Over no past each row is just its tokens (right-padded in place, else left-padded).
      x.lengths![r] = n
      if (masked) x.mask.fill(1, r * seq + first[r], r * seq + first[r] + n)
      continue
    }
    const fed = inPlace ? seq : n
    x.lengths![r] = len + fed
    if (masked) kv.maskRow(x.mask, r, seq, fed)
  }
  return { x, counts, first }
}

