import { describe, expect, it } from 'vitest'
import { isOnnxdError } from '../../../src/shared/errors.js'
import { DEFAULT_SAMPLING, type SamplingParams } from '../../../src/shared/sampling.js'
import { Rng } from '../../../src/shared/prng.js'
import { Sampler, SamplerScratch, TokenHistory, applyPenalties, argmax } from '../../../src/engine/generation/sampling.js'

/** Defaults overridden by `p`, unvalidated. */
const samplingParams = (p: Partial<SamplingParams> = {}): SamplingParams => ({ ...DEFAULT_SAMPLING, ...p })

/** Logits whose softmax is exactly `probs` (up to f32 rounding). */
function logitsOf(probs: number[]): Float32Array {
  return Float32Array.from(probs, (p) => (p > 0 ? Math.log(p) : -Infinity))
}

function randomLogits(rng: Rng, n: number, scale = 4): Float32Array {
  return Float32Array.from({ length: n }, () => (rng.next() - 0.5) * 2 * scale)
}

/** One token from a copy of `logits`, which stays as it was (the engine samples its batch rows in place). */
const sample = (s: Sampler, logits: Float32Array, h: TokenHistory): number => s.sampleInPlace(logits.slice(), h)

/** Draw `n` tokens from the same row, each step with an empty history. */
function histogram(params: Partial<SamplingParams>, logits: Float32Array, n: number, seed = 1): number[] {
  const s = new Sampler(samplingParams({ seed, ...params }), logits.length)
  const h = new TokenHistory()
  const counts = new Array<number>(logits.length).fill(0)
  for (let i = 0; i < n; i++) counts[sample(s, logits, h)]!++
  return counts
}

const drawn = (counts: number[]): number[] => counts.flatMap((c, i) => (c > 0 ? [i] : []))

describe('argmax', () => {
  it('takes the lowest id on ties and ignores NaN', () => {
    expect(argmax(Float32Array.from([1, 3, 3, 2]))).toBe(1)
    expect(argmax(Float32Array.from([Number.NaN, -1, Number.NaN, 0]))).toBe(3)
    expect(argmax(Float32Array.from([-Infinity, -Infinity]))).toBe(-1)
  })

  it('agrees with a one-pass scan on every length and lane: tails, ties across lanes, +Infinity, empty', () => {
    const scan = (row: Float32Array): number => {
      let best = -1
      for (let i = 0; i < row.length; i++) if (row[i] > (best < 0 ? -Infinity : row[best])) best = i
      return best
    }
    const rng = new Rng(11)
    for (let n = 0; n <= 23; n++) {
      for (let trial = 0; trial < 20; trial++) {
        // Few distinct values, so ties across lanes are common.
        const row = Float32Array.from({ length: n }, () => Math.floor(rng.next() * 4) - 2)
        if (trial % 5 === 1 && n) row[Math.floor(rng.next() * n)] = Infinity
        if (trial % 5 === 2 && n) row[n - 1] = 9
        if (trial % 5 === 3) row.fill(Number.NaN)
        expect(argmax(row)).toBe(scan(row))
      }
    }
    expect(argmax(new Float32Array(0))).toBe(-1)
    expect(argmax(Float32Array.from([0, 5, 1, 2, 3, 5, 5]))).toBe(1)
    expect(argmax(Float32Array.from([0, 1, 2, 3, 4, 5, 6, 7, 8]))).toBe(8)
  })
})

describe('Sampler: greedy', () => {
  it('temperature 0 is greedy argmax, lowest id on ties', () => {
    const rng = new Rng(7)
    const s = new Sampler(samplingParams({ temperature: 0, seed: 3 }), 1000)
    for (let t = 0; t < 50; t++) {
      const row = randomLogits(rng, 1000)
      expect(sample(s, row, new TokenHistory())).toBe(argmax(row))
    }
    const tied = new Float32Array(1000).fill(-1)
    tied[500] = 2
    tied[17] = 2
    expect(sample(s, tied, new TokenHistory())).toBe(17)
  })

  it('top_k = 1 equals greedy at any temperature and seed', () => {
    const rng = new Rng(8)
    for (let t = 0; t < 50; t++) {
      const row = randomLogits(rng, 3000)
      // Two near-equal maxima make a difference between "top-1" and "anything close" visible.
      row[2999] = row[argmax(row)]!
      const s = new Sampler(samplingParams({ top_k: 1, temperature: 2, seed: t }), 3000)
      expect(sample(s, row, new TokenHistory())).toBe(argmax(row))
    }
  })

  it('temperatures below SAMPLING_EPS are greedy', () => {
    const row = logitsOf([0.3, 0.4, 0.3])
    expect(drawn(histogram({ temperature: 1e-7 }, row, 200))).toEqual([1])
  })
})

describe('Sampler: seeds', () => {
  const row = logitsOf(Array.from({ length: 100 }, () => 0.01))
  const run = (seed: number, params: Partial<SamplingParams> = {}): number[] => {
    const s = new Sampler(samplingParams({ seed, ...params }), 100)
    const h = new TokenHistory()
    return Array.from({ length: 200 }, () => {
      const id = sample(s, row, h)
      h.push(id)
      return id
    })
  }

  it('the same seed gives the same token sequence', () => {
    expect(run(42)).toEqual(run(42))
    expect(run(42, { top_k: 20, top_p: 0.5 })).toEqual(run(42, { top_k: 20, top_p: 0.5 }))
    expect(run(42, { top_p: 0.9 })).toEqual(run(42, { top_p: 0.9 }))
  })

  it('different seeds give different sequences', () => {
    const runs = [1, 2, 3, 4, 5].map((seed) => run(seed).join(','))
    expect(new Set(runs).size).toBe(5)
  })

  it('reports the seed, drawing one when the request has none', () => {
    expect(new Sampler(samplingParams({ seed: 9 }), 10).seed).toBe(9)
    const a = new Sampler(samplingParams(), 10)
    const b = new Sampler(samplingParams(), 10)
    expect(Number.isSafeInteger(a.seed)).toBe(true)
    expect(a.seed).not.toBe(b.seed)
  })
})

describe('Sampler: distribution', () => {
  it('samples the softmax of the logits when no filter is on', () => {
    const probs = [0.5, 0.25, 0.125, 0.0625, 0.0625]
    const n = 40_000
    const counts = histogram({}, logitsOf(probs), n)
    // 5 standard deviations of a binomial count.
    probs.forEach((p, i) => expect(Math.abs(counts[i]! - n * p)).toBeLessThan(5 * Math.sqrt(n * p * (1 - p))))
  })

  it('a lower temperature sharpens the distribution, a higher one flattens it', () => {
    const row = logitsOf([0.6, 0.3, 0.1])
    const n = 20_000
    const share = (t: number): number => histogram({ temperature: t }, row, n)[0]! / n
    const [cold, normal, hot] = [share(0.5), share(1), share(2)]
    // p^(1/T) renormalised: T=0.5 → 0.36/0.46, T=1 → 0.6, T=2 → 0.775/1.6.
    expect(cold).toBeCloseTo(0.36 / 0.46, 1)
    expect(normal).toBeCloseTo(0.6, 1)
    expect(hot).toBeCloseTo(Math.sqrt(0.6) / (Math.sqrt(0.6) + Math.sqrt(0.3) + Math.sqrt(0.1)), 1)
    expect(cold).toBeGreaterThan(normal + 0.1)
    expect(normal).toBeGreaterThan(hot + 0.1)
  })

  it('top_k keeps only the k most likely tokens', () => {
    const probs = [0.05, 0.3, 0.1, 0.25, 0.2, 0.1]
    expect(drawn(histogram({ top_k: 3 }, logitsOf(probs), 5000))).toEqual([1, 3, 4])
  })

  it('top_p keeps the smallest nucleus whose mass reaches top_p, and never draws outside it', () => {
    // Sorted: 0.4 (id 3), 0.3 (id 0), 0.2 (id 4), 0.06 (id 1), 0.04 (id 2). Mass 0.7 < 0.85 <= 0.9.
    const row = logitsOf([0.3, 0.06, 0.04, 0.4, 0.2])
    const n = 20_000
    const counts = histogram({ top_p: 0.85 }, row, n)
    expect(drawn(counts)).toEqual([0, 3, 4])
    // Inside the nucleus the probabilities are renormalised: 0.4/0.9, 0.3/0.9, 0.2/0.9.
    expect(counts[3]! / n).toBeCloseTo(0.4 / 0.9, 1)
    expect(counts[4]! / n).toBeCloseTo(0.2 / 0.9, 1)
    // Just under a cumulative boundary the next token is needed; just at one it is not.
    expect(drawn(histogram({ top_p: 0.69 }, row, 5000))).toEqual([0, 3])
    expect(drawn(histogram({ top_p: 0.3 }, row, 2000))).toEqual([3])
  })

  it('top_p always keeps at least the most likely token', () => {
    expect(drawn(histogram({ top_p: 1e-9 }, logitsOf([0.2, 0.5, 0.3]), 1000))).toEqual([1])
  })

  it('top_p finds a large nucleus in a flat vocabulary, ties keeping the lower ids', () => {
    // 2000 equal logits, top_p 0.5: exactly 1000 tokens, the lowest ids.
    const counts = histogram({ top_p: 0.5 }, new Float32Array(2000), 5000)
    const ids = drawn(counts)
    expect(Math.max(...ids)).toBe(999)
    expect(ids.length).toBeGreaterThan(900)
  })

  it('top_p and min_p cut inside a group of nearly equal logits', () => {
    // Four logits within 0.03 of each other (one bucket of the sampler), each about 1/4 of the mass.
    const row = Float32Array.from([0, -0.01, -0.02, -0.03, -5])
    expect(drawn(histogram({ top_p: 0.6 }, row, 4000))).toEqual([0, 1, 2])
    expect(drawn(histogram({ min_p: Math.exp(-0.015) }, row, 4000))).toEqual([0, 1])
    expect(drawn(histogram({ min_p: 1 }, row, 1000))).toEqual([0])
  })

  it('top_p is measured over the top_k set, renormalised (vLLM order)', () => {
    // top_k 3 keeps 0.4, 0.3, 0.2 (mass 0.9). Renormalised: 0.444, 0.333, 0.222. top_p 0.7 needs the first two
    // (0.777); over the whole vocabulary it would also need just two (0.7), so use 0.75 to tell them apart:
    // whole-vocab nucleus is three tokens (0.7 < 0.75), top_k-renormalised nucleus is two (0.777 >= 0.75).
    const row = logitsOf([0.3, 0.06, 0.04, 0.4, 0.2])
    expect(drawn(histogram({ top_k: 3, top_p: 0.75 }, row, 5000))).toEqual([0, 3])
    expect(drawn(histogram({ top_p: 0.75 }, row, 5000))).toEqual([0, 3, 4])
  })

  it('min_p drops tokens below min_p times the top probability', () => {
    // Top 0.5; min_p 0.15 → threshold 0.075: drops 0.06 and 0.04.
    const row = logitsOf([0.5, 0.3, 0.1, 0.06, 0.04])
    expect(drawn(histogram({ min_p: 0.15 }, row, 10_000))).toEqual([0, 1, 2])
    expect(drawn(histogram({ min_p: 0.15, top_k: 4 }, row, 10_000))).toEqual([0, 1, 2])
    expect(drawn(histogram({ min_p: 0.15, top_p: 0.99 }, row, 10_000))).toEqual([0, 1, 2])
    // min_p is relative to the top probability after temperature: at T=2 the probabilities flatten (sqrt), so
    // 0.06 → sqrt(0.06/0.5)=0.35 of the top passes a 0.3 threshold while 0.04 (0.28) does not.
    expect(drawn(histogram({ min_p: 0.3, temperature: 2 }, row, 10_000))).toEqual([0, 1, 2, 3])
  })

  it('draws a tail token at its probability, and spreads the rest over a large vocabulary', () => {
    // 0.9 on id 0, 1e-3 on id 1, the remaining 0.099 over 9998 tokens (gaps of 0, 6.8 and 11.5 nats).
    const probs = new Array<number>(10_000).fill(0.099 / 9998)
    probs[0] = 0.9
    probs[1] = 1e-3
    const n = 20_000
    const counts = histogram({}, logitsOf(probs), n)
    expect(Math.abs(counts[0]! - 0.9 * n)).toBeLessThan(5 * Math.sqrt(n * 0.9 * 0.1))
    expect(counts[1]).toBeGreaterThan(5)
    expect(counts[1]).toBeLessThan(45)
    expect(drawn(counts).length).toBeGreaterThan(1500)
  })

  it('matches the softmax over logits spread across many gaps, at several temperatures', () => {
    const row = Float32Array.from([2, 1.97, 1.5, 1, 0, -1, -2.5, -4, -40])
    for (const t of [0.5, 1, 1.7]) {
      const w = Array.from(row, (l) => Math.exp((l - 2) / t))
      const z = w.reduce((a, b) => a + b)
      const n = 30_000
      const counts = histogram({ temperature: t }, row, n, 5)
      w.forEach((wi, i) => {
        const p = wi / z
        expect(Math.abs(counts[i]! - n * p), `T=${t} id ${i}`).toBeLessThan(5 * Math.sqrt(n * p * (1 - p)) + 1)
      })
    }
  })
})

/** vLLM's pipeline done the slow, obvious way: full sort, softmax, cut, renormalise. */
function referenceDistribution(row: Float32Array, p: SamplingParams): Map<number, number> {
  const order = [...row.keys()].sort((a, b) => row[b]! - row[a]! || a - b)
  const max = row[order[0]!]!
  let kept = p.top_k > 0 ? order.slice(0, p.top_k) : order
  const w = (i: number): number => Math.exp((row[i]! - max) / p.temperature)
  const z = kept.reduce((a, i) => a + w(i), 0)
  let cum = 0
  const nucleus: number[] = []
  for (const i of kept) {
    nucleus.push(i)
    cum += w(i)
    if (cum >= p.top_p * z) break
  }
  kept = nucleus.filter((i) => w(i) >= p.min_p)
  const zk = kept.reduce((a, i) => a + w(i), 0)
  return new Map(kept.map((i) => [i, w(i) / zk]))
}

describe('Sampler: against a brute-force reference', () => {
  it('draws only from the reference set, at the reference rates', () => {
    const rng = new Rng(77)
    const configs: Partial<SamplingParams>[] = [
      { top_p: 0.9 },
      { top_p: 0.5, temperature: 0.6 },
      { top_p: 0.97, temperature: 1.5 },
      { min_p: 0.05 },
      { min_p: 0.2, temperature: 1.8 },
      { top_p: 0.8, min_p: 0.1 },
      { top_k: 40, top_p: 0.9 },
      { top_k: 10, min_p: 0.3, temperature: 0.8 },
      { temperature: 0.3 },
    ]
    for (const [c, cfg] of configs.entries()) {
      const row = randomLogits(rng, 300, 3)
      const params = samplingParams({ seed: c, ...cfg })
      const ref = referenceDistribution(row, params)
      const n = 4000
      const counts = histogram(params, row, n, c)
      for (const id of drawn(counts)) expect(ref.has(id), `${JSON.stringify(cfg)}: id ${id} outside`).toBe(true)
      for (const [id, prob] of ref) {
        const sd = Math.sqrt(n * prob * (1 - prob))
        expect(Math.abs(counts[id]! - n * prob), `${JSON.stringify(cfg)}: id ${id}`).toBeLessThan(5 * sd + 2)
      }
    }
  })
})

describe('penalties', () => {
  const params = (p: Partial<SamplingParams>): SamplingParams => samplingParams(p)

  it('repetition penalty divides positive and multiplies negative logits of prompt and output tokens', () => {
    const row = Float32Array.from([4, -1, 3, -2, 5])
    const h = new TokenHistory([0, 1, 0]) // prompt: ids 0 and 1
    h.push(3) // output: id 3
    applyPenalties(row, params({ repetition_penalty: 2 }), h)
    expect([...row]).toEqual([2, -2, 3, -4, 5])
  })

  it('presence and frequency penalties subtract presence + frequency·count over output tokens only', () => {
    const row = Float32Array.from([1, 1, 1, 1])
    const h = new TokenHistory([0]) // id 0 only in the prompt: untouched
    for (const id of [1, 2, 2, 2]) h.push(id)
    applyPenalties(row, params({ presence_penalty: 0.5, frequency_penalty: 0.25 }), h)
    expect([...row]).toEqual([1, 1 - 0.5 - 0.25, 1 - 0.5 - 0.75, 1])
  })

  it('negative presence/frequency penalties raise the logits', () => {
    const row = Float32Array.from([0, 0])
    const h = new TokenHistory()
    h.push(1)
    h.push(1)
    applyPenalties(row, params({ presence_penalty: -1, frequency_penalty: -0.5 }), h)
    expect([...row]).toEqual([0, 2])
  })

  it('applies repetition first, then presence and frequency', () => {
    const row = Float32Array.from([4])
    const h = new TokenHistory()
    h.push(0)
    applyPenalties(row, params({ repetition_penalty: 2, presence_penalty: 1, frequency_penalty: 1 }), h)
    expect(row[0]).toBe(4 / 2 - 1 - 1)
  })

  it('change what greedy decoding picks', () => {
    const row = Float32Array.from([2, 1.5, 0])
    const h = new TokenHistory()
    h.push(0)
    expect(sample(new Sampler(params({ temperature: 0 }), 3), row, h)).toBe(0)
    expect(sample(new Sampler(params({ temperature: 0, repetition_penalty: 1.5 }), 3), row, h)).toBe(1)
    expect(sample(new Sampler(params({ temperature: 0, presence_penalty: 0.6 }), 3), row, h)).toBe(1)
  })

  it('ignore ids outside the vocabulary', () => {
    const row = Float32Array.from([1, 1])
    const h = new TokenHistory([5])
    h.push(7)
    applyPenalties(row, params({ repetition_penalty: 2, presence_penalty: 1 }), h)
    expect([...row]).toEqual([1, 1])
  })
})

describe('Sampler: masks and buffers', () => {
  it('masks EOS until min_tokens tokens have been generated', () => {
    const row = logitsOf([0.05, 0.9, 0.05]) // id 1 is EOS and by far the most likely
    const s = new Sampler(samplingParams({ temperature: 0, min_tokens: 2 }), 3, { eosIds: [1] })
    const h = new TokenHistory([7])
    expect(sample(s, row, h)).not.toBe(1)
    h.push(0)
    expect(sample(s, row, h)).not.toBe(1)
    h.push(0)
    expect(sample(s, row, h)).toBe(1)
  })

  it('reads a row through a view of a batch buffer and overwrites only that row', () => {
    const vocab = 50
    const batch = randomLogits(new Rng(3), vocab * 4 + 7) // rows plus padding: the view is longer than the vocab
    const copy = batch.slice()
    const h = new TokenHistory([1, 2, 3])
    h.push(4)
    const p = samplingParams({ seed: 11, top_k: 10, top_p: 0.9, repetition_penalty: 1.2, presence_penalty: 0.5 })
    // The same draws (same seed) from a row of its own as from a view into the batch.
    const a = new Sampler(p, vocab)
    const ids = Array.from({ length: 20 }, () => sample(a, copy.slice(vocab * 2, vocab * 3), h))
    const b = new Sampler(p, vocab)
    const inPlace = ids.map(() => {
      const scratch = copy.slice()
      const id = b.sampleInPlace(scratch.subarray(vocab * 2), h)
      expect(scratch.subarray(0, vocab * 2)).toEqual(copy.subarray(0, vocab * 2))
      expect(scratch.subarray(vocab * 3)).toEqual(copy.subarray(vocab * 3))
      return id
    })
    expect(inPlace).toEqual(ids)
  })

  it('samplers sharing one SamplerScratch draw exactly what separate ones draw', () => {
    const rng = new Rng(21)
    const rows = Array.from({ length: 30 }, () => randomLogits(rng, 500))
    const p = [{ seed: 1 }, { seed: 2, top_p: 0.8 }, { seed: 3, top_k: 20 }, { seed: 4, min_p: 0.1 }]
    const run = (shared: SamplerScratch | undefined): number[] => {
      const samplers = p.map((q) => new Sampler(samplingParams(q), 500, { scratch: shared }))
      return rows.flatMap((r) => samplers.map((s) => sample(s, r, new TokenHistory())))
    }
    expect(run(new SamplerScratch(500))).toEqual(run(undefined))
  })

  it('rejects a row shorter than the vocabulary', () => {
    expect(() => sample(new Sampler(samplingParams(), 10), new Float32Array(9), new TokenHistory())).toThrow(RangeError)
  })

  it('fails with an internal error when every token is masked or NaN', () => {
    const s = new Sampler(samplingParams({ seed: 1 }), 3)
    try {
      sample(s, Float32Array.from([Number.NaN, -Infinity, -Infinity]), new TokenHistory())
      expect.unreachable()
    } catch (e) {
      expect(isOnnxdError(e) && e.code).toBe('internal')
    }
  })

  it('never draws a NaN or -Infinity logit, whatever the filters', () => {
    const row = Float32Array.from([Number.NaN, 0, -Infinity, 0, Number.NaN])
    for (const p of [{}, { top_k: 4 }, { top_p: 0.99 }, { min_p: 0.5 }]) {
      expect(drawn(histogram(p, row, 500))).toEqual([1, 3])
    }
  })
})

describe('Sampler: logprobs and logit_bias', () => {
  const rng = new Rng(11)
  const row = randomLogits(rng, 500)
  /** Log-softmax in float64, independently of the sampler. */
  const logSoftmax = (r: Float32Array): number[] => {
    const m = Math.max(...r)
    const lse = m + Math.log(r.reduce((z, x) => z + Math.exp(x - m), 0))
    return [...r].map((x) => x - lse)
  }

  it('reports the pick and the top tokens under log-softmax of the raw logits, before penalties and bias', () => {
    const ref = logSoftmax(row)
    const byRank = ref.map((v, i) => [v, i] as const).sort((a, b) => b[0] - a[0] || a[1] - b[1])
    // Penalties and a bias move the pick (the best token is penalised away), never the reported values.
    const best = byRank[0]![1]
    const s = new Sampler(samplingParams({ temperature: 0, logprobs: true, top_logprobs: 4, repetition_penalty: 2, logit_bias: [[best, -50]] }), row.length)
    const token = sample(s, row, new TokenHistory([best]))
    expect(token).not.toBe(best)
    const lp = s.lastLogprobs!
    expect(lp.token).toBe(token)
    expect(lp.logprob).toBeCloseTo(ref[token]!, 5)
    expect(lp.top.map((t) => t.token)).toEqual(byRank.slice(0, 4).map(([, i]) => i))
    for (const t of lp.top) expect(t.logprob).toBeCloseTo(ref[t.token]!, 5)
    // top_logprobs 0: the pick only.
    const none = new Sampler(samplingParams({ temperature: 0, logprobs: true }), row.length)
    sample(none, row, new TokenHistory())
    expect(none.lastLogprobs).toEqual({ token: best, logprob: expect.closeTo(ref[best]!, 5), top: [] })
  })

  it('logprobs or a bias take the step off the graph’s argmax; without them a greedy step stays on it', () => {
    const h = new TokenHistory()
    expect(new Sampler(samplingParams({ temperature: 0 }), 10).picksArgmax(h)).toBe(true)
    expect(new Sampler(samplingParams({ temperature: 0, logprobs: true }), 10).picksArgmax(h)).toBe(false)
    expect(new Sampler(samplingParams({ temperature: 0, logit_bias: [[3, 1]] }), 10).picksArgmax(h)).toBe(false)
    expect(new Sampler(samplingParams({ temperature: 0 }), 10).lastLogprobs).toBeNull()
  })

  it('adds each bias to its logit: -100 bans a token, +100 forces one at any temperature', () => {
    const best = argmax(row)
    const banned = histogram({ temperature: 0, logit_bias: [[best, -100]] }, row, 5)
    expect(banned[best]).toBe(0)
    expect(drawn(histogram({ temperature: 1.5, logit_bias: [[42, 100]] }, row, 200))).toEqual([42])
    // A small bias shifts a sampled distribution by exp(bias), as OpenAI defines it.
    const two = Float32Array.from([0, 0])
    const counts = histogram({ temperature: 1, logit_bias: [[1, Math.log(3)]] }, two, 4000)
    expect(counts[1]! / 4000).toBeCloseTo(0.75, 1)
  })
})
