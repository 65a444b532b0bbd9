// Automatic prefix caching is exact: a prompt that reuses a cached prefix's KV rows generates the same greedy tokens
// as the same prompt computed whole (an engine with prefix caching off), whether the prefix was cached by an earlier
// request or the sharing prompts are prefilled together; usage and the finish observations say how many prompt
// tokens came from the cache. On the tiny default model in both graph forms and runtimes, and on the decoder fixtures.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Engine } from '../../../src/engine/engine.js'
import { PREFIX_BLOCK } from '../../../src/engine/scheduler/prefix-cache.js'
import type { FinishObservation, SeqEvent } from '../../../src/engine/types.js'
import { DECODER_FIXTURES, tinyPlainModelDir, fixture, haveFixtures, tinyGqaModelDir } from '../../helpers/fixtures.js'
import { runRequest, type RunResult } from '../../helpers/engine-run.js'

const tokens = (n: number, salt: number, vocab: number): number[] => Array.from({ length: n }, (_, i) => (i * 31 + salt * 17 + 3) % vocab)

const MODELS = [
  { name: 'onnxd-tiny, plain, capi', dir: tinyPlainModelDir, runtime: 'capi', needsFixtures: false },
  { name: 'onnxd-tiny, plain, js', dir: tinyPlainModelDir, runtime: 'js', needsFixtures: false },
  { name: 'onnxd-tiny, gqa, capi', dir: tinyGqaModelDir, runtime: 'capi', needsFixtures: false },
  { name: 'onnxd-tiny, gqa, js', dir: tinyGqaModelDir, runtime: 'js', needsFixtures: false },
  // tiny-random-gpt2-fp32 is left out: its tokenizer does not match its logits, so it refuses to load.
  ...DECODER_FIXTURES.filter((f) => f.name !== 'tiny-random-gpt2-fp32').map((f) => ({ name: f.name, dir: () => fixture(f.name), runtime: 'auto' as const, needsFixtures: true })),
] as const

const cachedOf = (r: RunResult): number | undefined => (r.end as Extract<SeqEvent, { type: 'done' }>).usage.prompt_tokens_details?.cached_tokens

describe('prefix caching', () => {
  for (const m of MODELS) {
    describe.skipIf(m.needsFixtures && !haveFixtures)(m.name, () => {
      let on: Engine
      let off: Engine
      const finished: FinishObservation[] = []
      beforeAll(async () => {
        // A small step budget: prompts are prefilled in several chunks, on top of their cached prefix too.
        const opts = { modelDir: m.dir(), runtime: m.runtime, maxBatchedTokens: 8, maxRunning: 8 }
        on = await Engine.load(opts, { onFinish: (f) => finished.push(f) })
        off = await Engine.load({ ...opts, prefixCaching: false })
      })
      afterAll(async () => {
        await on?.close()
        await off?.close()
      })

      it('a prompt on a cached prefix reuses its whole blocks and generates what it generates computed whole', async () => {
        const V = on.model.vocab
        const reuses = on.model.session.chunkedPrefill
        const shared = tokens(2 * PREFIX_BLOCK + 7, 1, V)
        const req = (own: number[]) => ({ input_ids: [...shared, ...own], max_tokens: 12, temperature: 0, ignore_eos: true })
        const first = req(tokens(5, 2, V))
        const second = req(tokens(9, 3, V))

        const a = await runRequest(on, first)
        expect(cachedOf(a)).toBe(0)
        const b = await runRequest(on, second)
        expect(b.end.type).toBe('done')
        expect(cachedOf(b)).toBe(reuses ? 2 * PREFIX_BLOCK : 0)
        expect(b.ids).toEqual((await runRequest(off, second)).ids)
        expect(a.ids).toEqual((await runRequest(off, first)).ids)
        expect(cachedOf(await runRequest(off, second))).toBe(0)

        // The same prompt again: every whole block but the one holding its last token comes from the cache.
        const again = await runRequest(on, second)
        expect(cachedOf(again)).toBe(reuses ? Math.floor((second.input_ids.length - 1) / PREFIX_BLOCK) * PREFIX_BLOCK : 0)
        expect(again.ids).toEqual(b.ids)

        // Sampled tokens follow the whole distribution, not only its top token: they agree too.
        const sampled = { ...second, temperature: 1, seed: 7 }
        expect((await runRequest(on, sampled)).ids).toEqual((await runRequest(off, sampled)).ids)

        const seen = finished.slice(-4, -1)
        expect(seen.map((f) => f.prefixQueryTokens)).toEqual(reuses ? [first, second, second].map((r) => r.input_ids.length) : [0, 0, 0])
        expect(seen.map((f) => f.prefixHitTokens)).toEqual([0, cachedOf(b), cachedOf(again)])
      })

      it('prompts that share a cached prefix and are prefilled together each generate what they do alone', async () => {
        const V = on.model.vocab
        const shared = tokens(3 * PREFIX_BLOCK, 4, V)
        await runRequest(on, { input_ids: shared, max_tokens: 1, temperature: 0, ignore_eos: true })
        const reqs = [6, 1, 20].map((n, i) => ({ input_ids: [...shared, ...tokens(n, 5 + i, V)], max_tokens: 10, temperature: 0, ignore_eos: true }))
        const together = await Promise.all(reqs.map((r) => runRequest(on, r)))
        const whole = await Promise.all(reqs.map((r) => runRequest(off, r)))
        expect(together.map((r) => r.ids)).toEqual(whole.map((r) => r.ids))
        if (on.model.session.chunkedPrefill) for (const r of together) expect(cachedOf(r)).toBeGreaterThanOrEqual(2 * PREFIX_BLOCK)
      })

      it('prompts that arrive together on an uncached shared prefix compute it once: the others wait a group and reuse it', async () => {
        const V = on.model.vocab
        const shared = tokens(3 * PREFIX_BLOCK + 5, 9, V)
        const reqs = [4, 11, 2, 7].map((n, i) => ({ input_ids: [...shared, ...tokens(n, 20 + i, V)], max_tokens: 6, temperature: 0, ignore_eos: true }))
        const together = await Promise.all(reqs.map((r) => runRequest(on, r)))
        const whole = await Promise.all(reqs.map((r) => runRequest(off, r)))
        expect(together.map((r) => r.ids)).toEqual(whole.map((r) => r.ids))
        const cached = together.map(cachedOf)
        // One of them computed the shared blocks; every other one found all three cached.
        if (on.model.session.chunkedPrefill) expect([...cached].sort((a, b) => a! - b!)).toEqual([0, 3 * PREFIX_BLOCK, 3 * PREFIX_BLOCK, 3 * PREFIX_BLOCK])
        else expect(cached).toEqual([0, 0, 0, 0])
      })
    })
  }
})
