// Speculative decoding on the device (issue #33: steps of several tokens per row on a device cache): a decode step
// over the device cache carries each row's token and its n-gram draft, padded to one width (batcher.ts
// deviceDrafts), and the graph's greedy pick after each is the row's next token; on a GroupQueryAttention graph with
// one row running, in slot 0, on a plain graph with up to --speculative-max-rows rows. The output is the output
// without drafts, alone and in a batch; fewer steps than tokens; and after the warm-up no step runs a shape the
// warm-up did not. Both graph forms, on lavapipe where no GPU is; skipped, saying why, where no WebGPU adapter exists.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Engine } from '../../src/engine/engine.js'
import type { EngineRequest, StepObservation } from '../../src/engine/types.js'
import { tinyGqaModelDir, tinyPlainModelDir } from '../helpers/fixtures.js'
import { runRequest, type RunResult } from '../helpers/engine-run.js'
import { noWebgpu, webgpuTitle } from '../helpers/webgpu.js'

const SLOW = { timeout: 300_000 }
/** A prompt that repeats itself, so that drafts are found from the first steps on. */
const cyclic = (n: number, salt: number, vocab: number): number[] => Array.from({ length: n }, (_, i) => (3 + salt + (i % 3) * 11) % vocab)
const shapesOf = (e: Engine): Set<string> => new Set((e.model.session as unknown as { capi: { deviceShapes: Set<string> } }).capi.deviceShapes)

describe.skipIf(noWebgpu !== null)(webgpuTitle('speculative decoding on the device (webgpu, runtime capi)'), () => {
  for (const [form, dir] of [['GroupQueryAttention', tinyGqaModelDir], ['plain', tinyPlainModelDir]] as const) {
    describe(form, () => {
      let plain: Engine
      let spec: Engine
      let warmed: Set<string>
      const steps: StepObservation[] = []
      beforeAll(async () => {
        plain = await Engine.load({ modelDir: dir(), provider: 'webgpu', maxRunning: 4 })
        spec = await Engine.load({ modelDir: dir(), provider: 'webgpu', maxRunning: 4, speculativeTokens: 4 }, { onStep: (s) => steps.push(s) })
        await spec.warmUp()
        warmed = shapesOf(spec)
        steps.length = 0
      }, 300_000)
      afterAll(async () => {
        await plain?.close()
        await spec?.close()
      })
      const decodeSteps = (): StepObservation[] => steps.filter((s) => s.phase === 'decode')
      const newShapes = (): string[] => [...shapesOf(spec)].filter((s) => !warmed.has(s))
      /** `a` on the drafting engine, `b` joining it when `a`'s `at`-th token comes; both results. */
      const joined = async (a: Partial<EngineRequest>, b: Partial<EngineRequest>, at: number): Promise<[RunResult, RunResult]> => {
        let rb: ReturnType<typeof runRequest> | null = null
        const gotA = await runRequest(spec, a, (n) => {
          if (n === at) rb = runRequest(spec, b)
        })
        return [gotA, await rb!]
      }

      it("drafts with one row running and gives the tokens decoding one at a time gives, in fewer steps; padded to one shape, which the warm-up ran", SLOW, async () => {
        expect(spec.model.session.deviceResident).toBe(true)
        // The warm-up's last rows drafted: 4 tokens padded to 7, each row's token and draft 8 in all; on a plain graph
        // up to --speculative-max-rows rows together (4 by default).
        for (const rows of form === 'plain' ? [1, 2, 4] : [1]) expect(warmed).toContain(`${rows}x8`)
        const req = { input_ids: cyclic(12, 1, spec.model.vocab), max_tokens: 40, temperature: 0, ignore_eos: true }
        const want = await runRequest(plain, req)
        steps.length = 0
        const got = await runRequest(spec, req)
        expect(got.end.type).toBe('done')
        expect(got.ids).toEqual(want.ids)
        const decode = decodeSteps()
        const drafted = decode.reduce((n, s) => n + (s.drafted ?? 0), 0)
        const accepted = decode.reduce((n, s) => n + (s.accepted ?? 0), 0)
        expect(drafted).toBeGreaterThan(0)
        expect(accepted).toBeGreaterThan(0)
        expect(accepted).toBeLessThanOrEqual(drafted)
        // 39 tokens after the prompt's: each accepted draft token (pads included) is one, and each decode step gives one
        // more of its own, but the last, which may end the sequence on an accepted draft token.
        expect(decode.length).toBeGreaterThanOrEqual(39 - accepted)
        expect(decode.length).toBeLessThanOrEqual(40 - accepted)
        expect(decode.reduce((n, s) => n + s.tokens, 0)).toBeGreaterThan(decode.length)
        expect(newShapes()).toEqual([])
      })

      it('in a batch the row shares for a while, every request gets its tokens alone; drafts then only on a plain graph', SLOW, async () => {
        const V = spec.model.vocab
        const a = { input_ids: cyclic(10, 2, V), max_tokens: 48, temperature: 0, ignore_eos: true }
        const b = { input_ids: cyclic(7, 5, V), max_tokens: 6, temperature: 0, ignore_eos: true }
        const wantA = await runRequest(plain, a)
        const wantB = await runRequest(plain, b)
        steps.length = 0
        const [gotA, gotB] = await joined(a, b, 3)
        expect(gotA.ids).toEqual(wantA.ids)
        expect(gotB.ids).toEqual(wantB.ids)
        const decode = decodeSteps()
        expect(decode.some((s) => s.batch === 2)).toBe(true)
        expect(decode.some((s) => s.batch === 1 && s.tokens > 1)).toBe(true)
        // Steps of two rows carry drafts on a plain graph (both rows padded to one width), on GroupQueryAttention none.
        const together = decode.filter((s) => s.batch === 2 && s.tokens > 2).length
        if (form === 'plain') expect(together).toBeGreaterThan(0)
        else expect(together).toBe(0)
        expect(newShapes()).toEqual([])
      })

      it('a row left alone in a higher slot (the first row gone) gets its tokens: drafts there only on a plain graph', SLOW, async () => {
        const V = spec.model.vocab
        // a takes slot 0 and b slot 1; a ends first (it drafts at most one step before b joins, then none: two rows).
        const a = { input_ids: cyclic(9, 7, V), max_tokens: 24, temperature: 0, ignore_eos: true }
        const b = { input_ids: cyclic(11, 8, V), max_tokens: 60, temperature: 0, ignore_eos: true }
        const wantB = await runRequest(plain, b)
        steps.length = 0
        const [, gotB] = await joined(a, b, 1)
        expect(gotB.end.type).toBe('done')
        expect(gotB.ids).toEqual(wantB.ids)
        const decode = decodeSteps()
        // b decodes alone after a left, in slot 1: a GroupQueryAttention step there covers slots 0 and 1.
        const last = decode.findLastIndex((s) => s.batch === 2)
        expect(last).toBeGreaterThanOrEqual(0)
        const alone = decode.slice(last + 1)
        expect(alone.length).toBeGreaterThan(0)
        const drafts = alone.filter((s) => s.tokens > 1).length
        if (form === 'plain') expect(drafts).toBeGreaterThan(0)
        else expect(drafts).toBe(0)
      })
    })
  }
})
