// GET /metrics: every onnxd metric is exposed, observations move after a completion, gauges follow pool health,
// and each app owns its registry.
import { afterEach, describe, expect, it } from 'vitest'
import { buildNode } from '../../src/node/app.js'
import { BUCKETS, createMetrics, createRegistry, DEPRECATED_METRICS } from '../../src/node/plugins/metrics.js'
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
  'onnxd_workers',
  'onnxd_workers_ready',
  'onnxd_info',
  'onnxd_time_to_first_token_seconds',
  'onnxd_time_per_output_token_seconds',
  'onnxd_inter_token_latency_seconds',
  'onnxd_e2e_request_latency_seconds',
  'onnxd_request_queue_time_seconds',
  'onnxd_request_prompt_tokens',
  'onnxd_request_generation_tokens',
  'onnxd_iteration_tokens',
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

  it("resolves latencies from 1 ms and keeps every one of vLLM's bucket boundaries above", async () => {
    node = testNode()
    const text = await scrape(node)
    const les = (name: string): number[] =>
      text
        .split('\n')
        .filter((l) => l.startsWith(`${name}_bucket{`) && !l.includes('+Inf') && !l.includes('phase="prefill"'))
        .map((l) => Number(/le="([^"]+)"/.exec(l)?.[1]))
    // vllm/v1/metrics/loggers.py: a dashboard's `le="0.5"` written for vLLM finds the same bucket here.
    const vllm = {
      ttft: [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0],
      tpot: [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0],
      latency: [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0],
    }
    const cases: [string, number[]][] = [
      ['onnxd_time_to_first_token_seconds', vllm.ttft],
      ['onnxd_time_per_output_token_seconds', vllm.tpot],
      ['onnxd_inter_token_latency_seconds', vllm.tpot],
      ['onnxd_e2e_request_latency_seconds', vllm.latency],
      ['onnxd_request_queue_time_seconds', vllm.latency],
    ]
    for (const [name, theirs] of cases) {
      const ours = les(name)
      expect(ours[0], name).toBe(0.001)
      expect(ours, name).toEqual([...ours].sort((a, b) => a - b))
      expect(ours, name).toEqual(expect.arrayContaining(theirs))
      expect(ours.at(-1), name).toBe(theirs.at(-1))
      // A tiny model's 3 ms and a large one's 40 ms each fall in a bucket no wider than 2.5 times its lower bound.
      for (const t of [0.003, 0.04]) {
        const i = ours.findIndex((le) => le >= t)
        expect(ours[i]! / ours[i - 1]!, `${name} at ${t} s`).toBeLessThanOrEqual(2.5)
      }
    }
    expect(les('onnxd_time_to_first_token_seconds')).toEqual(BUCKETS.ttft)
    expect(les('onnxd_e2e_request_latency_seconds')).toEqual(BUCKETS.requestLatency)
  })

  it('counts batch sizes on whole rows: one bucket per row count up to 8', async () => {
    node = testNode()
    const text = await scrape(node)
    const les = text
      .split('\n')
      .filter((l) => l.startsWith('onnxd_batch_size_bucket{') && l.includes('phase="decode"') && !l.includes('+Inf'))
      .map((l) => Number(/le="([^"]+)"/.exec(l)?.[1]))
    expect(les.slice(0, 8)).toEqual([1, 2, 3, 4, 5, 6, 7, 8])
    for (const le of les) expect(Number.isInteger(le), String(le)).toBe(true)
    expect(les.at(-1)).toBeGreaterThanOrEqual(512)
  })

  it('still exports the renamed metrics under their old names for one release, with the same values, marked deprecated', async () => {
    node = testNode({ script: [{ accept: 5 }, { token: 'a' }, { token: 'b' }, { done: 'stop' }] })
    await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody() })
    const text = await scrape(node)
    expect(DEPRECATED_METRICS.map((d) => [d.name, d.replacement])).toEqual([
      ['onnxd_iteration_tokens_total', 'onnxd_iteration_tokens'],
      ['onnxd_workers_total', 'onnxd_workers'],
    ])
    for (const d of DEPRECATED_METRICS) {
      expect(text, d.name).toMatch(new RegExp(`^# HELP ${d.name} .*DEPRECATED: use ${d.replacement}; this name is removed in ${d.removedIn.replace(/\./g, '\\.')}\\.$`, 'm'))
      expect(text, d.replacement).not.toMatch(new RegExp(`^# HELP ${d.replacement} .*DEPRECATED`, 'm'))
      // Every series of the old name is the new one's, value for value.
      const series = (name: string): string[] =>
        text
          .split('\n')
          .filter((l) => /^(_bucket|_sum|_count)?[{ ]/.test(l.slice(name.length)) && l.startsWith(name))
          .map((l) => l.slice(name.length))
      expect(series(d.name).length, d.name).toBeGreaterThan(0)
      expect(series(d.name), d.name).toEqual(series(d.replacement))
    }
    expect(sample(text, 'onnxd_iteration_tokens_sum{model_name="onnxd-tiny",phase="prefill"}')).toBe(5)
    expect(sample(text, 'onnxd_iteration_tokens_total_sum{model_name="onnxd-tiny",phase="prefill"}')).toBe(5)
    expect(sample(text, 'onnxd_workers{model_name="onnxd-tiny"}')).toBe(1)
  })

  it("adds the process's metrics (prom-client's process_* and nodejs_*), once per scrape, in every app", async () => {
    node = testNode()
    const other = testNode()
    try {
      for (const text of [await scrape(node), await scrape(other)]) {
        for (const name of ['process_cpu_user_seconds_total', 'process_resident_memory_bytes', 'process_start_time_seconds', 'nodejs_eventloop_lag_seconds', 'nodejs_heap_size_used_bytes', 'nodejs_version_info']) {
          expect(text.match(new RegExp(`^# TYPE ${name} `, 'gm')), name).toHaveLength(1)
        }
        expect(sample(text, 'process_resident_memory_bytes')).toBeGreaterThan(0)
        // The app's own metrics come first, intact.
        expect(text.indexOf('# TYPE onnxd_info ')).toBeLessThan(text.indexOf('# TYPE process_cpu_user_seconds_total '))
      }
    } finally {
      await other.app.close()
    }
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
    expect(sample(after, 'onnxd_iteration_tokens_sum{model_name="onnxd-tiny",phase="prefill"}')).toBe(5)
  })

  it('counts failures by error code and outcome (errors of the service apart from the client\'s), and worker restarts', async () => {
    node = testNode({ script: [{ error: 'queue_full', message: 'full' }] })
    await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody() })
    await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody({ bogus: 1 }) })
    await node.app.inject({ method: 'GET', url: '/nope' }) // not a completion: not counted
    node.metrics.requestFailed('client_gone')
    node.metrics.observer.onWorkerRestart?.()
    const text = await scrape(node)
    expect(sample(text, 'onnxd_request_failures_total{model_name="onnxd-tiny",code="queue_full",outcome="server_error"}')).toBe(1)
    expect(sample(text, 'onnxd_request_failures_total{model_name="onnxd-tiny",code="invalid_request",outcome="client_error"}')).toBe(1)
    expect(sample(text, 'onnxd_request_failures_total{model_name="onnxd-tiny",code="client_gone",outcome="client_gone"}')).toBe(1)
    expect(text).not.toContain('code="not_found"')
    expect(text.match(/^onnxd_request_failures_total\{/gm)).toHaveLength(3)
    expect(sample(text, 'onnxd_worker_restarts_total{model_name="onnxd-tiny"}')).toBe(1)
  })

  it('collects gauges and onnxd_info from pool health at scrape time', async () => {
    // Two workers configured, one serving (the other loading or being replaced).
    node = testNode({ health: { running: 4, waiting: 7, kvUsedBytes: 1024, kvBudgetBytes: 4096, provider: 'cuda', runtime: 'js', configuredWorkers: 2 } })
    let text = await scrape(node)
    expect(sample(text, 'onnxd_num_requests_running{model_name="onnxd-tiny"}')).toBe(4)
    expect(sample(text, 'onnxd_num_requests_waiting{model_name="onnxd-tiny"}')).toBe(7)
    expect(sample(text, 'onnxd_kv_cache_usage_perc{model_name="onnxd-tiny"}')).toBe(0.25)
    expect(sample(text, 'onnxd_kv_cache_used_bytes{model_name="onnxd-tiny"}')).toBe(1024)
    expect(sample(text, 'onnxd_workers_ready{model_name="onnxd-tiny"}')).toBe(1)
    expect(sample(text, 'onnxd_workers{model_name="onnxd-tiny"}')).toBe(2)
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
      expect(sample(ta.body, 'onnxd_request_failures_total{model_name="onnxd-tiny",code="invalid_request",outcome="client_error"}')).toBe(1)
      expect(sample(tb.body, 'onnxd_request_failures_total{model_name="onnxd-tiny",code="invalid_request",outcome="client_error"}')).toBe(0)
      expect(await registry.metrics()).toContain('onnxd_num_requests_running')
      expect(() => createMetrics(createRegistry(), 'x', 'cpu')).not.toThrow()
    } finally {
      await Promise.all([a.close(), b.close(), c.close()])
    }
  })
})
