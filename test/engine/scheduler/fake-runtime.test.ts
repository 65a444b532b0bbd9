// The scheduler against a fake step runtime (test/helpers/fake-runtime.ts): no ONNX Runtime, so deterministic and
// fast. Its model's next token is a function of each row's whole history, read back from the cache the scheduler
// keeps, so every request's tokens equal the model's alone exactly when the batcher fed every row its tokens at the
// right positions and kept each row's cache intact through prefill chunks, joins, removals and cancellations.
import { afterEach, describe, expect, it } from 'vitest'
import { Engine } from '../../../src/engine/engine.js'
import { runRequest } from '../../helpers/engine-run.js'
import { expected, fakeModel, FAKE_VOCAB, next, type FakeSession } from '../../helpers/fake-runtime.js'

const prompt = (n: number, salt: number): number[] => Array.from({ length: n }, (_, i) => 1 + ((i * 13 + salt * 29) % (FAKE_VOCAB - 1)))

describe('batcher over a fake step runtime', () => {
  let engine: Engine | null = null
  let session: FakeSession
  const start = (opts: Parameters<typeof Engine.over>[1] = {}): Engine => {
    const f = fakeModel()
    session = f.session
    return (engine = Engine.over(f.model, { prefixCaching: false, ...opts }))
  }
  afterEach(async () => {
    await engine?.close()
    engine = null
  })

  it('a request alone gets the model’s tokens', async () => {
    const e = start()
    const got = await runRequest(e, { input_ids: prompt(9, 1), max_tokens: 12, temperature: 0, ignore_eos: true })
    expect(got.ids).toEqual(expected(prompt(9, 1), 12))
    expect(session.log.badPositions).toEqual([])
  })

  it('requests of every length, joining and leaving a running batch, get the tokens each gets alone', async () => {
    const e = start({ maxBatchedTokens: 16 })
    const reqs = Array.from({ length: 14 }, (_, i) => ({ input_ids: prompt(1 + ((i * 7) % 23), i), max_tokens: 2 + ((i * 5) % 11), temperature: 0, ignore_eos: true }))
    // Staggered: each request comes after the previous one's first token, so the batch changes at every step.
    const runs: Promise<number[]>[] = []
    const launch = (i: number): void => {
      if (i >= reqs.length) return
      runs.push(runRequest(e, reqs[i], (n) => n === 1 && launch(i + 1)).then((r) => r.ids))
    }
    launch(0)
    while (runs.length < reqs.length) await new Promise((r) => setTimeout(r, 5))
    const got = await Promise.all(runs)
    expect(got).toEqual(reqs.map((r) => expected(r.input_ids, r.max_tokens)))
    expect(session.log.badPositions).toEqual([])
    // The scheduler did batch, and cut long prompts into chunks within the token budget.
    expect(Math.max(...session.log.steps.map((s) => s.rows))).toBeGreaterThanOrEqual(3)
    expect(session.log.steps.every((s) => s.rows * s.seq <= 16 || s.rows === 1)).toBe(true)
  })

  // On a device cache each prompt is prefilled alone, so the warm-up's rows join one at a time (every power of two of
  // rows: test/engine/webgpu-warmup.int.test.ts); on this host cache its one-token prompts go in one group.
  it('the warm-up (Engine.warmUp, a GPU worker runs it before ready) steps maxRunning rows together and a prompt in chunks up to maxBatchedTokens', async () => {
    const e = start({ maxRunning: 8, maxBatchedTokens: 16 })
    expect(await e.warmUp()).toBe(9)
    expect(session.log.steps.some((s) => s.rows === 8 && s.seq === 1)).toBe(true)
    // The long prompt, 2 x 16 - 1 tokens, alone: chunks of at most 16.
    expect(session.log.steps.filter((s) => s.rows === 1).map((s) => s.seq)).toContain(16)
    expect(Math.max(...session.log.steps.map((s) => s.rows * s.seq))).toBeLessThanOrEqual(16)
    expect(e.stats()).toMatchObject({ running: 0, waiting: 0 })
  })

  it('the warm-up stays within a queue shorter than maxRunning and a KV budget smaller than its prompt', async () => {
    const f = fakeModel()
    session = f.session
    // Room for 40 tokens of one sequence: the prompt is cut to 39 tokens (2 x 64 - 1 would not fit), the rows to the
    // queue's 3.
    const e = (engine = Engine.over(f.model, { prefixCaching: false, maxRunning: 8, maxWaiting: 3, maxBatchedTokens: 64, kvBudgetBytes: 40 * f.model.kvBytesPerToken }))
    expect(await e.warmUp()).toBe(4)
    expect(Math.max(...session.log.steps.map((s) => s.rows))).toBe(3)
    expect(session.log.steps.filter((s) => s.rows === 1).map((s) => s.seq)).toContain(39)
  })

  it('a cancelled row leaves the others’ caches intact', async () => {
    const e = start()
    const a = { input_ids: prompt(5, 3), max_tokens: 20, temperature: 0, ignore_eos: true }
    const b = { input_ids: prompt(8, 4), max_tokens: 20, temperature: 0, ignore_eos: true }
    const c = { input_ids: prompt(3, 5), max_tokens: 20, temperature: 0, ignore_eos: true }
    const rb = runRequest(e, b)
    const ra = runRequest(e, a, (n) => n === 4 && rb.cancel())
    const rc = runRequest(e, c)
    expect((await ra).ids).toEqual(expected(a.input_ids, 20))
    expect((await rc).ids).toEqual(expected(c.input_ids, 20))
    expect((await rb).end.type).toBe('error')
    expect(session.log.badPositions).toEqual([])
  })

  it('a failing step ends the requests in it with a clear error; a request it did not touch, and later ones, are served', async () => {
    // One row at a time: c waits in the queue while a's steps run, so a's failing step does not touch it.
    const e = start({ maxRunning: 1 })
    const a = { input_ids: prompt(4, 6), max_tokens: 30, temperature: 0, ignore_eos: true }
    const c = { input_ids: prompt(5, 9), max_tokens: 6, temperature: 0, ignore_eos: true }
    const failed = runRequest(e, a, (n) => {
      if (n === 3) session.failSteps = 1
    })
    const waiting = runRequest(e, c)
    const end = (await failed).end
    expect(end.type).toBe('error')
    if (end.type === 'error') expect(end.error.message).toMatch(/device lost/)
    expect((await waiting).ids).toEqual(expected(c.input_ids, 6))
    const b = { input_ids: prompt(7, 8), max_tokens: 9, temperature: 0, ignore_eos: true }
    expect((await runRequest(e, b)).ids).toEqual(expected(b.input_ids, 9))
  })

  it('a burst of requests sizes the running cache for all of them at its first step, not as each prefill group joins', async () => {
    // Prompts of 8 in steps of 16 tokens: the burst of 16 joins the batch two at a time.
    const kvAtDecode: number[] = []
    const f = fakeModel()
    session = f.session
    const e = (engine = Engine.over(f.model, { prefixCaching: false, maxBatchedTokens: 16 }, { onStep: (s) => s.phase === 'decode' && kvAtDecode.push(e.stats().kvUsedBytes) }))
    const reqs = Array.from({ length: 16 }, (_, i) => ({ input_ids: prompt(8, i), max_tokens: 4, temperature: 0, ignore_eos: true }))
    const got = await Promise.all(reqs.map((r) => runRequest(e, r).then((x) => x.ids)))
    expect(got).toEqual(reqs.map((r) => expected(r.input_ids, 4)))
    expect(Math.max(...session.log.steps.filter((s) => s.seq > 1).map((s) => s.rows))).toBeLessThanOrEqual(2)
    // Two tensors (key, value) of one float per token, 16 rows of 8 + 4 slots at least.
    expect(kvAtDecode[0]).toBeGreaterThanOrEqual(2 * 16 * 12 * 4)
  })

  describe('speculative decoding (n-gram drafts checked in the step)', () => {
    // A model that repeats its input with a period of 5: after a few tokens every n-gram draft is right.
    const periodic = (h: readonly number[]): number => (h.length >= 5 ? h[h.length - 5] : 1 + ((h.length * 7) % (FAKE_VOCAB - 1)))
    const startSpec = (speculativeTokens: number, next = periodic, speculativeMaxRows = 64): { e: Engine; steps: Array<{ drafted?: number; accepted?: number; tokens: number; batch: number }> } => {
      const f = fakeModel({ next, greedy: true })
      session = f.session
      const steps: Array<{ drafted?: number; accepted?: number; tokens: number; batch: number }> = []
      engine = Engine.over(f.model, { prefixCaching: false, speculativeTokens, speculativeMaxRows }, { onStep: (s) => s.phase === 'decode' && steps.push(s) })
      return { e: engine, steps }
    }

    it('gives the tokens decoding one at a time gives, in fewer steps, where drafts are right', async () => {
      const req = { input_ids: prompt(12, 2), max_tokens: 40, temperature: 0, ignore_eos: true }
      const { e, steps } = startSpec(4)
      const got = await runRequest(e, req)
      expect(got.ids).toEqual(expected(req.input_ids, 40, periodic))
      expect(session.log.badPositions).toEqual([])
      const drafted = steps.reduce((n, s) => n + (s.drafted ?? 0), 0)
      const accepted = steps.reduce((n, s) => n + (s.accepted ?? 0), 0)
      expect(accepted).toBeGreaterThan(20)
      expect(accepted).toBeLessThanOrEqual(drafted)
      // 39 tokens after the first (which prefill gives): one per step plus each step's accepted drafts.
      expect(steps.length).toBe(39 - accepted)
    })

    it('keeps every row’s cache right when drafts are wrong, in a changing batch', async () => {
      // The hash model never repeats: drafts (from chance repeats) are mostly wrong and rolled back.
      const { e, steps } = startSpec(3, next)
      const reqs = Array.from({ length: 8 }, (_, i) => ({ input_ids: [...prompt(6, i), ...prompt(6, i)], max_tokens: 6 + i * 3, temperature: 0, ignore_eos: true }))
      const got = await Promise.all(reqs.map((r) => runRequest(e, r).then((x) => x.ids)))
      expect(got).toEqual(reqs.map((r) => expected(r.input_ids, r.max_tokens)))
      expect(session.log.badPositions).toEqual([])
      // Drafts were made (the prompts repeat) and some were wrong.
      const drafted = steps.reduce((n, s) => n + (s.drafted ?? 0), 0)
      const accepted = steps.reduce((n, s) => n + (s.accepted ?? 0), 0)
      expect(drafted).toBeGreaterThan(accepted)
    })

    it('mixes rows with periodic output and rows sampled at a temperature: no drafts in steps with a sampled row', async () => {
      const { e, steps } = startSpec(4)
      const greedy = { input_ids: prompt(10, 7), max_tokens: 30, temperature: 0, ignore_eos: true }
      const sampled = { input_ids: prompt(10, 8), max_tokens: 10, temperature: 1, seed: 3, ignore_eos: true }
      const [g] = await Promise.all([runRequest(e, greedy), runRequest(e, sampled)])
      expect(g.ids).toEqual(expected(greedy.input_ids, 30, periodic))
      expect(steps.filter((s) => s.batch === 2).every((s) => !s.drafted)).toBe(true)
      expect(steps.some((s) => (s.accepted ?? 0) > 0)).toBe(true)
    })

    it('drafts only while at most speculativeMaxRows rows run', async () => {
      const { e, steps } = startSpec(4, periodic, 2)
      const reqs = Array.from({ length: 4 }, (_, i) => ({ input_ids: prompt(10, 20 + i), max_tokens: 12 + 6 * i, temperature: 0, ignore_eos: true }))
      const got = await Promise.all(reqs.map((r) => runRequest(e, r).then((x) => x.ids)))
      expect(got).toEqual(reqs.map((r) => expected(r.input_ids, r.max_tokens, periodic)))
      expect(steps.some((s) => s.batch > 2)).toBe(true)
      expect(steps.filter((s) => s.batch > 2).every((s) => !s.drafted)).toBe(true)
      expect(steps.some((s) => s.batch <= 2 && (s.accepted ?? 0) > 0)).toBe(true)
    })

    it('never drafts past max_tokens', async () => {
      const { e, steps } = startSpec(8)
      const req = { input_ids: prompt(12, 4), max_tokens: 7, temperature: 0, ignore_eos: true }
      const got = await runRequest(e, req)
      expect(got.ids).toEqual(expected(req.input_ids, 7, periodic))
      // A step yields its own pick and the draft tokens accepted: it drafts no more than may follow that pick.
      let generated = 1
      for (const s of steps) {
        expect(s.drafted ?? 0).toBeLessThanOrEqual(7 - generated - 1)
        generated += 1 + (s.accepted ?? 0)
      }
      // The last step may end on an accepted draft token, which then brings no pick of its own.
      expect(generated).toBeGreaterThanOrEqual(7)
      expect(generated).toBeLessThanOrEqual(8)
      expect(steps.some((s) => (s.drafted ?? 0) > 0)).toBe(true)
    })
  })
})
