// Issue #15, the facade's side: a SERVER span per /v1 request (child of the client's traceparent), a CLIENT span per
// call to a node (a retry on another node is a second one), errors marked as OpenTelemetry has them.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { openTracing, type Tracing } from '../../src/shared/tracing.js'
import { bearer, chatBody, facadeFixture, MODEL, type FacadeFixture } from '../helpers/facade.js'
import { arrived, clientTraceparent, KIND, startCollector, STATUS_ERROR, type CollectedSpan, type Collector } from '../helpers/tracing-collector.js'

let collector: Collector
let tracing: Tracing
let f: FacadeFixture | null = null

beforeAll(async () => {
  collector = await startCollector()
  tracing = (await openTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: `${collector.url}/` }, 'onnxd-facade'))!
})
afterAll(async () => {
  await tracing?.shutdown()
  await collector?.close()
})
afterEach(async () => {
  await f?.close()
  f = null
})

async function traced(nodeCount = 1): Promise<{ f: FacadeFixture; url: string }> {
  f = await facadeFixture({ nodeCount, deps: { tracing }, options: { keyRpm: 0, fleetRpm: 0 } })
  await f.app.facade.router.refresh()
  return { f, url: await f.app.listen({ port: 0, host: '127.0.0.1' }) }
}

const post = (url: string, path: string, body: unknown, headers: Record<string, string>): Promise<Response> =>
  fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })

async function spansOf(traceId: string, n: number): Promise<{ server: CollectedSpan; calls: CollectedSpan[] }> {
  const all = await arrived(collector, traceId, n, () => tracing.forceFlush())
  expect(all).toHaveLength(n)
  const server = all.find((s) => s.kind === KIND.server)!
  const calls = all.filter((s) => s.kind === KIND.client)
  expect(server.service).toBe('onnxd-facade')
  for (const c of calls) expect(c.parentSpanId).toBe(server.spanId)
  return { server, calls }
}

describe('facade spans', () => {
  it('a node 500 retried on the other node: two CLIENT spans, each an Error, and the request an Error 500', async () => {
    const { f, url } = await traced(2)
    for (const n of f.nodes) n.failNext({ status: 500, message: 'boom' })
    const client = clientTraceparent()
    const res = await post(url, '/v1/chat/completions', chatBody(), { ...bearer(f.key), traceparent: client.header })
    expect(res.status).toBe(500)
    expect(f.nodes.reduce((n, node) => n + node.requests.length, 0)).toBe(2)
    const { server, calls } = await spansOf(client.traceId, 3)
    expect(server.parentSpanId).toBe(client.spanId)
    expect(server.status.code).toBe(STATUS_ERROR)
    expect(server.attributes).toMatchObject({ 'http.response.status_code': 500, 'error.type': 'internal', 'gen_ai.request.model': MODEL })
    expect(calls).toHaveLength(2)
    expect(new Set(calls.map((c) => c.attributes['server.port'])).size).toBe(2)
    for (const c of calls) {
      expect(c.name).toBe('POST /internal/v1/completions')
      expect(c.status.code).toBe(STATUS_ERROR)
      expect(c.attributes).toMatchObject({ 'http.response.status_code': 500, 'error.type': '500' })
    }
  })

  it('a stream the node breaks with an error event: the 200 stream is an Error on both spans', async () => {
    const { f, url } = await traced()
    f.nodes[0]!.breakNext(2, 'error')
    const client = clientTraceparent()
    const res = await post(url, '/v1/chat/completions', chatBody({ stream: true }), { ...bearer(f.key), traceparent: client.header })
    expect(res.status).toBe(200)
    expect(await res.text()).toContain('"error"')
    const { server, calls } = await spansOf(client.traceId, 2)
    expect(server.status.code).toBe(STATUS_ERROR)
    expect(server.attributes).toMatchObject({ 'http.response.status_code': 200, 'onnxd.stream': true })
    expect(server.attributes['error.type']).toEqual(expect.any(String))
    expect(calls[0]!.status.code).toBe(STATUS_ERROR)
  })

  it('a JSON completion: usage on the request span and on the call', async () => {
    const { f, url } = await traced()
    const client = clientTraceparent()
    const res = await post(url, '/v1/completions', { model: MODEL, prompt: 'one two three', max_tokens: 3 }, { ...bearer(f.key), traceparent: client.header })
    expect(res.status).toBe(200)
    const usage = ((await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage
    const { server, calls } = await spansOf(client.traceId, 2)
    expect(server.name).toBe('POST /v1/completions')
    expect(server.status.code).toBe(0)
    const tokens = { 'gen_ai.usage.input_tokens': usage.prompt_tokens, 'gen_ai.usage.output_tokens': usage.completion_tokens }
    expect(server.attributes).toMatchObject({ ...tokens, 'onnxd.stream': false, 'http.response.status_code': 200 })
    expect(calls[0]!.attributes).toMatchObject(tokens)
  })

  it('a request refused for its credential: traced with error.type, not an Error (a client error)', async () => {
    const { url } = await traced()
    const client = clientTraceparent()
    const res = await post(url, '/v1/chat/completions', chatBody(), { authorization: 'Bearer sk-svc-nope-nope-nope-nope-nope-nope', traceparent: client.header })
    expect(res.status).toBe(401)
    const { server, calls } = await spansOf(client.traceId, 1)
    expect(calls).toEqual([])
    expect(server.status.code).not.toBe(STATUS_ERROR)
    expect(server.attributes).toMatchObject({ 'http.response.status_code': 401, 'error.type': 'unauthorized' })
  })
})
