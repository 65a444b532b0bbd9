// Issue #32, part 6: `n` cannot let one key take the node. Through the real facade and node (tiny default model, one
// worker with 4 running slots): one key's requests with n = 16 hold its 32 sequences and the next is refused with 429
// and Retry-After, and the node admits another key's stream after one turn of the flood, not behind all of it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { FastifyInstance } from 'fastify'
import { buildNode } from '../../src/node/app.js'
import { createEnginePool } from '../../src/engine/pool/pool.js'
import type { EngineClient } from '../../src/engine/index.js'
import { tinyPlainModelDir } from '../helpers/fixtures.js'
import { facadeFixture, sseEvents, type FacadeFixture } from '../helpers/facade.js'
import { listen, testOptions } from '../node/helpers.js'

async function until(cond: () => boolean, what: string, detail = (): string => '', timeoutMs = 30_000): Promise<void> {
  const t0 = Date.now()
  while (!cond()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}${detail()}`)
    await new Promise((r) => setTimeout(r, 10))
  }
}

describe('an n flood against the real facade and node', () => {
  let node: FastifyInstance
  let engine: EngineClient
  let f: FacadeFixture
  let baseURL: string
  let finished = 0
  beforeAll(async () => {
    engine = createEnginePool({ modelDir: tinyPlainModelDir(), modelId: 'onnxd-tiny', workers: 1, intraOpThreads: 1, maxRunning: 4 }, { onFinish: () => finished++ })
    node = buildNode(testOptions(), { engine })
    const nodeUrl = await listen(node)
    await engine.ready()
    f = await facadeFixture({ nodeUrls: [nodeUrl], options: { keyRpm: 0, fleetRpm: 0, keyMaxSequences: 32 }, deps: { pollHealth: true } })
    baseURL = `${await f.app.listen({ port: 0, host: '127.0.0.1' })}/v1`
    await until(() => f.app.facade.router.snapshot().some((n) => n.status === 'ready'), 'the facade to see the node ready')
  })
  afterAll(async () => {
    await f?.close()
    await node?.close()
    await engine?.close()
  })

  const send = async (key: string, body: Record<string, unknown>): Promise<{ status: number; retryAfter: string | null; body: string }> => {
    const res = await fetch(`${baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'onnxd-tiny', temperature: 0, ignore_eos: true, ...body }),
    })
    return { status: res.status, retryAfter: res.headers.get('retry-after'), body: await res.text() }
  }

  it("refuses the flooding key past its bound with 429 and Retry-After, and admits another key's stream after one turn of the flood", async () => {
    const flooder = f.key
    const other = await f.newKey((await f.newAccount()).id)
    const flood = { messages: [{ role: 'user', content: 'tell me a long story' }], n: 16, max_tokens: 384, logprobs: true, top_logprobs: 20, stream: true }
    const floods = [send(flooder, flood), send(flooder, flood)]
    // Both are on the node, 4 running and at least 16 waiting (the prompts are tokenized one after another). Each
    // sequence runs 384 tokens so that this lasts many of the replica's stats reports (every 250 ms) even on a loaded
    // CI machine; with 96, CI once timed out here (a report of 16 waiting missed, as far as I can tell).
    let mostWaiting = 0
    await until(() => (mostWaiting = Math.max(mostWaiting, engine.health().waiting)) >= 16, "the flood's sequences waiting on the node", () => ` (at most ${mostWaiting} seen waiting, ${finished} finished)`)

    // The other key's stream, queued behind 16 or more of the flood's sequences, is admitted at the flood's next turn.
    const waitingAhead = engine.health().waiting
    const finishedBefore = finished
    const streaming = send(other, { messages: [{ role: 'user', content: 'hello' }], max_tokens: 96, stream: true })

    const refused = await send(flooder, flood)
    expect(refused.status).toBe(429)
    expect(refused.retryAfter).toBe('1')
    expect(JSON.parse(refused.body)).toEqual({ error: { message: expect.stringContaining('Concurrency limit reached'), type: 'rate_limit_error', code: 429 } })

    const stream = await streaming
    const floodFinishedMeanwhile = finished - finishedBefore - 1
    expect(stream.status).toBe(200)
    const events = sseEvents(stream.body)
    expect(events.at(-1)).toBe('[DONE]')
    expect(events.some((e) => e.includes('"finish_reason":"length"'))).toBe(true)
    // First come first served, it would have waited for every one of them ahead to be admitted, so for as many to
    // finish; in turn, it is admitted at one of the next two free slots and runs beside at most 3 of the flood's.
    expect(waitingAhead).toBeGreaterThanOrEqual(16)
    expect(floodFinishedMeanwhile).toBeLessThan(12)

    const done = await Promise.all(floods)
    expect(done.map((r) => r.status)).toEqual([200, 200])
    for (const r of done) expect(sseEvents(r.body).filter((e) => e.includes('"finish_reason":"length"')).length).toBe(16)
  })
})
