// The node over the real piscina pool and the embedded default model: what a router and an operator see.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { FastifyInstance } from 'fastify'
import { buildNode } from '../../src/node/app.js'
import { createEnginePool } from '../../src/engine/pool/pool.js'
import type { EngineClient } from '../../src/engine/index.js'
import { createMetrics, createRegistry } from '../../src/node/plugins/metrics.js'
import { tinyPlainModelDir } from '../helpers/fixtures.js'
import { listen, readUntil, sseData, testOptions, URL_PATH } from './helpers.js'

/** Polls an observable condition (worker stats reach the main thread every 250 ms). */
async function waitFor(cond: () => Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const t0 = Date.now()
  while (!(await cond())) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

const running = async (base: string): Promise<number> => ((await (await fetch(`${base}/health`)).json()) as { running: number }).running

const metricValue = (text: string, name: string): number => {
  const line = text.split('\n').find((l) => l.startsWith(name))
  if (!line) throw new Error(`metric ${name} not found`)
  return Number(line.split(' ').pop())
}

describe('node over the real engine pool', () => {
  let app: FastifyInstance
  let engine: EngineClient
  let base: string
  let generated = 0
  /** The prompt tokens of every sequence the engine finished, in order. */
  const finished: number[] = []
  beforeAll(async () => {
    const metrics = createMetrics(createRegistry(), 'onnxd-tiny', 'cpu')
    engine = createEnginePool(
      { modelDir: tinyPlainModelDir(), modelId: 'onnxd-tiny', workers: 1, intraOpThreads: 1, heartbeatTimeoutMs: 1000, faultInjection: true },
      {
        ...metrics.observer,
        onStep: (s) => { metrics.observer.onStep?.(s); if (s.phase === 'decode') generated += s.batch },
        onFinish: (f) => { metrics.observer.onFinish?.(f); finished.push(f.promptTokens) },
      },
    )
    app = buildNode(testOptions(), { engine, metrics })
    base = await listen(app)
    await engine.ready()
  })
  afterAll(async () => {
    await app.close()
    await engine.close()
  })

  it('reports ready with the model, provider and capacity', async () => {
    const res = await fetch(`${base}/health`)
    expect(res.status).toBe(200)
    const h = (await res.json()) as Record<string, unknown>
    expect(h).toMatchObject({ status: 'ready', models: ['onnxd-tiny'], provider: 'cpu', workers: { total: 1, ready: 1 } })
    expect(h.capacity).toBeGreaterThan(0)
  })

  it('completes a chat request', async () => {
    const res = await fetch(`${base}${URL_PATH}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'onnxd-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, ignore_eos: true, temperature: 0 }),
    })
    expect(res.status).toBe(200)
    const body = (await res.json()) as { usage: { completion_tokens: number }; finish_reason: string; output_ids: number[] }
    expect(body.usage.completion_tokens).toBe(5)
    expect(body.output_ids).toHaveLength(5)
    expect(body.finish_reason).toBe('length')
  })

  it('a client that disconnects mid-stream cancels its sequence: running drops to 0 and no more tokens are computed', async () => {
    const ac = new AbortController()
    const res = await fetch(`${base}${URL_PATH}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'onnxd-tiny', prompt: 'hello', max_tokens: 1500, ignore_eos: true, stream: true }),
      signal: ac.signal,
    })
    const reader = res.body!.getReader()
    const sofar = { text: '' }
    await readUntil(reader, sofar, (t) => sseData(t.slice(0, t.lastIndexOf('\n\n') + 2)).length >= 3)
    await waitFor(async () => (await running(base)) === 1, 'running = 1')
    ac.abort()
    // The engine drops the row at its next step; the worker's next stats report shows it.
    await waitFor(async () => (await running(base)) === 0, 'running = 0')
    const after = generated
    // Another request proves the loop is alive; its tokens are the only new ones.
    await fetch(`${base}${URL_PATH}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'onnxd-tiny', prompt: 'x', max_tokens: 3, ignore_eos: true }),
    })
    // The worker posts a request's step observations right after its last step, apart from its events: they may come
    // a moment after the response.
    await waitFor(async () => generated - after >= 2, 'the request\'s decode steps observed', 2000)
    expect(generated - after).toBe(2) // 3 tokens: the first comes from prefill, 2 from decode steps of batch 1
    const metrics = await (await fetch(`${base}/metrics`)).text()
    expect(metricValue(metrics, 'onnxd_request_success_total{model_name="onnxd-tiny",finished_reason="abort"}')).toBe(1)
    expect(metricValue(metrics, 'onnxd_num_requests_running')).toBe(0)
    // What the steps copied in and read back, counted across the worker thread.
    for (const phase of ['prefill', 'decode']) for (const direction of ['in', 'out']) expect(metricValue(metrics, `onnxd_step_io_bytes_total{model_name="onnxd-tiny",phase="${phase}",direction="${direction}"}`)).toBeGreaterThan(0)
  })

  it('counts a prompt (POST /internal/v1/tokenize) as a completion of it reports its prompt tokens, running no sequence', async () => {
    const post = async (path: string, body: object): Promise<{ prompt_tokens?: number; usage?: { prompt_tokens: number } }> =>
      (await (await fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'onnxd-tiny', ...body }) })).json()) as never
    const tools = [{ type: 'function', function: { name: 'get_time', description: 'The time in a zone', parameters: { type: 'object', properties: { zone: { type: 'string' } }, required: ['zone'] } } }]
    const prompts = [
      { messages: [{ role: 'system', content: 'Be brief, and count with care.' }, { role: 'user', content: 'What time is it in Lisbon right now?' }], tools },
      { messages: [{ role: 'user', content: 'hi there' }] },
      { prompt: 'Once upon a time' },
    ]
    for (const p of prompts) {
      const from = finished.length
      const counted = (await post('/internal/v1/tokenize', p)).prompt_tokens!
      const done = await post(URL_PATH, { ...p, max_tokens: 1 })
      expect(counted, JSON.stringify(p)).toBe(done.usage!.prompt_tokens)
      // Finishes reach the main thread in order: a sequence run for the count would have finished before the completion's.
      await waitFor(async () => finished.slice(from).includes(counted), 'the completion finished')
      expect(finished.slice(from).filter((n) => n === counted), JSON.stringify(p)).toHaveLength(1)
    }
  })

  it('a hung engine loop turns /health unhealthy while HTTP still answers', async () => {
    const stall = engine.inject!({ kind: 'stall', ms: 2500 })
    let body = { status: '' }
    await waitFor(async () => {
      const res = await fetch(`${base}/health`)
      body = (await res.json()) as { status: string }
      return res.status === 503
    }, '503')
    expect(body.status).toBe('unhealthy')
    await stall
    await waitFor(async () => (await fetch(`${base}/health`)).status === 200, 'ready again')
  })
})
