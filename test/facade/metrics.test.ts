// The facade's own /metrics: every request counted once by endpoint, status and outcome (unknown paths folded into
// one label; a client that hung up is client_gone, no error; a stream that failed after its 200 is the service's
// error), rate-limit checks failed open, each node's state and prefix-affinity placements as its router sees them,
// and the process's metrics.
import { afterEach, describe, expect, it, vi } from 'vitest'
import { MemoryRateLimitStore } from '../../src/store/memory-rate-limit.js'
import { bearer, chatBody, facadeFixture, type FacadeFixture } from '../helpers/facade.js'

let f: FacadeFixture | null = null
afterEach(async () => {
  await f?.close()
  f = null
})

/** The value of one series in a Prometheus text exposition (0 when absent). */
function value(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `))
  return line ? Number(line.slice(series.length + 1)) : 0
}

describe('facade /metrics', () => {
  it('counts requests by route and status, folds unknown paths into one label, and reports each node', async () => {
    // A counter store that says three hits failed open (as the Redis one counts them).
    const counters = Object.assign(new MemoryRateLimitStore(), { failures: 3 })
    f = await facadeFixture({ nodeCount: 2, deps: { rateLimits: counters } })
    await f.app.facade.router.refresh()
    const post = (headers: Record<string, string>) => f!.app.inject({ method: 'POST', url: '/v1/chat/completions', headers, payload: chatBody() })
    expect((await post(bearer(f.key))).statusCode).toBe(200)
    expect((await post(bearer(f.key))).statusCode).toBe(200)
    expect((await post(bearer('sk-wrong'))).statusCode).toBe(401)
    for (const path of ['/a', '/b/c', '/v1/nothing']) expect((await f.app.inject({ method: 'GET', url: path })).statusCode).toBe(404)

    const res = await f.app.inject({ method: 'GET', url: '/metrics' })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toMatch(/^text\/plain/)
    const text = res.body
    expect(value(text, 'onnxd_facade_requests_total{endpoint="/v1/chat/completions",status="200",outcome="ok"}')).toBe(2)
    expect(value(text, 'onnxd_facade_requests_total{endpoint="/v1/chat/completions",status="401",outcome="client_error"}')).toBe(1)
    expect(value(text, 'onnxd_facade_requests_total{endpoint="unmatched",status="404",outcome="client_error"}')).toBe(3)
    expect(text).not.toContain('/b/c')
    expect(value(text, 'onnxd_facade_request_duration_seconds_count{endpoint="/v1/chat/completions",outcome="ok"}')).toBe(2)
    expect(value(text, 'onnxd_facade_request_duration_seconds_count{endpoint="/v1/chat/completions",outcome="client_error"}')).toBe(1)
    expect(value(text, 'onnxd_facade_rate_limit_fail_open_total')).toBe(3)
    for (const n of f.nodes) {
      expect(value(text, `onnxd_facade_node_ready{node="${n.url}"}`)).toBe(1)
      expect(value(text, `onnxd_facade_node_inflight{node="${n.url}"}`)).toBe(0)
    }

    // A node that stops answering reads 0 at the next poll.
    await f.nodes[0]!.close()
    await f.app.facade.router.refresh()
    const after = (await f.app.inject({ method: 'GET', url: '/metrics' })).body
    expect(value(after, `onnxd_facade_node_ready{node="${f.nodes[0]!.url}"}`)).toBe(0)
    expect(value(after, `onnxd_facade_node_ready{node="${f.nodes[1]!.url}"}`)).toBe(1)
  })

  it('counts a client that hung up once, as client_gone (no error), in the counter and the duration histogram', async () => {
    f = await facadeFixture()
    const node = f.nodes[0]!
    const url = await f.app.listen({ port: 0, host: '127.0.0.1' })
    const post = (body: Record<string, unknown>, signal: AbortSignal) =>
      fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { ...bearer(f!.key), 'content-type': 'application/json' }, body: JSON.stringify(body), signal })

    // A stream the client leaves after its 200 and three deltas.
    const streamed = node.holdNext(3)
    const a = new AbortController()
    expect((await post(chatBody({ stream: true }), a.signal)).status).toBe(200)
    await streamed.reached
    a.abort()
    await streamed.cancelled
    // A JSON request the client leaves before any answer.
    const waiting = node.holdNext(0)
    const b = new AbortController()
    const pending = post(chatBody(), b.signal).catch((e: unknown) => e)
    await waiting.reached
    b.abort()
    await waiting.cancelled
    expect(await pending).toBeInstanceOf(Error)
    // And one answered in full.
    expect((await post(chatBody(), new AbortController().signal)).status).toBe(200)

    const series = 'onnxd_facade_requests_total{endpoint="/v1/chat/completions"'
    const text = await vi.waitFor(async () => {
      const t = (await f!.app.inject({ method: 'GET', url: '/metrics' })).body
      expect(t.split('\n').filter((l) => l.startsWith(series)).length).toBe(3)
      return t
    })
    expect(value(text, `${series},status="200",outcome="client_gone"}`)).toBe(1)
    expect(value(text, `${series},status="none",outcome="client_gone"}`)).toBe(1)
    expect(value(text, `${series},status="200",outcome="ok"}`)).toBe(1)
    expect(text).not.toContain('outcome="server_error"')
    expect(value(text, 'onnxd_facade_request_duration_seconds_count{endpoint="/v1/chat/completions",outcome="client_gone"}')).toBe(2)
    expect(value(text, 'onnxd_facade_request_duration_seconds_count{endpoint="/v1/chat/completions",outcome="ok"}')).toBe(1)
  })

  it("counts a stream that ended with an error event after its 200 as the service's error, with that error's status", async () => {
    f = await facadeFixture()
    f.nodes[0]!.breakNext(1, 'error')
    const res = await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody({ stream: true }) })
    expect(res.statusCode).toBe(200)
    expect(res.body).toContain('"error"')
    await f.app.inject({ method: 'GET', url: '/metrics' })
    const text = (await f.app.inject({ method: 'GET', url: '/metrics' })).body
    expect(value(text, 'onnxd_facade_requests_total{endpoint="/v1/chat/completions",status="500",outcome="server_error"}')).toBe(1)
    expect(text).not.toMatch(/^onnxd_facade_requests_total\{endpoint="\/v1\/chat\/completions",status="200"/m)
  })

  it("adds the process's metrics, and resolves durations from 1 ms", async () => {
    f = await facadeFixture()
    await f.app.inject({ method: 'GET', url: '/metrics' })
    const text = (await f.app.inject({ method: 'GET', url: '/metrics' })).body
    for (const name of ['process_cpu_user_seconds_total', 'process_resident_memory_bytes', 'nodejs_eventloop_lag_seconds', 'nodejs_heap_size_used_bytes']) {
      expect(text.match(new RegExp(`^# TYPE ${name} `, 'gm')), name).toHaveLength(1)
    }
    expect(text).toMatch(/^# TYPE onnxd_facade_request_duration_seconds histogram$/m)
    // The /metrics request before this one is counted, in the first bucket a fast answer falls in.
    const les = [...text.matchAll(/^onnxd_facade_request_duration_seconds_bucket\{le="([^"]+)",endpoint="\/metrics",outcome="ok"\} /gm)].map((m) => m[1])
    expect(les[0]).toBe('0.001')
  })
})
