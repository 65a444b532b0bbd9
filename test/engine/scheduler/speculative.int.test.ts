// Speculative decoding on the tiny preset: n-gram drafts checked in the decode step itself must leave greedy output
// as it is without them, alone and in a batch of requests joining at different times, in both graph forms and both
// step runtimes; and where the output repeats its prompt, drafts are accepted. GroupQueryAttention graphs draft with
// one running row only (ORT takes several tokens per row over a cache at batch 1 only).
import { afterEach, describe, expect, it } from 'vitest'
import { Engine } from '../../../src/engine/engine.js'
import type { Runtime } from '../../../src/engine/model/runtime.js'
import type { StepObservation } from '../../../src/engine/types.js'
import { runRequest } from '../../helpers/engine-run.js'
import { tinyPlainModelDir, tinyGqaModelDir } from '../../helpers/fixtures.js'

const forms = [
  { form: 'plain', dir: tinyPlainModelDir },
  { form: 'gqa', dir: tinyGqaModelDir },
]

/** A prompt that repeats a phrase: what drafts by lookup are for. */
const phrase = [101, 202, 303, 404, 505, 606, 707]
const reqs = [
  { input_ids: [...phrase, ...phrase, ...phrase.slice(0, 3)], max_tokens: 40 },
  { input_ids: [9, 8, 7, 6, 5, 4, 3, 2, 1, 9, 8, 7], max_tokens: 25 },
  { input_ids: [...phrase.slice(2), 11, 12, ...phrase.slice(2), 11], max_tokens: 33 },
].map((r) => ({ ...r, temperature: 0, ignore_eos: true }))

describe('speculative decoding on the tiny preset', () => {
  const engines: Engine[] = []
  afterEach(async () => {
    await Promise.all(engines.splice(0).map((e) => e.close()))
  })

  for (const { form, dir } of forms) {
    for (const runtime of ['js', 'capi'] as Runtime[]) {
      it(`${form} / ${runtime}: the same tokens with drafts as without, drafts accepted`, { timeout: 120_000 }, async () => {
        const steps: StepObservation[] = []
        const [off, on] = await Promise.all([
          Engine.load({ modelDir: dir(), runtime, prefixCaching: false }),
          Engine.load({ modelDir: dir(), runtime, prefixCaching: false, speculativeTokens: 4 }, { onStep: (s) => s.phase === 'decode' && steps.push(s) }),
        ])
        engines.push(off, on)
        const want = []
        for (const r of reqs) want.push((await runRequest(off, r)).ids)
        // Alone, then together, each joining after the previous one's second token.
        for (let i = 0; i < reqs.length; i++) expect((await runRequest(on, reqs[i])).ids, `request ${i} alone`).toEqual(want[i])
        const runs: Promise<number[]>[] = []
        const launch = (i: number): void => {
          if (i < reqs.length) runs.push(runRequest(on, reqs[i], (n) => n === 2 && launch(i + 1)).then((x) => x.ids))
        }
        launch(0)
        while (runs.length < reqs.length) await new Promise((r) => setTimeout(r, 5))
        expect(await Promise.all(runs)).toEqual(want)
        const drafted = steps.reduce((n, s) => n + (s.drafted ?? 0), 0)
        const accepted = steps.reduce((n, s) => n + (s.accepted ?? 0), 0)
        expect(drafted).toBeGreaterThan(0)
        expect(accepted).toBeGreaterThan(0)
        // Plain graphs check drafts in steps of several rows; GroupQueryAttention, with one running row only.
        if (form === 'plain') expect(steps.some((s) => s.batch > 1 && (s.drafted ?? 0) > 0)).toBe(true)
        else expect(steps.every((s) => s.batch === 1 || !s.drafted)).toBe(true)
      })
    }
  }
})
