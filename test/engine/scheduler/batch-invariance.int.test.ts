// Continuous batching must not change what a greedy request generates: alone, or batched with requests of other
// lengths that join and leave while it runs, it yields the same tokens.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { Engine } from '../../../src/engine/engine.js'
import { DECODER_FIXTURES, tinyPlainModelDir, fixture, haveFixtures } from '../../helpers/fixtures.js'
import { runRequest } from '../../helpers/engine-run.js'

const prompt = (n: number, salt: number, vocab: number): number[] => Array.from({ length: n }, (_, i) => (i * 31 + salt * 17 + 3) % vocab)

const MODELS = [
  { name: 'onnxd-tiny (embedded default)', dir: tinyPlainModelDir, needsFixtures: false },
  // tiny-random-gpt2-fp32 is left out: its tokenizer does not match its logits, so it refuses to load.
  ...DECODER_FIXTURES.filter((f) => f.name !== 'tiny-random-gpt2-fp32').map((f) => ({ name: f.name, dir: () => fixture(f.name), needsFixtures: true })),
]

describe('batch invariance', () => {
  for (const f of MODELS) {
    describe.skipIf(f.needsFixtures && !haveFixtures)(f.name, () => {
      let engine: Engine
      const decodeBatches: number[] = []
      beforeAll(async () => {
        // A small prefill budget forces chunked prefill of the longer prompts as well.
        engine = await Engine.load(
          { modelDir: f.dir(), maxBatchedTokens: 8, maxRunning: 8 },
          { onStep: (s) => s.phase === 'decode' && decodeBatches.push(s.batch) },
        )
      })
      afterAll(() => engine.close())

      it('greedy tokens alone equal greedy tokens in a changing batch', async () => {
        const V = engine.model.vocab
        const main = { input_ids: prompt(11, 1, V), max_tokens: 20, temperature: 0, ignore_eos: true }
        const alone = await runRequest(engine, main)
        expect(alone.end.type).toBe('done')
        expect(alone.ids).toHaveLength(20)

        const others: Promise<unknown>[] = []
        decodeBatches.length = 0
        const shortLived = runRequest(engine, { input_ids: prompt(3, 2, V), max_tokens: 4, temperature: 0, ignore_eos: true })
        const batched = await runRequest(engine, main, (n) => {
          // Newcomers of other lengths join mid-way; one of them leaves early.
          if (n === 3) others.push(runRequest(engine, { input_ids: prompt(17, 3, V), max_tokens: 30, temperature: 0, ignore_eos: true }))
          if (n === 7) others.push(runRequest(engine, { input_ids: prompt(5, 4, V), max_tokens: 3, temperature: 0, ignore_eos: true }))
        })
        await Promise.all([shortLived, ...others])
        expect(batched.ids).toEqual(alone.ids)
        expect(Math.max(...decodeBatches)).toBeGreaterThanOrEqual(2)
      })

      it("greedy tokens from the graph's argmax equal the sampler's, taken from the logits", async () => {
        const V = engine.model.vocab
        const session = engine.model.session
        const fromGraph = vi.spyOn(session, 'forwardGreedy')
        try {
          const main = { input_ids: prompt(11, 6, V), max_tokens: 20, temperature: 0, ignore_eos: true }
          const fast = await runRequest(engine, main)
          // float32 graphs get the next-token output (fp16 ones keep reading logits).
          expect(fromGraph.mock.calls.length > 0).toBe(session.signature.nextToken !== null)
          fromGraph.mockClear()
          // A sampled request runs beside it the whole time: every decode step then reads the logits.
          const sampled = runRequest(engine, { input_ids: prompt(7, 5, V), max_tokens: 40, temperature: 1, seed: 3, ignore_eos: true })
          const viaLogits = await runRequest(engine, main)
          await sampled
          expect(fromGraph).not.toHaveBeenCalled()
          expect(viaLogits.ids).toEqual(fast.ids)
        } finally {
          fromGraph.mockRestore()
        }
      })
    })
  }
})
