// The bytes each step copies in for ONNX Runtime and reads back (StepObservation.bytesIn/bytesOut, the node's
// onnxd_step_io_bytes_total). On the CPU ORT reads the cache in place on either runtime, so what goes in is the
// step's ids, positions and mask or lengths, the same few bytes at any context. On the JS-API runtime a
// GroupQueryAttention graph's presents come back whole, so what comes out grows with the context; on the C-API
// runtime they are written into the cache itself, so a decode step reads back only the next tokens or the logits.
import { describe, expect, it } from 'vitest'
import { Engine } from '../../src/engine/engine.js'
import type { StepObservation } from '../../src/engine/types.js'
import type { Runtime } from '../../src/engine/model/runtime.js'
import { tinyPlainModelDir, tinyGqaModelDir } from '../helpers/fixtures.js'
import { noWebgpu, webgpuTitle } from '../helpers/webgpu.js'

/** The decode steps of one greedy request of `tokens` tokens. */
async function decodeSteps(modelDir: string, runtime: Runtime, tokens: number, provider: 'cpu' | 'webgpu' = 'cpu'): Promise<{ steps: StepObservation[]; kvBytesPerToken: number; vocab: number }> {
  const steps: StepObservation[] = []
  const engine = await Engine.load({ modelDir, runtime, provider }, { onStep: (s) => s.phase === 'decode' && steps.push(s) })
  expect(engine.model.session.runtime).toBe(runtime)
  await new Promise<void>((resolve, reject) =>
    engine.submit({ model: engine.model.id, prompt: 'Once upon a time', max_tokens: tokens, temperature: 0, ignore_eos: true } as never, (e) => {
      if (e.type === 'done') resolve()
      if (e.type === 'error') reject(new Error(e.error.message))
    }),
  )
  const out = { steps, kvBytesPerToken: engine.model.kvBytesPerToken, vocab: engine.model.vocab }
  await engine.close()
  return out
}

/**
 * What a decode step copies in on the CPU: the same at every step (the mask's width stays within the cache's first
 * 64 slots here), and less than one cached token's keys and values, where the past would be at least 5 tokens.
 */
function expectPastInPlace(steps: StepObservation[], kvBytesPerToken: number): void {
  expect(steps.length).toBeGreaterThan(20)
  expect(new Set(steps.map((s) => s.bytesIn)).size).toBe(1)
  expect(steps[0]!.bytesIn).toBeGreaterThan(0)
  expect(steps[0]!.bytesIn).toBeLessThan(kvBytesPerToken)
}

describe('step traffic', () => {
  for (const [form, dir] of [['plain', tinyPlainModelDir], ['GroupQueryAttention', tinyGqaModelDir]] as const) {
    for (const runtime of ['js', 'capi'] as const) {
      it(`${runtime} over the ${form} graph on the CPU: the past is read in place, not counted as copied in`, async () => {
        const { steps, kvBytesPerToken } = await decodeSteps(dir(), runtime, 24)
        expectPastInPlace(steps, kvBytesPerToken)
      }, 60_000)
    }
  }

  it.skipIf(noWebgpu !== null)(webgpuTitle('js on WebGPU: the past crosses to the device every step, and counts'), { timeout: 300_000 }, async () => {
    const { steps, kvBytesPerToken } = await decodeSteps(tinyGqaModelDir(), 'js', 8, 'webgpu')
    // JS tensors in host memory, copied to the device by ORT: at least every cached token goes in.
    steps.forEach((s, i) => expect(s.bytesIn).toBeGreaterThanOrEqual((4 + i) * kvBytesPerToken))
  })

  it('js over the plain graph: each decode step reads back only the new rows', async () => {
    const { steps, kvBytesPerToken, vocab } = await decodeSteps(tinyPlainModelDir(), 'js', 24)
    expect(steps.length).toBeGreaterThan(20)
    // The graph is rewritten to return only the step's new keys and values: the same bytes out at every context.
    expect(new Set(steps.map((s) => s.bytesOut)).size).toBe(1)
    expect(steps[0]!.bytesOut).toBeLessThanOrEqual(vocab * 4 + 2 * kvBytesPerToken)
  }, 60_000)

  it('js over GroupQueryAttention: the presents come back whole, growing with the context', async () => {
    const { steps, kvBytesPerToken } = await decodeSteps(tinyGqaModelDir(), 'js', 24)
    steps.forEach((s, i) => expect(s.bytesOut).toBeGreaterThanOrEqual((4 + i) * kvBytesPerToken))
  }, 60_000)

  it('capi over GroupQueryAttention: a decode step reads back the same few bytes at any context', async () => {
    const { steps, vocab } = await decodeSteps(tinyGqaModelDir(), 'capi', 24)
    expect(steps.length).toBeGreaterThan(20)
    const outs = new Set(steps.slice(1).map((s) => s.bytesOut))
    // Presents shared with the cache: only next tokens (int64) or logits (float32) of the one row come back.
    expect(outs.size).toBe(1)
    expect([...outs][0]!).toBeLessThanOrEqual(vocab * 4)
  }, 60_000)
})
