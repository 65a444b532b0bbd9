// The load generator against small local servers: a fake node (test/helpers/fake-node.ts) and two hand-steered
// SSE servers, one in the node's contract and one in OpenAI's chat shape.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { createAgent, type Endpoint } from '../../src/bench/client.js'
import { runLevel } from '../../src/bench/loadgen.js'
import { levelFigures } from '../../src/bench/metrics.js'
import { makeWorkload, parseLength } from '../../src/bench/workload.js'
import { startFakeNode } from '../helpers/fake-node.js'

const sampling = { temperature: 0, ignoreEos: true }
const closed = (concurrency: number, deadlineS: number | null = null) => ({ concurrency, requestRate: Infinity, deadlineS, seed: 0 })
const work = (n: number, out = 4) => makeWorkload({ promptLen: parseLength('p', '5'), outputLen: parseLength('o', String(out)), seed: 0 }, { kind: 'ids', vocab: 100 }, n)

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

async function serve(handler: (req: IncomingMessage, res: ServerResponse, body: Record<string, unknown>) => void): Promise<string> {
  const server: Server = createServer((req, res) => {
    const parts: Buffer[] = []
    req.on('data', (c: Buffer) => parts.push(c))
    req.on('end', () => handler(req, res, JSON.parse(Buffer.concat(parts).toString('utf8') || '{}') as Record<string, unknown>))
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  cleanups.push(() => new Promise((r) => server.close(() => r())))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

const sse = (res: ServerResponse, data: unknown): boolean => res.write(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`)

describe('runLevel, closed loop', () => {
  it('keeps exactly `concurrency` requests in flight and streams every token', async () => {
    let inFlight = 0
    let maxInFlight = 0
    const held: (() => void)[] = []
    // Each answer waits until 3 requests are in flight at once: a generator that allowed fewer would hang here.
    const url = await serve((_req, res, body) => {
      inFlight++
      maxInFlight = Math.max(maxInFlight, inFlight)
      held.push(() => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        const n = body.max_tokens as number
        for (let i = 0; i < n; i++) sse(res, { id: 'x', text: `t${i}`, ids: [10 + i] })
        sse(res, { id: 'x', text: '', finish_reason: 'length', usage: { prompt_tokens: (body.input_ids as number[]).length, completion_tokens: n }, timings: { queue_ms: 0, ttft_ms: 0, total_ms: 0 } })
        sse(res, '[DONE]')
        inFlight--
        res.end()
      })
      if (held.length === 3) for (const go of held.splice(0)) go()
    })
    const agent = createAgent(3)
    cleanups.push(() => agent.close())
    const ep: Endpoint = { url, protocol: 'node', model: 'm' }
    const run = await runLevel(agent, ep, work(6), sampling, closed(3))
    expect(maxInFlight).toBe(3)
    expect(run.cutShort).toBe(false)
    expect(run.records).toHaveLength(6)
    for (const r of run.records) expect(r).toMatchObject({ ok: true, status: '200', outputTokens: 4, promptTokens: 5 })
    for (const r of run.records) expect(r.itlMs).toHaveLength(3)
    const f = levelFigures(run.records, run.durationS, 3, Infinity)
    expect(f.completed).toBe(6)
    expect(f.total_output_tokens).toBe(24)
  })

  it('sends the contract request: input_ids, max_tokens, ignore_eos, stream, request_id', async () => {
    const node = await startFakeNode({ models: ['m'] })
    cleanups.push(() => node.close())
    const agent = createAgent(1)
    cleanups.push(() => agent.close())
    await runLevel(agent, { url: node.url, protocol: 'node', model: 'm' }, work(1), sampling, closed(1), {}, 'probe')
    expect(node.requests[0]).toMatchObject({ model: 'm', max_tokens: 4, ignore_eos: true, stream: true, temperature: 0, request_id: 'probe-0' })
    expect(node.requests[0].input_ids).toHaveLength(5)
  })

  it('counts failures by status: an HTTP 503 and an error event mid-stream', async () => {
    const node = await startFakeNode({ models: ['m'] })
    cleanups.push(() => node.close())
    node.failNext({ status: 503, retryAfterS: 1 })
    node.breakNext(1, 'error')
    const agent = createAgent(1)
    cleanups.push(() => agent.close())
    const run = await runLevel(agent, { url: node.url, protocol: 'node', model: 'm' }, work(3), sampling, closed(1))
    const f = levelFigures(run.records, run.durationS, 1, Infinity)
    expect(f.errors_by_status).toEqual({ '503': 1, 'stream:500': 1 })
    expect(f.completed).toBe(1)
  })

  it('cuts requests still running at the deadline and sends no more', async () => {
    const node = await startFakeNode({ models: ['m'] })
    cleanups.push(() => node.close())
    const hold = node.holdNext(2)
    cleanups.push(async () => hold.release())
    const agent = createAgent(1)
    cleanups.push(() => agent.close())
    const run = await runLevel(agent, { url: node.url, protocol: 'node', model: 'm' }, work(5), sampling, closed(1, 0.3))
    expect(run.cutShort).toBe(true)
    expect(run.records).toHaveLength(1)
    expect(run.records[0]).toMatchObject({ ok: false, cut: true, status: 'cut', outputTokens: 2 })
    await hold.cancelled // the node saw the client go
    expect(node.requests).toHaveLength(1)
    const f = levelFigures(run.records, run.durationS, 1, Infinity)
    expect(f).toMatchObject({ cut: 1, failed: 0, cut_output_tokens: 2 })
    expect(f.duration).toBeCloseTo(0.3, 1)
  })
})

describe('runLevel, OpenAI chat streaming (a facade)', () => {
  it('reads chat.completion.chunk deltas and the usage chunk', async () => {
    let seen: { body: Record<string, unknown>; auth?: string } | null = null
    const url = await serve((req, res, body) => {
      seen = { body, auth: req.headers.authorization }
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      const chunk = (delta: object, extra: object = {}) => ({ id: 'c', object: 'chat.completion.chunk', created: 0, model: 'm', choices: [{ index: 0, delta, finish_reason: null }], ...extra })
      sse(res, chunk({ role: 'assistant', content: '' }))
      for (const t of ['a', 'b', 'c']) sse(res, chunk({ content: t }))
      sse(res, { id: 'c', object: 'chat.completion.chunk', created: 0, model: 'm', choices: [], usage: { prompt_tokens: 9, completion_tokens: 3, total_tokens: 12 } })
      sse(res, '[DONE]')
      res.end()
    })
    const agent = createAgent(1)
    cleanups.push(() => agent.close())
    const items = makeWorkload({ promptLen: parseLength('p', '5'), outputLen: parseLength('o', '3'), seed: 0 }, { kind: 'chat' }, 1)
    const run = await runLevel(agent, { url, protocol: 'openai', model: 'm', apiKey: 'sk-svc-test' }, items, sampling, closed(1))
    expect(run.records[0]).toMatchObject({ ok: true, outputTokens: 3, promptTokens: 9 })
    expect(run.records[0].itlMs).toHaveLength(2)
    expect(seen!.auth).toBe('Bearer sk-svc-test')
    expect(seen!.body).toMatchObject({ model: 'm', stream: true, stream_options: { include_usage: true }, max_tokens: 3, ignore_eos: true })
  })
})

describe('runLevel, Poisson arrivals', () => {
  it('spaces sends by the seeded arrival times', async () => {
    const node = await startFakeNode({ models: ['m'] })
    cleanups.push(() => node.close())
    const agent = createAgent(4)
    cleanups.push(() => agent.close())
    // 20 req/s: 6 requests arrive over about 0.3 s; the last cannot start before its arrival time.
    const run = await runLevel(agent, { url: node.url, protocol: 'node', model: 'm' }, work(6), sampling, { concurrency: 4, requestRate: 20, deadlineS: null, seed: 5 })
    const { poissonArrivals } = await import('../../src/bench/stats.js')
    const arrivals = poissonArrivals(20, 6, 5)
    run.records.forEach((r, i) => expect(r.startMs).toBeGreaterThanOrEqual(arrivals[i] * 1000))
    expect(run.records.every((r) => r.ok)).toBe(true)
  })
})
