// The warm-up a node's workers run on a GPU provider before they say ready (issue #33): each new step shape costs
// WebGPU its shaders' compiles on first use (on lavapipe 0.7-13 s for the first decode step at 1, 2-4 and 16 rows and
// the first prompt chunk), so Engine.warmUp runs every shape a device cache steps in (rows and prompt chunks in powers
// of two) before any request comes. Afterwards a batch that requests of any prompt length join and leave runs no
// shape the warm-up did not. In both graph forms, on lavapipe where no GPU is (.ci/lavapipe); skipped, saying why,
// where no WebGPU adapter exists.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Engine } from '../../src/engine/engine.js'
import { tinyGqaModelDir, tinyPlainModelDir } from '../helpers/fixtures.js'
import { runRequest } from '../helpers/engine-run.js'
import { noWebgpu, webgpuTitle } from '../helpers/webgpu.js'

const SLOW = { timeout: 300_000 }
const LIMITS = { maxRunning: 8, maxBatchedTokens: 64 }
const prompt = (n: number, salt: number, vocab: number): number[] => Array.from({ length: n }, (_, i) => (i * 31 + salt * 17 + 3) % vocab)
const shapesOf = (e: Engine): Set<string> => new Set((e.model.session as unknown as { capi: { deviceShapes: Set<string> } }).capi.deviceShapes)

describe.skipIf(noWebgpu !== null)(webgpuTitle('warm-up on webgpu (runtime capi, cache on the device)'), () => {
  for (const [form, dir] of [['GroupQueryAttention', tinyGqaModelDir], ['plain', tinyPlainModelDir]] as const) {
    describe(form, () => {
      let gpu: Engine
      beforeAll(async () => {
        gpu = await Engine.load({ modelDir: dir(), provider: 'webgpu', ...LIMITS })
      }, 300_000)
      afterAll(async () => {
        await gpu?.close()
      })

      it('runs decode steps at every power of two of rows up to maxRunning and prompt chunks of every power of two up to maxBatchedTokens, and then serves a changing batch in those shapes only', SLOW, async () => {
        expect(gpu.model.session.deviceResident).toBe(true)
        expect(shapesOf(gpu).size).toBe(0)
        expect(await gpu.warmUp()).toBe(LIMITS.maxRunning + 1)
        const warmed = shapesOf(gpu)
        for (const rows of [1, 2, 4, 8]) expect(warmed).toContain(`${rows}x1`)
        for (const chunk of [2, 4, 8, 16, 32, 64]) expect(warmed).toContain(`1x${chunk}`)
        // Requests of many prompt lengths, joining a running batch and leaving it at different steps.
        const V = gpu.model.vocab
        const lengths = [5, 100, 3, 77, 64, 1, 40, 130, 9]
        const first = lengths.slice(0, 4).map((n, i) => runRequest(gpu, { input_ids: prompt(n, i, V), max_tokens: 3 + 5 * i, temperature: 0, ignore_eos: true }))
        await first[0]
        const later = lengths.slice(4).map((n, i) => runRequest(gpu, { input_ids: prompt(n, 10 + i, V), max_tokens: 2 + 4 * i, temperature: 0.8, seed: i, ignore_eos: true }))
        for (const r of await Promise.all([...first, ...later])) expect(r.end.type).toBe('done')
        const after = shapesOf(gpu)
        expect(after.size).toBeGreaterThan(0)
        expect([...after].filter((s) => !warmed.has(s))).toEqual([])
      })
    })
  }
})
