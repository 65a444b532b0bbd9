// runtime 'capi' (capi-session.ts): the engine's steps through ORT's C API give the JS API's tokens and logits, on
// the tiny default model (plain attention) and its GroupQueryAttention build, alone and in a batch of different
// lengths; an ORT failure on the C path ends the affected requests with an error event; and decode step times of
// both paths at batch 1 and 16 (printed, not asserted).
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Engine } from '../../../src/engine/engine.js'
import type { ForwardInput } from '../../../src/engine/model/step-io.js'
import { Binding } from '../../../src/engine/model/ort-capi.js'
import { runRequest } from '../../helpers/engine-run.js'
import { tinyPlainModelDir, tinyGqaModelDir } from '../../helpers/fixtures.js'

const prompt = (n: number, salt: number, vocab: number): number[] => Array.from({ length: n }, (_, i) => (i * 31 + salt * 17 + 3) % vocab)

let root: string
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'onnxd-capi-'))
})
afterAll(async () => {
  await rm(root, { recursive: true, force: true })
})

const MODELS = [
  { name: 'tiny (plain attention)', dir: () => tinyPlainModelDir(), gqa: false },
  { name: 'tiny (GroupQueryAttention, in-place present)', dir: tinyGqaModelDir, gqa: true },
]

for (const m of MODELS) {
  describe(`runtime capi: ${m.name}`, () => {
    let js: Engine
    let capi: Engine
    beforeAll(async () => {
      js = await Engine.load({ modelDir: m.dir(), intraOpThreads: 1, runtime: 'js' })
      capi = await Engine.load({ modelDir: m.dir(), intraOpThreads: 1, runtime: 'capi' })
    })
    afterAll(async () => {
      await js?.close()
      await capi?.close()
    })

    it('runs on the C API or the JS API as asked', () => {
      expect(js.model.session.runtime).toBe('js')
      expect(capi.model.session.runtime).toBe('capi')
    })

    it('gives the JS path greedy tokens, alone and in a batch of different lengths', async () => {
      const V = js.model.vocab
      const reqs = [11, 3, 25, 7].map((n, i) => ({ input_ids: prompt(n, i + 1, V), max_tokens: 12 + 3 * i, temperature: 0, ignore_eos: true }))
      const alone = await runRequest(js, reqs[0])
      const aloneC = await runRequest(capi, reqs[0])
      expect(aloneC.end.type).toBe('done')
      expect(aloneC.ids).toEqual(alone.ids)
      const want = await Promise.all(reqs.map((r) => runRequest(js, r)))
      const got = await Promise.all(reqs.map((r) => runRequest(capi, r)))
      for (let i = 0; i < reqs.length; i++) {
        expect(got[i].end.type).toBe('done')
        expect(got[i].ids).toEqual(want[i].ids)
      }
      expect(got[0].ids).toEqual(alone.ids)
      // GroupQueryAttention decode steps write their presents into the engine's cache itself; plain graphs never.
      const shared = (capi.model.session as unknown as { capi: { sharedSteps: number } }).capi.sharedSteps
      if (m.gqa) expect(shared).toBeGreaterThan(20)
      else expect(shared).toBe(0)
    })

    // Only GroupQueryAttention graphs share past and present.
    if (m.gqa)
      it('writes every step of a request into the cache in place, its prefill included', async () => {
        const runner = (capi.model.session as unknown as { capi: { sharedSteps: number } }).capi
        const before = runner.sharedSteps
        const r = await runRequest(capi, { input_ids: prompt(6, 9, capi.model.vocab), max_tokens: 12, temperature: 0, ignore_eos: true })
        expect(r.ids).toHaveLength(12)
        // One prefill step (its first token) and 11 decode steps: the cache makes room before each (KvCache.makeRoom).
        expect(runner.sharedSteps - before).toBe(12)
      })

    it('gives the JS path greedy tokens when rows join and leave while others decode', async () => {
      const V = js.model.vocab
      // Each request starts when the previous one has produced a few tokens: the batch changes every few steps.
      const staggered = async (e: Engine): Promise<number[][]> => {
        const lens = [9, 2, 17, 5, 12]
        const runs: Array<Promise<{ ids: number[] }>> = []
        const start = (i: number): void => {
          runs.push(runRequest(e, { input_ids: prompt(lens[i], i + 5, V), max_tokens: 8 + 5 * ((i * 3) % 4), temperature: 0, ignore_eos: true }, (k) => k === 3 && i + 1 < lens.length && start(i + 1)))
        }
        start(0)
        const out: number[][] = []
        for (let i = 0; i < runs.length; i++) out.push((await runs[i]).ids)
        return out
      }
      const want = await staggered(js)
      const got = await staggered(capi)
      expect(got).toHaveLength(5)
      expect(got).toEqual(want)
    })

    it('admits a request that comes in through the event loop while others decode, as a worker receives one', async () => {
      const V = capi.model.vocab
      const done: string[] = []
      let late: Promise<unknown> | null = null
      const first = runRequest(capi, { input_ids: prompt(5, 1, V), max_tokens: 60, temperature: 0, ignore_eos: true }, (k) => {
        // From a timer, as a message port delivers: the engine must give the event loop a turn between
        // steps (a step that ran on this thread would not), or the request waits until the running one has finished.
        if (k === 3)
          setTimeout(() => {
            late = runRequest(capi, { input_ids: prompt(4, 2, V), max_tokens: 2, temperature: 0, ignore_eos: true }).then((r) => done.push(`late ${r.end.type}`))
          }, 0)
      }).then((r) => done.push(`first ${r.end.type}`))
      await first
      await late
      expect(done).toEqual(['late done', 'first done'])
    })

    it('makes no tensor in steady decode steps: what stays bound stays bound', async () => {
      const runner = (capi.model.session as unknown as { capi: { tensorsMade: number } }).capi
      const V = capi.model.vocab
      const made: number[] = []
      // 6 + 40 tokens stay within one KV chunk (64 slots): the cache's buffers and dims do not change.
      const r = await runRequest(capi, { input_ids: prompt(6, 2, V), max_tokens: 40, temperature: 0, ignore_eos: true }, () => made.push(runner.tensorsMade))
      expect(r.end.type).toBe('done')
      expect(made.length).toBeGreaterThan(30)
      expect(made[made.length - 1]).toBe(made[2])
    })

    it('gives the JS path logits for a prefill and a decode step over the engine cache (forward)', async () => {
      const a = js.model.session
      const b = capi.model.session
      const V = js.model.vocab
      const ids = Int32Array.from(prompt(5, 9, V))
      const x: ForwardInput = { rows: 1, seq: 5, pastLen: 0, ids, mask: new Uint8Array(5).fill(1), positions: Int32Array.from([0, 1, 2, 3, 4]), past: a.emptyPast(1) }
      const ra = await a.forward(x, [4])
      const la = ra.logits.slice()
      const rb = await b.forward({ ...x, past: b.emptyPast(1) }, [4])
      expect(rb.present.map((t) => t.dims)).toEqual(ra.present.map((t) => t.dims))
      let max = 0
      for (let i = 0; i < V; i++) max = Math.max(max, Math.abs(la[i] - rb.logits[i]))
      expect(max).toBeLessThan(1e-4)
      for (let i = 0; i < ra.present.length; i++) {
        const p = ra.present[i].data
        const q = rb.present[i].data
        let d = 0
        for (let k = 0; k < p.length; k++) d = Math.max(d, Math.abs(p[k] - q[k]))
        expect(d).toBeLessThan(1e-4)
      }
    })

    it('ends the affected requests with an error event when ORT fails on the C path, and serves again after', async () => {
      const V = capi.model.vocab
      const session = capi.model.session as unknown as { capi: { run: (...a: unknown[]) => Promise<unknown> } }
      const runner = session.capi
      const real = runner.run.bind(runner)
      let fail = true
      // A token id past the vocabulary: ORT's Gather answers RunWithBinding with an error status.
      runner.run = (x: unknown, ...rest: unknown[]) => real(fail ? { ...(x as ForwardInput), ids: (x as ForwardInput).ids.map(() => V + 1000) } : x, ...rest)
      try {
        const r = await runRequest(capi, { input_ids: prompt(4, 3, V), max_tokens: 4, temperature: 0, ignore_eos: true })
        expect(r.end.type).toBe('error')
      } finally {
        fail = false
        runner.run = real
      }
      const ok = await runRequest(capi, { input_ids: prompt(4, 3, V), max_tokens: 4, temperature: 0, ignore_eos: true })
      expect(ok.end.type).toBe('done')
      expect(ok.ids).toHaveLength(4)
    })
  })
}

describe('runtime capi: the native-call gate and the fallback', () => {
  let e: Engine
  beforeAll(async () => {
    e = await Engine.load({ modelDir: tinyPlainModelDir(), intraOpThreads: 1, runtime: 'capi' })
  })
  afterAll(() => e?.close())

  it('holds the gate around the native run of every step, and lets it go when the step returns', async () => {
    const session = e.model.session
    let held = 0
    let enters = 0
    const seen: number[] = []
    session.gate = {
      enter: () => {
        enters++
        held++
        return true
      },
      exit: () => {
        held--
      },
    }
    // The run blocks this thread inside ORT: that is the stretch the pool must not terminate the thread in.
    const run = Binding.prototype.run
    Binding.prototype.run = function (this: Binding) {
      seen.push(held)
      run.call(this)
    }
    try {
      const r = await runRequest(e, { input_ids: [5, 6, 7], max_tokens: 3, temperature: 0, ignore_eos: true })
      expect(r.end.type).toBe('done')
    } finally {
      Binding.prototype.run = run
      session.gate = null
    }
    expect(enters).toBe(3) // one prefill and two decode steps
    expect(seen).toEqual([1, 1, 1])
    expect(held).toBe(0)
  })

  it('refuses a step when the gate is stopped (the thread is about to be terminated): the request ends with an error', async () => {
    e.model.session.gate = { enter: () => false, exit: () => expect.unreachable('exit without enter') }
    try {
      const r = await runRequest(e, { input_ids: [5, 6, 7], max_tokens: 3, temperature: 0, ignore_eos: true })
      expect(r.end.type).toBe('error')
      // The batcher reports a failed step as internal, with the step's message.
      if (r.end.type === 'error') expect(r.end.error.message).toContain('being stopped')
    } finally {
      e.model.session.gate = null
    }
  })

  it("falls back to 'js', with one warning, where the library cannot load", async () => {
    const warnings: string[] = []
    const onWarning = (w: Error): void => {
      if ((w as Error & { code?: string }).code === 'ONNXD_CAPI_UNAVAILABLE') warnings.push(w.message)
    }
    process.on('warning', onWarning)
    const opts = { modelDir: tinyPlainModelDir(), intraOpThreads: 1, runtime: 'capi' as const, capiLibraryPath: join(root, 'no-libonnxruntime.so') }
    const a = await Engine.load(opts)
    const b = await Engine.load(opts)
    try {
      expect(a.model.session.runtime).toBe('js')
      expect(b.model.session.runtime).toBe('js')
      const want = await runRequest(e, { input_ids: [9, 8, 7], max_tokens: 6, temperature: 0, ignore_eos: true })
      const got = await runRequest(a, { input_ids: [9, 8, 7], max_tokens: 6, temperature: 0, ignore_eos: true })
      expect(got.ids).toEqual(want.ids)
      await new Promise((r) => setImmediate(r))
      expect(warnings).toHaveLength(1)
      expect(warnings[0]).toContain('no-libonnxruntime.so')
    } finally {
      process.off('warning', onWarning)
      await a.close()
      await b.close()
    }
  })
})

describe('runtime capi: decode steps on the tiny model (their times printed, not asserted)', () => {
  it('decodes every token after the first in steps that reach the whole batch (1 and 16), on both runtimes, plain and GQA', async () => {
    const lines: string[] = []
    for (const m of MODELS)
    for (const runtime of ['js', 'capi'] as const) {
      for (const batch of [1, 16]) {
        const secs: number[] = []
        const rows: number[] = []
        const onStep = (s: { phase: string; batch: number; seconds: number }): void => {
          if (s.phase !== 'decode') return
          rows.push(s.batch)
          if (s.batch === batch) secs.push(s.seconds)
        }
        const e = await Engine.load({ modelDir: m.dir(), intraOpThreads: 1, runtime }, { onStep })
        try {
          const V = e.model.vocab
          await Promise.all(Array.from({ length: batch }, (_, i) => runRequest(e, { input_ids: prompt(8, i, V), max_tokens: 40, temperature: 0, ignore_eos: true })))
        } finally {
          await e.close()
        }
        // 40 tokens each: the first from its prefill, the other 39 from decode steps, which reach the whole batch.
        expect(rows.reduce((a, b) => a + b, 0), `${m.name} ${runtime} batch ${batch}`).toBe(39 * batch)
        expect(Math.max(...rows), `${m.name} ${runtime} batch ${batch}`).toBe(batch)
        const s = secs.slice(5).sort((a, b) => a - b)
        lines.push(`${m.gqa ? 'gqa  ' : 'plain'} ${runtime.padEnd(4)} batch ${batch}: median ${(s[Math.floor(s.length / 2)] * 1000).toFixed(3)} ms over ${s.length} steps`)
      }
    }
    console.log(`decode step, tiny model, intraOpThreads 1:\n  ${lines.join('\n  ')}`)
  }, 60_000)
})
