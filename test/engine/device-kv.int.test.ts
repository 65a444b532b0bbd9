// The KV cache on the device (issue #33): the C-API runtime on WebGPU keeps the cache in GPU memory
// (model/device-kv.ts), for GroupQueryAttention graphs (presents appended in place) and plain-op ones (new rows
// scattered into the slots by a second graph). Per decode step only ids, positions, lengths (a plain graph's mask and
// scatter index) and the next tokens (or logits) cross, whatever the context; the cache is allocated once while
// requests join and leave; greedy and sampled steps (logits leave the device) give the CPU's tokens and
// log-probabilities, alone and in a batch that requests join and leave; a prompt that starts as an earlier one copies
// that start from the slot that keeps it. Lavapipe stands in for a GPU on CPU-only machines (.ci/lavapipe); skipped,
// saying why, where no WebGPU adapter exists.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildModel } from '../../src/builder/index.js'
import { Engine } from '../../src/engine/engine.js'
import type { Signature } from '../../src/engine/model/step-io.js'
import type { StepObservation } from '../../src/engine/types.js'
import { tinyGqaModelDir, tinyPlainModelDir } from '../helpers/fixtures.js'
import { logprobsOf as logprobs, runJoining, runRequest, type RunResult } from '../helpers/engine-run.js'
import { noWebgpu, webgpuTitle } from '../helpers/webgpu.js'

const SLOW = { timeout: 300_000 }
const prompt = (n: number, salt: number, vocab: number): number[] => Array.from({ length: n }, (_, i) => (i * 31 + salt * 17 + 3) % vocab)

/**
 * The graph forms, and the bytes a batch-1 greedy decode step hands ORT, whatever the cache's cap: an int64 id and
 * position (where the graph takes one) and the int64 position whose logits the step computes in; then
 * GroupQueryAttention's int32 length and total, or a plain graph's int32 slot length, mask width and first new column
 * (the graph builds its mask from them: decoder-graph.ts maskFromLengths) and scatter index (an int64 triple per kv
 * head).
 */
const idsAndPositions = (sig: Signature): number => 8 + (sig.positions ? 8 : 0)
const FORMS = [
  { name: 'GroupQueryAttention', dir: tinyGqaModelDir, stepIn: (sig: Signature) => idsAndPositions(sig) + 8 + 4 + 4 },
  { name: 'plain', dir: tinyPlainModelDir, stepIn: (sig: Signature) => idsAndPositions(sig) + 8 + 4 + 4 + 4 + sig.kv.heads * 3 * 8 },
]

describe.skipIf(noWebgpu !== null)(webgpuTitle('KV cache on the device (webgpu, runtime capi)'), () => {
  for (const form of FORMS) {
    describe(form.name, () => {
      let cpu: Engine
      let gpu: Engine
      const steps: StepObservation[] = []
      beforeAll(async () => {
        cpu = await Engine.load({ modelDir: form.dir() })
        gpu = await Engine.load({ modelDir: form.dir(), provider: 'webgpu' }, { onStep: (s) => steps.push(s) })
      }, 300_000)
      afterAll(async () => {
        await cpu?.close()
        await gpu?.close()
      })

      it("keeps the cache in GPU memory, as ORT reports it, and gives the CPU's greedy tokens alone", SLOW, async () => {
        expect(gpu.model.session.deviceResident).toBe(true)
        expect(cpu.model.session.deviceCache()).toBeNull()
        const req = { input_ids: prompt(6, 1, gpu.model.vocab), max_tokens: 30, temperature: 0, ignore_eos: true }
        const want = await runRequest(cpu, req)
        const run = runRequest(gpu, req, (n) => {
          if (n === 2) {
            const c = gpu.model.session.deviceCache()!
            expect(c.memory).toBe('gpu')
            expect(c.slots).toBeGreaterThanOrEqual(1)
            expect(c.cap).toBeGreaterThanOrEqual(6 + 30)
          }
        })
        const got = await run
        expect(got.end.type).toBe('done')
        expect(got.ids).toEqual(want.ids)
      })

      it('a decode step moves the same few bytes at any context: ids, positions and lengths in, next tokens out', SLOW, async () => {
        const V = gpu.model.vocab
        const at = async (n: number): Promise<StepObservation[]> => {
          steps.length = 0
          await runRequest(gpu, { input_ids: prompt(n, 2, V), max_tokens: 6, temperature: 0, ignore_eos: true })
          return steps.filter((s) => s.phase === 'decode' && s.batch === 1)
        }
        const short = await at(4)
        const long = await at(200)
        expect(short.length).toBeGreaterThanOrEqual(4)
        const bytes = new Set([...short, ...long].map((s) => `${s.bytesIn}/${s.bytesOut}`))
        expect([...bytes]).toHaveLength(1)
        // One int64 token out; in, what FORMS says: nothing of the cache.
        expect(short[0]!.bytesOut).toBe(8)
        expect(short[0]!.bytesIn).toBe(form.stepIn(gpu.model.session.signature))
      })

      it('allocates its cache once while requests join and leave', SLOW, async () => {
        const V = gpu.model.vocab
        const wave = (salt: number): Promise<unknown> =>
          Promise.all([3, 7, 5].map((n, i) => runRequest(gpu, { input_ids: prompt(n, salt + i, V), max_tokens: 4 + 3 * i, temperature: 0, ignore_eos: true })))
        await wave(10)
        const first = gpu.model.session.deviceCache()!.allocations
        for (let w = 0; w < 3; w++) await wave(20 + 10 * w)
        expect(gpu.model.session.deviceCache()!.allocations).toBe(first)
      })

      it("steps that read logits (log-probabilities asked for) give the CPU's tokens, in a batch", SLOW, async () => {
        const V = gpu.model.vocab
        const reqs = [5, 9, 2].map((n, i) => ({ input_ids: prompt(n, 40 + i, V), max_tokens: 6, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2 }))
        const want = await Promise.all(reqs.map((r) => runRequest(cpu, r).then((x) => x.ids)))
        steps.length = 0
        const got = await Promise.all(reqs.map((r) => runRequest(gpu, r).then((x) => x.ids)))
        expect(got).toEqual(want)
        const decode = steps.filter((s) => s.phase === 'decode')
        expect(Math.max(...decode.map((s) => s.batch))).toBeGreaterThanOrEqual(2)
        // Logits leave the device: a row of vocab floats per row of the step (its slots), nothing of the cache.
        for (const s of decode) expect(s.bytesOut % (V * 4)).toBe(0)
      })

      it('keeps the prompts rows joined with in their slots: a prompt that starts the same way copies that start on the device', SLOW, async () => {
        const V = gpu.model.vocab
        const shared = prompt(40, 60, V)
        const a = { input_ids: [...shared, 7], max_tokens: 12, temperature: 0, ignore_eos: true }
        const b = { input_ids: prompt(9, 61, V), max_tokens: 40, temperature: 0, ignore_eos: true }
        const c = { input_ids: [...shared, 8, 9], max_tokens: 6, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 1 }
        const want = await Promise.all([a, b, c].map((r) => runRequest(cpu, r).then((x) => x.ids)))
        // The same request on the device without prefix caching: its log-probabilities are what a copied start must give.
        const fresh = await Engine.load({ modelDir: form.dir(), provider: 'webgpu', prefixCaching: false })
        const ref = await runRequest(fresh, c).finally(() => fresh.close())
        // a joins first (slot 0), b beside it (slot 1) while a runs; a ends while b runs, so slot 0 rides along b's steps
        // as a dummy row, which must write after a's prompt, not over it; c comes once b has stepped on without a.
        const pa = runRequest(gpu, a)
        let rc: Promise<RunResult> | null = null
        const rb = runRequest(gpu, b, (n) => n === 30 && (rc = runRequest(gpu, c)))
        expect((await pa).ids).toEqual(want[0])
        expect((await rb).ids).toEqual(want[1])
        const gotC = await rc!
        expect(gotC.ids).toEqual(want[2])
        expect(gotC.end.type === 'done' && gotC.end.usage.prompt_tokens_details?.cached_tokens).toBe(32)
        expect(logprobs(gotC)).toHaveLength(12)
        expect(logprobs(gotC).map((v, i) => Math.abs(v - logprobs(ref)[i]))).toEqual(Array.from({ length: 12 }, () => expect.closeTo(0, 5)))
      })

      it("in a batch that requests join and leave, gives each its tokens and log-probabilities alone on the CPU", SLOW, async () => {
        const V = gpu.model.vocab
        const lp = { temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2 }
        const main = { input_ids: prompt(9, 70, V), max_tokens: 14, ...lp }
        const early = { input_ids: prompt(3, 71, V), max_tokens: 3, ...lp }
        const joiners = [
          { input_ids: prompt(13, 72, V), max_tokens: 5, ...lp },
          { input_ids: prompt(21, 73, V), max_tokens: 8, ...lp },
        ]
        const want = await Promise.all([main, early, ...joiners].map((r) => runRequest(cpu, r)))
        steps.length = 0
        // Joiners come while main runs (the early request has left by then or soon after) and leave before it.
        const all = await runJoining(gpu, main, early, joiners, [4, 6])
        expect(all.map((x) => x.ids)).toEqual(want.map((x) => x.ids))
        all.forEach((x, i) => {
          const w = logprobs(want[i])
          expect(logprobs(x)).toHaveLength(w.length)
          // fp32 on both: within 5e-5 (measured about 4e-7 on lavapipe).
          expect(logprobs(x).map((v, k) => Math.abs(v - w[k]))).toEqual(w.map(() => expect.closeTo(0, 4)))
        })
        expect(Math.max(...steps.filter((s) => s.phase === 'decode').map((s) => s.batch))).toBeGreaterThanOrEqual(2)
      })
    })
  }

  describe('plain, float16 and 4-bit weights', () => {
    let dir = ''
    beforeAll(async () => {
      dir = (await buildModel({ preset: 'tiny', outDir: join(mkdtempSync(join(tmpdir(), 'onnxd-device-kv-')), 'plain'), attention: 'plain', dtypes: ['fp16', 'q4'] })).dir
    }, 300_000)
    afterAll(() => rmSync(dir, { recursive: true, force: true }))

    for (const dtype of ['fp16', 'q4'] as const) {
      it(`${dtype}: a batch gives the CPU's tokens, log-probabilities within 5e-3`, SLOW, async () => {
        const cpu = await Engine.load({ modelDir: dir, dtype })
        const gpu = await Engine.load({ modelDir: dir, dtype, provider: 'webgpu' })
        try {
          expect(gpu.model.session.deviceResident).toBe(true)
          const V = cpu.model.vocab
          const reqs = [7, 30].map((n, i) => ({ input_ids: prompt(n, 80 + i, V), max_tokens: 8, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2 }))
          const want = await Promise.all(reqs.map((r) => runRequest(cpu, r)))
          const got = await Promise.all(reqs.map((r) => runRequest(gpu, r)))
          expect(got.map((x) => x.ids)).toEqual(want.map((x) => x.ids))
          // Measured on lavapipe: at most 2.9e-3 (fp16) and 3.0e-3 (q4), as the JS API on webgpu gives.
          got.forEach((x, i) => expect(logprobs(x).map((v, k) => Math.abs(v - logprobs(want[i])[k]))).toEqual(logprobs(want[i]).map(() => expect.closeTo(0, 2))))
        } finally {
          await cpu.close()
          await gpu.close()
        }
      })
    }
  })
})
