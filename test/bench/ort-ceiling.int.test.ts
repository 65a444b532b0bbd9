// The ORT ceiling through onnxruntime-node's session.run (refs/ort.ts) on either graph form: a GroupQueryAttention
// graph is fed its row lengths as the engine's JS path feeds them, so it runs there too (on CPU the bench times it
// through the C API instead, refs/capi.ts; on a GPU provider only this path exists), and on webgpu a plain graph's
// prefill gets the engine's one masked past slot (a step over an empty past crashes ORT's WebGPU provider). The
// webgpu cases are skipped, saying why, where WebGPU has no adapter.
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { measureCeiling } from '../../src/bench/refs/ort.js'
import { tinyPlainModelDir, tinyGqaModelDir } from '../helpers/fixtures.js'
import { noWebgpu, webgpuTitle } from '../helpers/webgpu.js'

const budget = { warmup: 1, minRuns: 2, minSeconds: 0, maxRuns: 2 }
const graphs = () => [
  { form: 'plain', onnxPath: join(tinyPlainModelDir(), 'onnx', 'model.onnx') },
  { form: 'gqa', onnxPath: join(tinyGqaModelDir(), 'model.onnx') },
]

const check = async (provider: string): Promise<void> => {
  for (const g of graphs()) {
    const c = await measureCeiling({ onnxPath: g.onnxPath, batches: [1, 4], past: 24, prompt: 16, prefillRows: 2, threads: 1, provider, greedy: true, budget })
    // It timed the shapes asked for, as many runs as the budget allows: the prefill of 2 prompts of 16 tokens, a
    // decode step over a past of 24 at batch 1 and 4.
    expect(c.prefill, `${g.form} prefill`).toMatchObject({ prompt: 16, rows: 2, runs: 2 })
    expect(c.prefill.tokens_per_s, `${g.form} prefill`).toBeGreaterThan(0)
    expect(c.decode.map((d) => d.batch)).toEqual([1, 4])
    for (const d of c.decode) {
      expect(d, `${g.form} decode ${d.batch}`).toMatchObject({ past: 24, runs: 2 })
      expect(d.tokens_per_s, `${g.form} decode ${d.batch}`).toBeGreaterThan(0)
    }
  }
}

describe('ORT ceiling through session.run', () => {
  it('runs the plain and the GroupQueryAttention graph on the CPU provider', () => check('cpu'))
  it.skipIf(noWebgpu !== null)(webgpuTitle('runs both on webgpu'), () => check('webgpu'), 120_000)
})
