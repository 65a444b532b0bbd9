// The piscina engine pool: workers load the model, stream tokens, survive a crashed worker, and report a stalled
// step loop as unhealthy; at start-up it is ready only once every worker is.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEnginePool } from '../../../src/engine/pool/pool.js'
import type { EngineClient, EngineRequest, SeqEvent } from '../../../src/engine/index.js'
import { fixture, haveFixtures } from '../../helpers/fixtures.js'
import { deferred } from '../../helpers/deferred.js'

function collect(pool: EngineClient, req: Partial<EngineRequest>, onEvent?: (e: SeqEvent) => void): Promise<SeqEvent[]> {
  const events: SeqEvent[] = []
  return new Promise((resolve) => {
    pool.submit({ model: 'stories260K-hf', request_id: 'r', prompt: 'Once upon a time', ...req } as EngineRequest, (e) => {
      events.push(e)
      onEvent?.(e)
      if (e.type === 'done' || e.type === 'error') resolve(events)
    })
  })
}

async function until(cond: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const t0 = Date.now()
  while (!cond()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

describe.skipIf(!haveFixtures)('engine pool', () => {
  let pool: EngineClient
  let restarts = 0
  beforeAll(async () => {
    pool = createEnginePool(
      { modelDir: fixture('stories260K-hf'), workers: 1, intraOpThreads: 1, heartbeatTimeoutMs: 1000, faultInjection: true },
      { onWorkerRestart: () => restarts++ },
    )
    await pool.ready()
  })
  afterAll(() => pool.close())

  it('is ready with the model loaded and streams a completion from a worker thread', async () => {
    const h = pool.health()
    expect(h.status).toBe('ready')
    // Capacity as soon as it is ready (a router's first poll must not see a full node).
    expect(h.capacity).toBeGreaterThan(0)
    expect(h.freeSlots).toBeGreaterThan(0)
    expect(h.model).toBe('stories260K-hf')
    expect(h.provider).toBe('cpu')
    expect(h.workers).toHaveLength(1)
    const events = await collect(pool, { max_tokens: 12, temperature: 0 })
    expect(events[0].type).toBe('accepted')
    const end = events[events.length - 1]
    expect(end.type).toBe('done')
    expect(events.filter((e) => e.type === 'token').length).toBe(11)
  })

  it('a crashed worker fails its in-flight requests with worker_crashed, is replaced, and the pool serves again', async () => {
    const started = deferred<void>()
    const inflight = collect(pool, { max_tokens: 500, temperature: 0, ignore_eos: true }, (e) => e.type === 'token' && started.resolve())
    await started.promise
    await pool.inject!({ kind: 'crash' })
    const events = await inflight
    const end = events[events.length - 1]
    expect(end.type === 'error' && end.error.code).toBe('worker_crashed')
    await until(() => restarts === 1 && pool.health().status === 'ready', 'the replacement worker')
    expect(pool.health().restarts).toBe(1)
    const again = await collect(pool, { max_tokens: 5, temperature: 0 })
    expect(again[again.length - 1].type).toBe('done')
  })

  it('a stalled step loop turns the pool unhealthy, and ready again when it recovers, on the same worker', async () => {
    const before = pool.health()
    const stall = pool.inject!({ kind: 'stall', ms: 2500 })
    await until(() => pool.health().status === 'unhealthy', 'unhealthy')
    // Unhealthy because its one worker's step loop has shown no life past the heartbeat timeout (1 s here).
    const stalled = pool.health()
    expect(stalled.workers.map((w) => w.threadId)).toEqual(before.workers.map((w) => w.threadId))
    expect(stalled.workers[0]!.heartbeatAgeMs).toBeGreaterThan(1000)
    await stall
    await until(() => pool.health().status === 'ready', 'ready again')
    // Recovered, not replaced (a stall shorter than the stall timeout): the same thread, no restart, and it serves.
    const after = pool.health()
    expect(after.workers.map((w) => w.threadId)).toEqual(before.workers.map((w) => w.threadId))
    expect(after.restarts).toBe(before.restarts)
    const events = await collect(pool, { max_tokens: 3, temperature: 0 })
    expect(events[events.length - 1]!.type).toBe('done')
  })

  it('a draining pool refuses new requests with not_ready', async () => {
    pool.drain()
    expect(pool.health().status).toBe('draining')
    const events = await collect(pool, { max_tokens: 2 })
    const end = events[events.length - 1]
    expect(end.type === 'error' && end.error.code).toBe('not_ready')
  })
})

describe.skipIf(!haveFixtures)('engine pool start-up', () => {
  it('says loading until every worker has loaded the model, as ready() waits, then ready', async () => {
    const pool = createEnginePool({ modelDir: fixture('stories260K-hf'), workers: 2, intraOpThreads: 1 })
    const seen: { status: string; ready: number; total: number; configured: number }[] = []
    const look = (): void => {
      const h = pool.health()
      seen.push({ status: h.status, ready: h.workers.filter((w) => w.ready).length, total: h.workers.length, configured: h.configuredWorkers })
    }
    const poll = setInterval(look, 2)
    try {
      await pool.ready()
      clearInterval(poll)
      look()
      expect(seen.at(-1)).toEqual({ status: 'ready', ready: 2, total: 2, configured: 2 })
      // Never ready before both workers were: a router would otherwise send work while one still loads.
      for (const s of seen) if (s.status === 'ready') expect(s.ready).toBe(2)
      expect(seen[0]!.status).toBe('loading')
      // What /health's workers.total and onnxd_workers report: the configured count from the start, so that a
      // dashboard sees ready below it while the workers load.
      expect(seen[0]!.ready).toBeLessThan(2)
      for (const s of seen) expect(s.configured).toBe(2)
    } finally {
      clearInterval(poll)
      await pool.close()
    }
  })
})
