// The step seam on a real graph: a step whose rows carry different numbers of tokens (a draft to check beside a plain
// decode row, prompts of different lengths prefilled together) and a cache set back after it (rollback) must give
// the logits that one token at a time, each row alone, gives. Both graph forms (plain ops: left-padded rows and the
// new rows copied out; GroupQueryAttention: right-padded rows written in place), both step runtimes.
import { describe, expect, it } from 'vitest'
import { readBundle } from '../../../src/engine/model/bundle.js'
import { DecoderSession } from '../../../src/engine/model/session.js'
import type { Runtime } from '../../../src/engine/model/runtime.js'
import type { KvRows } from '../../../src/engine/model/step-io.js'
import { KvCache, kvShapeOf } from '../../../src/engine/scheduler/kv.js'
import { planStep } from '../../../src/engine/scheduler/step-plan.js'
import { tinyPlainModelDir, tinyGqaModelDir } from '../../helpers/fixtures.js'

type Logits = Float32Array[]

/** Feeds `tokens` to each row in one step; returns each row's logits at each of its tokens (copies). */
async function step(s: DecoderSession, kv: KvRows, tokens: number[][]): Promise<Logits[]> {
  const { x, counts, first } = planStep(kv, s.signature, tokens)
  const picks = tokens.flatMap((t, r) => t.map((_, k) => r * x.seq + first[r] + k))
  const out = await s.forward(x, picks)
  kv.append(out.present, counts)
  const V = s.signature.logits.vocab
  let i = 0
  return tokens.map((t) => t.map(() => out.logits.slice(i * V, ++i * V)))
}

/** Each token's logits when `history` goes in one token at a time, alone. */
async function alone(s: DecoderSession, history: number[]): Promise<Logits> {
  const kv = new KvCache(kvShapeOf(s.signature.kv))
  kv.addRows(1)
  const out: Logits = []
  for (const t of history) out.push((await step(s, kv, [[t]]))[0][0])
  return out
}

function maxDiff(a: Logits, b: Logits): { diff: number; scale: number } {
  let diff = 0
  let scale = 0
  a.forEach((row, i) => {
    for (let v = 0; v < row.length; v++) {
      diff = Math.max(diff, Math.abs(row[v] - b[i][v]))
      scale = Math.max(scale, Math.abs(b[i][v]))
    }
  })
  return { diff, scale }
}

const forms = [
  { form: 'plain', dir: tinyPlainModelDir },
  { form: 'gqa', dir: tinyGqaModelDir },
]

describe('steps of several tokens per row, and rollback', () => {
  for (const { form, dir } of forms) {
    for (const runtime of ['js', 'capi'] as Runtime[]) {
      // GroupQueryAttention takes several tokens per row over a cache at batch 1 only: row A alone there.
      const what = form === 'plain' ? 'a batch of uneven rows' : 'one row'
      it(`onnxd-tiny ${form} / ${runtime}: ${what}, a draft set back, then the next steps`, async () => {
        const s = await DecoderSession.create(readBundle(dir()), { runtime })
        try {
          expect(s.runtime).toBe(runtime)
          const both = form === 'plain'
          expect(s.multiTokenRows).toBe(both ? Infinity : 1)
          const V = s.signature.logits.vocab
          const tok = (i: number): number => (i * 131 + 17) % V
          const a = [1, 2, 3, 4, 5, 6].map(tok)
          const b = [7, 8, 9].map(tok)
          const rows = (ra: number[], rb: number[]): number[][] => (both ? [ra, rb] : [ra])
          const kv = new KvCache(kvShapeOf(s.signature.kv))
          kv.addRows(both ? 2 : 1)
          // Prompts of 6 and 3 tokens in one step.
          const prefill = await step(s, kv, rows(a, b))
          expect(kv.lens).toEqual(rows([6], [3]).flat())
          // Row A carries its token and a draft of three; row B one token.
          const draft = [10, 11, 12, 13].map(tok)
          const d1 = await step(s, kv, rows(draft, [tok(14)]))
          expect(kv.lens).toEqual(rows([10], [4]).flat())
          // Only the first two draft tokens were right: the row keeps its token and them (9 tokens), and goes on from
          // there; the third draft token's slot is written over.
          kv.truncate(0, 9)
          const next = await step(s, kv, rows([tok(20)], [tok(15), tok(16)]))
          const last = await step(s, kv, rows([tok(21)], [tok(17)]))
          expect(kv.lens).toEqual(rows([11], [7]).flat())

          const checks = [[[...prefill[0], ...d1[0].slice(0, 3), ...next[0], ...last[0]], await alone(s, [...a, ...draft.slice(0, 3), tok(20), tok(21)])]]
          if (both) checks.push([[...prefill[1], ...d1[1], ...next[1], ...last[1]], await alone(s, [...b, tok(14), tok(15), tok(16), tok(17)])])
          for (const [got, ref] of checks) {
            expect(got.length).toBe(ref.length)
            const { diff, scale } = maxDiff(got, ref)
            expect(scale).toBeGreaterThan(0)
            expect(diff).toBeLessThanOrEqual(1e-3 * Math.max(1, scale))
          }
        } finally {
          await s.dispose()
        }
      })
    }
  }

  for (const runtime of ['js', 'capi'] as Runtime[]) {
    it(`onnxd-tiny gqa / ${runtime}: prompts of different lengths prefilled together over no past, then decoded together`, async () => {
      const s = await DecoderSession.create(readBundle(tinyGqaModelDir()), { runtime })
      try {
        const V = s.signature.logits.vocab
        const tok = (i: number): number => (i * 71 + 3) % V
        const prompts = [[1, 2, 3, 4, 5, 6, 7].map(tok), [8, 9].map(tok), [10, 11, 12, 13].map(tok)]
        const kv = new KvCache(kvShapeOf(s.signature.kv))
        kv.addRows(3)
        // Reserved as the batcher does: the cache has slots, which this first step does not run over.
        kv.reserve(3, 16)
        const { x, counts, first } = planStep(kv, s.signature, prompts, { fresh: true })
        expect(x.pastLen).toBe(0)
        const out = await s.forward(x, prompts.map((p, r) => r * x.seq + first[r] + p.length - 1))
        const got: Logits[] = prompts.map((_, r) => [out.logits.slice(r * V, (r + 1) * V)])
        kv.append(out.present, counts)
        expect(kv.lens).toEqual([7, 2, 4])
        for (let k = 0; k < 3; k++) {
          const next = await step(s, kv, prompts.map((_, r) => [tok(20 + 3 * k + r)]))
          next.forEach((l, r) => got[r].push(l[0]))
        }
        for (let r = 0; r < 3; r++) {
          const ref = (await alone(s, [...prompts[r], ...[0, 1, 2].map((k) => tok(20 + 3 * k + r))])).slice(prompts[r].length - 1)
          const { diff, scale } = maxDiff(got[r], ref)
          expect(scale).toBeGreaterThan(0)
          expect(diff, `row ${r}`).toBeLessThanOrEqual(1e-3 * Math.max(1, scale))
        }
        expect(() => planStep(kv, s.signature, [[1], [2], [3]], { fresh: true })).toThrow(/nothing in the cache/)
      } finally {
        await s.dispose()
      }
    })
  }

  it('a rollback is to fewer tokens than the row holds', () => {
    const kv = new KvCache({ tensors: 2, outer: 1, heads: 1, headDim: 1, dtype: 'float32', present: 'new' })
    kv.addRows(1)
    expect(() => kv.truncate(0, 1)).toThrow(/cannot set a row of 0 tokens back to 1/)
    expect(() => kv.truncate(0, -1)).toThrow(RangeError)
  })
})
