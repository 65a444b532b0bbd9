// A step runtime without ONNX Runtime, for the scheduler's tests: a stand-in for DecoderSession whose "model" is a
// function of each row's whole token history, read back from the cache the scheduler keeps. Its KV cache holds one
// value per token (the token id, as both "key" and "value"), laid out as the real graphs' caches ([rows, 1 head,
// slots, 1]), and a step returns the new rows as a plain-op graph does ('new' presents) and the logits of the picked
// positions, whose argmax is next(history). So a request's greedy tokens equal next() applied to its prompt and its
// own tokens exactly when the scheduler fed each row its right tokens at the right positions and kept (joined,
// chunked, moved, dropped) every row's cache intact, whatever the batch around it did.
import type { LoadedModel } from '../../src/engine/model/load.js'
import type { DecoderSession } from '../../src/engine/model/session.js'
import type { ForwardInput, ForwardOutput, GreedyOutput, KvTensor, Signature } from '../../src/engine/model/step-io.js'

export const FAKE_VOCAB = 97

/** A fake model: the next token after `history`. */
export type NextFn = (history: readonly number[]) => number

/** The default fake model: a hash of the whole history. */
export function next(history: readonly number[]): number {
  let h = history.length
  for (const t of history) h = (h * 31 + t + 7) % 1_000_003
  return 1 + (h % (FAKE_VOCAB - 1))
}

/** The greedy completion of `prompt`, `n` tokens, as the fake model gives it alone. */
export function expected(prompt: readonly number[], n: number, model: NextFn = next): number[] {
  const h = [...prompt]
  const out: number[] = []
  for (let i = 0; i < n; i++) {
    const t = model(h)
    out.push(t)
    h.push(t)
  }
  return out
}

const SIGNATURE: Signature = {
  ids: { name: 'input_ids', dtype: 'int64' },
  mask: { name: 'attention_mask', dtype: 'int64' },
  positions: { name: 'position_ids', dtype: 'int64' },
  kv: { layers: 1, stacked: false, heads: 1, headDim: 1, dtype: 'float32', pastNames: ['past.key', 'past.value'], presentNames: ['present.key', 'present.value'], present: 'new' },
  logits: { name: 'logits', dtype: 'float32', vocab: FAKE_VOCAB, at: null },
  nextToken: null,
  lengths: null,
}

/** What the fake runtime saw: every step's shape, and every (position, token) it was fed per row. */
export interface FakeLog {
  steps: Array<{ rows: number; seq: number }>
  /** Positions fed that disagree with a row's history length (must stay empty). */
  badPositions: string[]
}

export class FakeSession {
  readonly signature: Signature
  readonly provider = 'cpu'
  readonly runtime = 'js'
  readonly deviceResident = false
  chunkedPrefill = true
  gate = null
  readonly log: FakeLog = { steps: [], badPositions: [] }
  /** Steps from now on that fail as a device error would (ORT throws from the run). */
  failSteps = 0

  /** `greedy`: the graph has a next-token output and computes logits at the positions a step names. */
  constructor(
    private readonly model: NextFn = next,
    greedy = false,
  ) {
    this.signature = greedy ? { ...SIGNATURE, logits: { ...SIGNATURE.logits, at: 'onnxd_logits_at' }, nextToken: 'onnxd_next_token' } : SIGNATURE
  }

  get multiTokenRows(): number {
    return this.chunkedPrefill ? Infinity : 0
  }

  deviceKv(): null {
    return null
  }

  deviceCache(): null {
    return null
  }

  idle(): void {}

  async dispose(): Promise<void> {}

  async forwardGreedy(x: ForwardInput, positions?: readonly number[]): Promise<GreedyOutput> {
    if (!this.signature.nextToken) throw new Error('the fake graph has no next-token output')
    const at = positions?.length ? positions : [x.seq - 1]
    const picks = Array.from({ length: x.rows }, (_, r) => at.map((j) => r * x.seq + j)).flat()
    const { logits, present, traffic } = await this.forward(x, picks)
    const tokens = Int32Array.from(picks, (_, i) => logits.subarray(i * FAKE_VOCAB, (i + 1) * FAKE_VOCAB).indexOf(10))
    return { tokens, present, traffic }
  }

  async forward(x: ForwardInput, picks: number[]): Promise<ForwardOutput> {
    // A step yields, as ORT's async run does, so that requests can come in between steps.
    await new Promise((r) => setImmediate(r))
    if (this.failSteps > 0) {
      this.failSteps--
      throw new Error('forward step failed: device lost (injected)')
    }
    this.log.steps.push({ rows: x.rows, seq: x.seq })
    const P = x.pastLen
    const W = P + x.seq
    const past = x.past[0]
    const present = new Float32Array(x.rows * x.seq)
    const logits = new Float32Array(picks.length * FAKE_VOCAB)
    const histories: number[][] = []
    // Per row and new position: the history length once that position's token is in (-1 for a pad).
    const ats: number[][] = []
    for (let r = 0; r < x.rows; r++) {
      // The row's history: its cached tokens (mask 1 over the past), then the new ones (mask 1 over the last seq).
      const h: number[] = []
      for (let s = 0; s < P; s++) if (x.mask[r * W + s]) h.push(past.data[(r * P + s) * 1])
      const at: number[] = []
      for (let j = 0; j < x.seq; j++) {
        const id = x.ids[r * x.seq + j]
        present[r * x.seq + j] = id
        if (!x.mask[r * W + P + j]) {
          at.push(-1)
          continue
        }
        if (x.positions[r * x.seq + j] !== h.length) this.log.badPositions.push(`row ${r} fed position ${x.positions[r * x.seq + j]} after ${h.length} tokens`)
        h.push(id)
        at.push(h.length)
      }
      histories.push(h)
      ats.push(at)
    }
    picks.forEach((p, i) => {
      const r = Math.floor(p / x.seq)
      const j = p % x.seq
      const n = ats[r][j]
      const t = this.model(histories[r].slice(0, n < 0 ? histories[r].length : n))
      logits[i * FAKE_VOCAB + t] = 10
    })
    const dims = [x.rows, 1, x.seq, 1]
    const out: KvTensor[] = [
      { data: present, dims },
      { data: present, dims },
    ]
    return { logits, present: out, traffic: { in: 0, out: 0 } }
  }
}

/** A loaded model over the fake runtime: `next` its model, `greedy` whether its graph gives next tokens (FakeSession). */
export function fakeModel(opts: { next?: NextFn; greedy?: boolean } = {}): { model: LoadedModel; session: FakeSession } {
  const session = new FakeSession(opts.next, opts.greedy)
  const model = {
    id: 'fake',
    bundle: null,
    session: session as unknown as DecoderSession,
    tokenizer: null,
    vocab: FAKE_VOCAB,
    contextLength: 4096,
    eos: new Set<number>(),
    kvBytesPerToken: 8,
  } as unknown as LoadedModel
  return { model, session }
}
