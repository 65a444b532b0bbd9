// The facade's own /metrics: requests by endpoint and status (unknown paths folded into one label), rate-limit checks
// failed open, and each node's state and prefix-affinity placements as its router sees them.
import { afterEach, describe, expect, it } from 'vitest'
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
    expect(value(text, 'onnxd_facade_requests_total{endpoint="/v1/chat/completions",status="200"}')).toBe(2)
    expect(value(text, 'onnxd_facade_requests_total{endpoint="/v1/chat/completions",status="401"}')).toBe(1)
    expect(value(text, 'onnxd_facade_requests_total{endpoint="unmatched",status="404"}')).toBe(3)
    expect(text).not.toContain('/b/c')
    expect(value(text, 'onnxd_facade_request_duration_seconds_count{endpoint="/v1/chat/completions"}')).toBe(3)
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
})
