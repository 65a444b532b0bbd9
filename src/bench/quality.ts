// Quality of a bundle's quantized weight form against its float32 model (`onnxd model quality`): on the same
// prompts, the float32 model's greedy continuation is fed to both models (teacher forcing), and at each position
// that predicts a continuation token we count whether the quantized model's argmax is that token (greedy token
// agreement) and take KL(p_fp32 || p_quant) of the two next-token distributions. The math is pure functions over
// logits; measureQuality runs the engine's model loader. Imports: shared, engine (model loading, through its bench surface).
import { loadModel, type LoadedModel } from '../engine/bench-surface.js'
import type { Dtype } from '../shared/model.js'
import { Rng } from '../shared/prng.js'

/** log-softmax of `logits[off .. off + vocab)`, in float64. */
export function logSoftmax(logits: ArrayLike<number>, off: number, vocab: number): Float64Array {
  let max = -Infinity
  for (let i = 0; i < vocab; i++) max = Math.max(max, logits[off + i])
  let sum = 0
  for (let i = 0; i < vocab; i++) sum += Math.exp(logits[off + i] - max)
  const lse = max + Math.log(sum)
  const out = new Float64Array(vocab)
  for (let i = 0; i < vocab; i++) out[i] = logits[off + i] - lse
  return out
}

/** KL(P || Q) in nats, P and Q given as logits of one position each. */
export function klDivergence(p: ArrayLike<number>, q: ArrayLike<number>, vocab = p.length, pOff = 0, qOff = 0): number {
  const lp = logSoftmax(p, pOff, vocab)
  const lq = logSoftmax(q, qOff, vocab)
  let kl = 0
  for (let i = 0; i < vocab; i++) if (lp[i] > -Infinity) kl += Math.exp(lp[i]) * (lp[i] - lq[i])
  return Math.max(0, kl)
}

/** Index of the largest value (the first on ties, as the engine's greedy choice). */
export function argmax(logits: ArrayLike<number>, off = 0, vocab = logits.length - off): number {
  let best = 0
  for (let i = 1; i < vocab; i++) if (logits[off + i] > logits[off + best]) best = i
  return best
}

export interface Agreement {
  /** Positions compared. */
  positions: number
  /** Share of positions where the quantized model's argmax is the reference's greedy token. */
  agreement: number
  /** Mean KL(p_ref || p_test) in nats over those positions. */
  meanKl: number
}

/** Compares two [positions * vocab] logit arrays position by position. */
export function compareLogits(ref: ArrayLike<number>, test: ArrayLike<number>, vocab: number): Agreement {
  if (ref.length !== test.length || ref.length % vocab !== 0) throw new Error(`logits of ${ref.length} and ${test.length} values do not both hold whole rows of ${vocab}`)
  const positions = ref.length / vocab
  let agree = 0
  let kl = 0
  for (let i = 0; i < positions; i++) {
    if (argmax(test, i * vocab, vocab) === argmax(ref, i * vocab, vocab)) agree++
    kl += klDivergence(ref, test, vocab, i * vocab, i * vocab)
  }
  return { positions, agreement: positions ? agree / positions : 0, meanKl: positions ? kl / positions : 0 }
}

export interface QualityOptions {
  dtype: Dtype
  /** Prompts of seeded random token ids. Default 8. */
  prompts?: number
  /** Prompt length in tokens. Default 16. */
  promptTokens?: number
  /** Greedy continuation length the comparison runs over. Default 32. */
  tokens?: number
  seed?: number
  intraOpThreads?: number
  /** The --dtype file's 4-bit weights served as int8 (the node's --nbits-as-int8). */
  nbitsAsInt8?: boolean
}

export interface QualityReport extends Agreement {
  dir: string
  dtype: Dtype
  nbitsAsInt8: boolean
  prompts: number
  promptTokens: number
  tokens: number
}

/** Every position's logits of one sequence, from a fresh forward over all of it. */
async function allLogits(m: LoadedModel, ids: number[]): Promise<Float32Array> {
  const n = ids.length
  const out = await m.session.forward(
    { rows: 1, seq: n, pastLen: 0, ids: Int32Array.from(ids), mask: new Uint8Array(n).fill(1), positions: Int32Array.from(ids, (_, i) => i), past: m.session.emptyPast(1) },
    Array.from(ids, (_, i) => i),
  )
  return out.logits
}

export async function measureQuality(dir: string, opts: QualityOptions): Promise<QualityReport> {
  const prompts = opts.prompts ?? 8
  const promptTokens = opts.promptTokens ?? 16
  const tokens = opts.tokens ?? 32
  const common = { allLogits: true, ...(opts.intraOpThreads ? { intraOpThreads: opts.intraOpThreads } : {}) }
  const ref = await loadModel(dir, { ...common, dtype: 'fp32' })
  try {
    const test = await loadModel(dir, { ...common, dtype: opts.dtype, nbitsAsInt8: opts.nbitsAsInt8 })
    try {
      if (test.vocab !== ref.vocab) throw new Error(`${opts.dtype} model has ${test.vocab} logits, the fp32 one ${ref.vocab}`)
      const V = ref.vocab
      const rng = new Rng(opts.seed ?? 0, 'quality-prompts')
      let positions = 0
      let agreeSum = 0
      let klSum = 0
      for (let p = 0; p < prompts; p++) {
        const ids = Array.from({ length: promptTokens }, () => Math.floor(rng.next() * V))
        // The float32 model's greedy continuation (each step a full forward: short sequences, no cache to manage).
        for (let t = 0; t < tokens - 1; t++) {
          const logits = await allLogits(ref, ids)
          ids.push(argmax(logits, (ids.length - 1) * V, V))
        }
        // Teacher forcing: both models over prompt + continuation; positions promptTokens - 1 .. end predict it.
        const from = (promptTokens - 1) * V
        const a = (await allLogits(ref, ids)).subarray(from)
        const b = (await allLogits(test, ids)).subarray(from)
        const r = compareLogits(a, b, V)
        positions += r.positions
        agreeSum += r.agreement * r.positions
        klSum += r.meanKl * r.positions
      }
      return { dir, dtype: opts.dtype, nbitsAsInt8: opts.nbitsAsInt8 ?? false, prompts, promptTokens, tokens, positions, agreement: agreeSum / positions, meanKl: klSum / positions }
    } finally {
      await test.session.dispose()
    }
  } finally {
    await ref.session.dispose()
  }
}
