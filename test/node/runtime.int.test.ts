// The node's `runtime` option over the real pool: /health and onnxd_info name the ORT API the workers' steps run on
// ('capi' by default on CPU, the production default; 'js' when asked), and the default node serves a chat request
// with the 'js' node's answer.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { FastifyInstance } from 'fastify'
import { buildNode } from '../../src/node/app.js'
import { createEnginePool } from '../../src/engine/pool/pool.js'
import type { EngineClient, Runtime } from '../../src/engine/index.js'
import { createMetrics, createRegistry } from '../../src/node/plugins/metrics.js'
import { tinyPlainModelDir } from '../helpers/fixtures.js'
import { listen, testOptions, URL_PATH } from './helpers.js'

const nodes = new Map<Runtime | 'default', { app: FastifyInstance; engine: EngineClient; base: string }>()

beforeAll(async () => {
  for (const runtime of ['default', 'js'] as const) {
    const metrics = createMetrics(createRegistry(), 'onnxd-tiny', 'cpu')
    const engine = createEnginePool({
      modelDir: tinyPlainModelDir(),
      modelId: 'onnxd-tiny',
      workers: 1,
      intraOpThreads: 1,
      ...(runtime === 'js' ? { runtime } : {}),
    }, metrics.observer)
    const app = buildNode(testOptions(), { engine, metrics })
    nodes.set(runtime, { app, engine, base: await listen(app) })
  }
  await Promise.all([...nodes.values()].map((n) => n.engine.ready()))
})
afterAll(async () => {
  for (const n of nodes.values()) {
    await n.app.close()
    await n.engine.close()
  }
})

const chat = async (base: string): Promise<number[]> => {
  const res = await fetch(`${base}${URL_PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'onnxd-tiny', messages: [{ role: 'user', content: 'hello there' }], max_tokens: 12, ignore_eos: true, temperature: 0 }),
  })
  expect(res.status).toBe(200)
  const ids = ((await res.json()) as { output_ids: number[] }).output_ids
  expect(ids).toHaveLength(12)
  return ids
}

describe('node runtime option', () => {
  it("/health says runtime 'capi' by default on CPU and 'js' when asked", async () => {
    for (const [runtime, want] of [['default', 'capi'], ['js', 'js']] as const) {
      const h = (await (await fetch(`${nodes.get(runtime)!.base}/health`)).json()) as Record<string, unknown>
      expect(h).toMatchObject({ status: 'ready', runtime: want })
    }
  })

  it('onnxd_info carries the runtime label', async () => {
    for (const [runtime, want] of [['default', 'capi'], ['js', 'js']] as const) {
      const text = await (await fetch(`${nodes.get(runtime)!.base}/metrics`)).text()
      expect(text).toContain(`onnxd_info{model_name="onnxd-tiny",provider="cpu",runtime="${want}"} 1`)
    }
  })

  it("the default ('capi') node answers a greedy chat request as the 'js' node does", async () => {
    const a = await chat(nodes.get('js')!.base)
    const b = await chat(nodes.get('default')!.base)
    expect(b).toEqual(a)
  })
})
