// WebGPU graph capture of the decode step (issue #33, model/captured-step.ts): with `graphCapture`, ORT's WebGPU
// provider records the first decode step over the running pool and replays it at every later one; inputs and
// outputs go through device tensors bound once. What a user depends on: the CPU's tokens and log-probabilities,
// greedy and sampled, alone and in a batch that requests join and leave, speculative drafts and prefills beside it;
// a cache allocated once, at the model's context; the same few bytes per decode step at any context; and a clear
// refusal where it cannot run. Lavapipe stands in for a GPU (.ci/lavapipe); skipped, saying why, without an adapter.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Engine } from '../../src/engine/engine.js'
import type { StepObservation } from '../../src/engine/types.js'
import { tinyGqaModelDir, tinyPlainModelDir } from '../helpers/fixtures.js'
import { logprobsOf as logprobs, runJoining, runRequest } from '../helpers/engine-run.js'
import { noWebgpu, webgpuTitle } from '../helpers/webgpu.js'

const SLOW = { timeout: 300_000 }
const prompt = (n: number, salt: number, vocab: number): number[] => Array.from({ length: n }, (_, i) => (i * 37 + salt * 13 + 5) % vocab)
const ROWS = 4

describe.skipIf(noWebgpu !== null)(webgpuTitle('WebGPU graph capture of the decode step (runtime capi)'), () => {
  let cpu: Engine
  let gpu: Engine
  const steps: StepObservation[] = []
  beforeAll(async () => {
    cpu = await Engine.load({ modelDir: tinyGqaModelDir() })
    gpu = await Engine.load({ modelDir: tinyGqaModelDir(), provider: 'webgpu', graphCapture: true, maxRunning: ROWS }, { onStep: (s) => steps.push(s) })
  }, 300_000)
  afterAll(async () => {
    await cpu?.close()
    await gpu?.close()
  })

  it("replays the captured step for decode steps, with the CPU's greedy tokens alone, over a cache allocated once at the model's context", SLOW, async () => {
    const req = { input_ids: prompt(7, 1, gpu.model.vocab), max_tokens: 24, temperature: 0, ignore_eos: true }
    const want = await runRequest(cpu, req)
    steps.length = 0
    const got = await runRequest(gpu, req)
    expect(got.ids).toEqual(want.ids)
    const c = gpu.model.session.deviceCache()!
    // Every decode step ran over the whole pool: the captured shape.
    const decode = steps.filter((s) => s.phase === 'decode')
    expect(decode.length).toBeGreaterThanOrEqual(20)
    expect(c.capturedSteps).toBeGreaterThanOrEqual(decode.length)
    expect(c.slots).toBe(ROWS)
    expect(c.cap).toBeGreaterThanOrEqual(gpu.model.contextLength)
    expect(c.allocations).toBe(1)
  })

  it('a decode step moves the same few bytes at any context: ids, positions and lengths of every slot in, next tokens out', SLOW, async () => {
    const V = gpu.model.vocab
    const at = async (n: number): Promise<StepObservation[]> => {
      steps.length = 0
      await runRequest(gpu, { input_ids: prompt(n, 2, V), max_tokens: 5, temperature: 0, ignore_eos: true })
      return steps.filter((s) => s.phase === 'decode')
    }
    const all = [...(await at(3)), ...(await at(150))]
    expect(new Set(all.map((s) => `${s.bytesIn}/${s.bytesOut}`)).size).toBe(1)
    // Per slot: an int64 id, its int64 position where the graph takes one, and an int32 length in (and the one int64
    // position of the logits); an int64 next token out.
    const sig = gpu.model.session.signature
    expect(all[0].bytesIn).toBe(ROWS * (8 + (sig.positions ? 8 : 0) + 4) + (sig.logits.at ? 8 : 0))
    expect(all[0].bytesOut).toBe(ROWS * 8)
  })

  it("in a batch that requests join and leave, greedy and sampled (log-probabilities), gives each the CPU's tokens", SLOW, async () => {
    const V = gpu.model.vocab
    const lp = { temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2 }
    const main = { input_ids: prompt(9, 70, V), max_tokens: 18, ...lp }
    const early = { input_ids: prompt(3, 71, V), max_tokens: 3, temperature: 0, ignore_eos: true }
    const joiners = [
      { input_ids: prompt(13, 72, V), max_tokens: 5, temperature: 0, ignore_eos: true },
      { input_ids: prompt(21, 73, V), max_tokens: 8, ...lp },
      { input_ids: prompt(2, 74, V), max_tokens: 9, temperature: 0, ignore_eos: true },
    ]
    const want = await Promise.all([main, early, ...joiners].map((r) => runRequest(cpu, r)))
    const before = gpu.model.session.deviceCache()!.capturedSteps
    steps.length = 0
    const all = await runJoining(gpu, main, early, joiners, [3, 5, 8])
    expect(all.map((x) => x.ids)).toEqual(want.map((x) => x.ids))
    all.forEach((x, i) => {
      const w = logprobs(want[i])
      expect(logprobs(x)).toHaveLength(w.length)
      // fp32 on both.
      expect(logprobs(x).map((v, k) => Math.abs(v - w[k]))).toEqual(w.map(() => expect.closeTo(0, 4)))
    })
    const decode = steps.filter((s) => s.phase === 'decode')
    expect(Math.max(...decode.map((s) => s.batch))).toBeGreaterThanOrEqual(3)
    expect(gpu.model.session.deviceCache()!.capturedSteps - before).toBe(decode.length)
    expect(gpu.model.session.deviceCache()!.allocations).toBe(1)
  })

  it("speculative drafts (steps of several tokens, not captured) run beside the captured steps with the CPU's tokens", SLOW, async () => {
    const seen: StepObservation[] = []
    const spec = await Engine.load({ modelDir: tinyGqaModelDir(), provider: 'webgpu', graphCapture: true, maxRunning: ROWS, speculativeTokens: 3 }, { onStep: (s) => seen.push(s) })
    try {
      const V = spec.model.vocab
      // A repeating prompt: the n-gram lookup finds drafts in it.
      const rep = Array.from({ length: 24 }, (_, i) => prompt(6, 90, V)[i % 6])
      const req = { input_ids: rep, max_tokens: 30, temperature: 0, ignore_eos: true }
      const want = await runRequest(cpu, req)
      const got = await runRequest(spec, req)
      expect(got.ids).toEqual(want.ids)
      expect(seen.reduce((n, s) => n + (s.drafted ?? 0), 0)).toBeGreaterThan(0)
      expect(spec.model.session.deviceCache()!.capturedSteps).toBeGreaterThan(0)
    } finally {
      await spec.close()
    }
  })

  it("with --max-model-len, allocates its slots that long, not the model's context", SLOW, async () => {
    const short = await Engine.load({ modelDir: tinyGqaModelDir(), provider: 'webgpu', graphCapture: true, maxRunning: ROWS, maxModelLen: 100 })
    try {
      const req = { input_ids: prompt(30, 110, short.model.vocab), max_tokens: 70, temperature: 0, ignore_eos: true }
      expect((await runRequest(short, req)).ids).toEqual((await runRequest(cpu, req)).ids)
      // Slots are whole multiples of 64 tokens.
      expect(short.model.session.deviceCache()).toMatchObject({ slots: ROWS, cap: 128, allocations: 1 })
    } finally {
      await short.close()
    }
  })

  it('holds to the KV budget: fewer slots than --max-running, the rest of the requests wait for one', SLOW, async () => {
    const c = gpu.model.session.deviceCache()!
    const perSlot = c.bytes / c.slots
    const small = await Engine.load({ modelDir: tinyGqaModelDir(), provider: 'webgpu', graphCapture: true, maxRunning: ROWS, kvBudgetBytes: 2 * perSlot })
    try {
      const V = small.model.vocab
      const reqs = [4, 9, 6, 11].map((n, i) => ({ input_ids: prompt(n, 100 + i, V), max_tokens: 7 + i, temperature: 0, ignore_eos: true }))
      const want = await Promise.all(reqs.map((r) => runRequest(cpu, r).then((x) => x.ids)))
      expect(await Promise.all(reqs.map((r) => runRequest(small, r).then((x) => x.ids)))).toEqual(want)
      const d = small.model.session.deviceCache()!
      expect(d.slots).toBe(2)
      expect(d.bytes).toBeLessThanOrEqual(2 * perSlot)
      expect(d.capturedSteps).toBeGreaterThan(0)
    } finally {
      await small.close()
    }
  })

  it('is refused, saying why, on the CPU, on the JS runtime and on a plain-op graph', SLOW, async () => {
    await expect(Engine.load({ modelDir: tinyGqaModelDir(), graphCapture: true })).rejects.toThrow(/--graph-capture cannot run on provider cpu/)
    await expect(Engine.load({ modelDir: tinyGqaModelDir(), provider: 'webgpu', runtime: 'js', graphCapture: true })).rejects.toThrow(/--graph-capture cannot run on runtime js/)
    await expect(Engine.load({ modelDir: tinyPlainModelDir(), provider: 'webgpu', graphCapture: true })).rejects.toThrow(/plain-op graph .*--attention gqa/)
  })
})
