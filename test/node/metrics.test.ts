// GET /metrics: every onnxd metric is exposed, observations move after a completion, gauges follow pool health,
// and each app owns its registry.
import { afterEach, describe, expect, it } from 'vitest'
import { buildNode } from '../../src/node/app.js'
import { BUCKETS, createMetrics, createRegistry } from '../../src/node/plugins/metrics.js'
import { fakeEngine } from '../helpers/fake-engine.js'
import { completionBody, testNode, testOptions, URL_PATH, type TestNode } from './helpers.js'

let node: TestNode | null = null
afterEach(async () => {
  await node?.app.close()
  node = null
})

const METRIC_NAMES = [
  'onnxd_num_requests_running',
  'onnxd_num_requests_waiting',
  'onnxd_kv_cache_usage_perc',
  'onnxd_kv_cache_used_bytes',
  'onnxd_kv_cache_budget_bytes',
  'onnxd_workers_total',
  'onnxd_workers_ready',
  'onnxd_info',
  'onnxd_time_to_first_token_seconds',
  'onnxd_time_per_output_token_seconds',
  'onnxd_inter_token_latency_seconds',
  'onnxd_e2e_request_latency_seconds',
  'onnxd_request_queue_time_seconds',
  'onnxd_request_prompt_tokens',
  'onnxd_request_generation_tokens',
  'onnxd_iteration_tokens_total',
  'onnxd_batch_size',
  'onnxd_batch_step_seconds',
  'onnxd_prompt_tokens_total',
  'onnxd_generation_tokens_total',
  'onnxd_request_success_total',
  'onnxd_request_failures_total',
  'onnxd_worker_restarts_total',
]

/** The value of one sample line, e.g. `onnxd_generation_tokens_total{model_name="onnxd-tiny"}`; 0 when absent. */
function sample(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `))
  return line === undefined ? 0 : Number(line.slice(series.length + 1))
}

const scrape = async (n: TestNode): Promise<string> => {
  const res = await n.app.inject({ method: 'GET', url: '/metrics' })
  expect(res.statusCode).toBe(200)
  expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/)
  return res.body
}

describe('GET /metrics', () => {
  it('exposes every metric with HELP and TYPE lines', async () => {
    node = testNode()
    const text = await scrape(node)
    for (const name of METRIC_NAMES) {
      expect(text, name).toContain(`# HELP ${name} `)
      expect(text, name).toContain(`# TYPE ${name} `)
    }
  })

  it("uses vLLM's histogram buckets", async () => {
    node = testNode()
    const text = await scrape(node)
    const les = (name: string): number[] =>
      text
        .split('\n')
        .filter((l) => l.startsWith(`${name}_bucket{`) && !l.includes('+Inf'))
        .map((l) => Number(/le="([^"]+)"/.exec(l)?.[1]))
    expect(les('onnxd_time_to_first_token_seconds')).toEqual(BUCKETS.ttft)
    expect(les('onnxd_time_per_output_token_seconds')).toEqual(BUCKETS.tpot)
    expect(les('onnxd_e2e_request_latency_seconds')).toEqual(BUCKETS.requestLatency)
    expect(BUCKETS.ttft.at(-1)).toBe(2560)
    expect(BUCKETS.requestLatency.at(-1)).toBe(7680)
  })

  it('moves token counters, finish reasons and latency histograms after a completion', async () => {
    node = testNode({ script: [{ accept: 5 }, { token: 'a' }, { token: 'b' }, { token: 'c' }, { done: 'stop' }] })
    const m = '{model_name="onnxd-tiny"}'
    const before = await scrape(node)
    expect(sample(before, `onnxd_generation_tokens_total${m}`)).toBe(0)
    const res = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody() })
    expect(res.json<{ usage: { completion_tokens: number } }>().usage.completion_tokens).toBe(3)
    const after = await scrape(node)
    expect(sample(after, `onnxd_generation_tokens_total${m}`)).toBe(3)
    expect(sample(after, `onnxd_prompt_tokens_total${m}`)).toBe(5)
    expect(sample(after, 'onnxd_request_success_total{model_name="onnxd-tiny",finished_reason="stop"}')).toBe(1)
    expect(sample(after, 'onnxd_request_success_total{model_name="onnxd-tiny",finished_reason="length"}')).toBe(0)
    expect(sample(after, `onnxd_time_to_first_token_seconds_count${m}`)).toBe(1)
    expect(sample(after, `onnxd_e2e_request_latency_seconds_count${m}`)).toBe(1)
    expect(sample(after, `onnxd_inter_token_latency_seconds_count${m}`)).toBe(2)
    expect(sample(after, 'onnxd_batch_size_count{model_name="onnxd-tiny",phase="decode"}')).toBe(3)
    expect(sample(after, 'onnxd_iteration_tokens_total_sum{model_name="onnxd-tiny",phase="prefill"}')).toBe(5)
  })

  it('counts failures by error code, and worker restarts', async () => {
    node = testNode({ script: [{ error: 'queue_full', message: 'full' }] })
    await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody() })
    await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody({ bogus: 1 }) })
    await node.app.inject({ method: 'GET', url: '/nope' }) // not a completion: not counted
    node.metrics.observer.onWorkerRestart?.()
    const text = await scrape(node)
    expect(sample(text, 'onnxd_request_failures_total{model_name="onnxd-tiny",code="queue_full"}')).toBe(1)
    expect(sample(text, 'onnxd_request_failures_total{model_name="onnxd-tiny",code="invalid_request"}')).toBe(1)
    expect(sample(text, 'onnxd_request_failures_total{model_name="onnxd-tiny",code="not_found"}')).toBe(0)
    expect(sample(text, 'onnxd_worker_restarts_total{model_name="onnxd-tiny"}')).toBe(1)
  })

  it('collects gauges and onnxd_info from pool health at scrape time', async () => {
    node = testNode({ health: { running: 4, waiting: 7, kvUsedBytes: 1024, kvBudgetBytes: 4096, provider: 'cuda', runtime: 'js' } })
    let text = await scrape(node)
    expect(sample(text, 'onnxd_num_requests_running{model_name="onnxd-tiny"}')).toBe(4)
    expect(sample(text, 'onnxd_num_requests_waiting{model_name="onnxd-tiny"}')).toBe(7)
    expect(sample(text, 'onnxd_kv_cache_usage_perc{model_name="onnxd-tiny"}')).toBe(0.25)
    expect(sample(text, 'onnxd_kv_cache_used_bytes{model_name="onnxd-tiny"}')).toBe(1024)
    expect(sample(text, 'onnxd_workers_ready{model_name="onnxd-tiny"}')).toBe(1)
    // The metrics were created for cpu; the running provider (a fallback, say) wins, as one series.
    expect(sample(text, 'onnxd_info{model_name="onnxd-tiny",provider="cuda",runtime="js"}')).toBe(1)
    expect(text).not.toContain('provider="cpu"')
    node.engine.setHealth({ waiting: 0 })
    text = await scrape(node)
    expect(sample(text, 'onnxd_num_requests_waiting{model_name="onnxd-tiny"}')).toBe(0)
  })

  it('still answers when pool health throws (gauges read zero)', async () => {
    node = testNode()
    node.engine.health = () => {
      throw new Error('pool gone')
    }
    const text = await scrape(node)
    expect(sample(text, 'onnxd_num_requests_running{model_name="onnxd-tiny"}')).toBe(0)
    // The configured provider and runtime ('auto' by default: the C API on CPU).
    expect(sample(text, 'onnxd_info{model_name="onnxd-tiny",provider="cpu",runtime="capi"}')).toBe(1)
  })

  it('builds two apps in one process without "already registered", each with its own registry', async () => {
    const a = buildNode(testOptions(), { engine: fakeEngine() })
    const b = buildNode(testOptions(), { engine: fakeEngine() })
    const registry = createRegistry()
    const c = buildNode(testOptions(), { engine: fakeEngine(), registry })
    try {
      await a.inject({ method: 'POST', url: URL_PATH, payload: completionBody({ bogus: 1 }) })
      const [ta, tb] = await Promise.all([a.inject({ url: '/metrics' }), b.inject({ url: '/metrics' })])
      expect(sample(ta.body, 'onnxd_request_failures_total{model_name="onnxd-tiny",code="invalid_request"}')).toBe(1)
      expect(sample(tb.body, 'onnxd_request_failures_total{model_name="onnxd-tiny",code="invalid_request"}')).toBe(0)
      expect(await registry.metrics()).toContain('onnxd_num_requests_running')
      expect(() => createMetrics(createRegistry(), 'x', 'cpu')).not.toThrow()
    } finally {
      await Promise.all([a.close(), b.close(), c.close()])
    }
  })
})
