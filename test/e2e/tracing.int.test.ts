// Issue #15: OpenTelemetry traces through the real stack. A client sends a completion with a W3C traceparent to the
// facade, which calls a real node (the engine pool over the tiny default model); both export over OTLP/HTTP to an
// in-test collector. One trace: facade SERVER span (child of the client's span) → CLIENT span per node call (its
// traceparent is what the node receives) → node SERVER span → queue, prefill, decode, in order. And with tracing off:
// no export request and no traceparent sent to the node.
import type { IncomingHttpHeaders } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { FastifyInstance } from 'fastify'
import { createEnginePool } from '../../src/engine/pool/pool.js'
import type { EngineClient } from '../../src/engine/index.js'
import { buildNode } from '../../src/node/app.js'
import { createMetrics, createRegistry } from '../../src/node/plugins/metrics.js'
import { openTracing, type Tracing } from '../../src/shared/tracing.js'
import { bearer, facadeFixture, type FacadeFixture } from '../helpers/facade.js'
import { tinyPlainModelDir } from '../helpers/fixtures.js'
import { arrived, clientTraceparent, KIND, startCollector, type CollectedSpan, type Collector } from '../helpers/tracing-collector.js'
import { listen, testOptions } from '../node/helpers.js'

const MODEL = 'onnxd-tiny'

interface Side {
  node: FastifyInstance
  nodeUrl: string
  /** Headers of each completion request the node received. */
  received: IncomingHttpHeaders[]
  f: FacadeFixture
  facadeUrl: string
}

let collector: Collector
let engine: EngineClient
let nodeTracing: Tracing
let facadeTracing: Tracing
let on: Side
let off: Side

/** A node app over the shared engine pool, recording the headers of completion requests, and a facade before it. */
async function side(tracing: { node: Tracing | null; facade: Tracing | null }): Promise<Side> {
  const modelDir = tinyPlainModelDir()
  const node = buildNode(testOptions({ model: modelDir, modelId: MODEL }), { engine, metrics: createMetrics(createRegistry(), MODEL, 'cpu'), modelDir, tracing: tracing.node })
  const received: IncomingHttpHeaders[] = []
  node.addHook('onRequest', async (request) => {
    if (request.url === '/internal/v1/completions') received.push(request.headers)
  })
  const nodeUrl = await listen(node)
  const f = await facadeFixture({ nodeUrls: [nodeUrl], deps: { tracing: tracing.facade }, options: { keyRpm: 0, fleetRpm: 0 } })
  const facadeUrl = await f.app.listen({ port: 0, host: '127.0.0.1' })
  return { node, nodeUrl, received, f, facadeUrl }
}

beforeAll(async () => {
  collector = await startCollector()
  const env = { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url }
  nodeTracing = (await openTracing(env, 'onnxd-node'))!
  facadeTracing = (await openTracing(env, 'onnxd-facade'))!
  engine = createEnginePool({ modelDir: tinyPlainModelDir(), modelId: MODEL, workers: 1, intraOpThreads: 1 })
  await engine.ready()
  on = await side({ node: nodeTracing, facade: facadeTracing })
  off = await side({ node: null, facade: null })
})

afterAll(async () => {
  for (const s of [on, off]) {
    await s?.f.close()
    await s?.node.close()
  }
  await engine?.close()
  await nodeTracing?.shutdown()
  await facadeTracing?.shutdown()
  await collector?.close()
})

async function chat(s: Side, extra: Record<string, unknown>, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  const res = await fetch(`${s.facadeUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...bearer(s.f.key), ...headers },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 8, ignore_eos: true, temperature: 0, ...extra }),
  })
  return { status: res.status, text: await res.text() }
}

/** The trace's spans once all six have arrived (flushing both exporters as it waits). */
const sixSpans = (traceId: string): Promise<CollectedSpan[]> =>
  arrived(collector, traceId, 6, () => Promise.all([nodeTracing.forceFlush(), facadeTracing.forceFlush()]))

const one = (spans: CollectedSpan[], name: string, service: string): CollectedSpan => {
  const found = spans.filter((s) => s.name === name && s.service === service)
  expect(found, `${service} ${name}`).toHaveLength(1)
  return found[0]!
}

/** Checks the tree of one request's trace and returns its spans by role. */
function checkTree(spans: CollectedSpan[], client: { traceId: string; spanId: string }, route: string) {
  expect(spans.map((s) => `${s.service} ${s.name}`).sort()).toEqual(
    [`onnxd-facade POST ${route}`, 'onnxd-facade POST /internal/v1/completions', 'onnxd-node POST /internal/v1/completions', 'onnxd-node queue', 'onnxd-node prefill', 'onnxd-node decode'].sort(),
  )
  for (const s of spans) expect(s.traceId).toBe(client.traceId)
  const facade = one(spans, `POST ${route}`, 'onnxd-facade')
  const call = one(spans, 'POST /internal/v1/completions', 'onnxd-facade')
  const node = one(spans, 'POST /internal/v1/completions', 'onnxd-node')
  const [queue, prefill, decode] = ['queue', 'prefill', 'decode'].map((n) => one(spans, n, 'onnxd-node')) as [CollectedSpan, CollectedSpan, CollectedSpan]

  expect(facade.kind).toBe(KIND.server)
  expect(facade.parentSpanId).toBe(client.spanId)
  expect(call.kind).toBe(KIND.client)
  expect(call.parentSpanId).toBe(facade.spanId)
  expect(node.kind).toBe(KIND.server)
  expect(node.parentSpanId).toBe(call.spanId)
  for (const p of [queue, prefill, decode]) {
    expect(p.kind).toBe(KIND.internal)
    expect(p.parentSpanId).toBe(node.spanId)
    expect(p.end - p.start).toBeGreaterThanOrEqual(0n)
  }
  // In time: queue, then prefill, then decode, all within the node's span, within the call, within the facade's.
  expect(queue.end).toBeLessThanOrEqual(prefill.start)
  expect(prefill.end).toBeLessThanOrEqual(decode.start)
  expect(prefill.end).toBeLessThan(decode.end)
  expect(node.start).toBeLessThanOrEqual(queue.start)
  expect(decode.end).toBeLessThanOrEqual(node.end)
  expect(facade.start).toBeLessThanOrEqual(call.start)
  expect(call.end).toBeLessThanOrEqual(facade.end)
  for (const s of spans) expect(s.status.code, `${s.name} status`).not.toBe(2)
  return { facade, call, node, queue, prefill, decode }
}

describe('tracing on: one trace from the client through facade, node and engine', () => {
  it('a JSON chat completion: the span tree, the traceparent the node received, and the attributes', async () => {
    const client = clientTraceparent()
    const before = on.received.length
    const res = await chat(on, {}, { traceparent: client.header })
    expect(res.status).toBe(200)
    const usage = (JSON.parse(res.text) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage
    expect(usage.completion_tokens).toBe(8)

    const { facade, call, node, prefill, decode } = checkTree(await sixSpans(client.traceId), client, '/v1/chat/completions')
    // What the node received is the facade's CLIENT span, in the trace the client began.
    expect(on.received.slice(before).map((h) => h.traceparent)).toEqual([`00-${client.traceId}-${call.spanId}-01`])

    expect(facade.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.route': '/v1/chat/completions',
      'http.response.status_code': 200,
      'gen_ai.request.model': MODEL,
      'onnxd.stream': false,
      'gen_ai.usage.input_tokens': usage.prompt_tokens,
      'gen_ai.usage.output_tokens': 8,
      'gen_ai.response.finish_reasons': ['length'],
    })
    expect(call.attributes).toMatchObject({ 'http.response.status_code': 200, 'server.address': '127.0.0.1', 'gen_ai.usage.output_tokens': 8 })
    expect(node.attributes).toMatchObject({
      'http.response.status_code': 200,
      'gen_ai.request.model': MODEL,
      'gen_ai.usage.input_tokens': usage.prompt_tokens,
      'gen_ai.usage.output_tokens': 8,
      'gen_ai.usage.cache_read.input_tokens': 0,
      'gen_ai.response.finish_reasons': ['length'],
    })
    expect(prefill.attributes).toMatchObject({ 'onnxd.prompt_tokens': usage.prompt_tokens, 'onnxd.cached_prompt_tokens': 0 })
    expect(decode.attributes).toMatchObject({ 'onnxd.completion_tokens': 8, 'onnxd.finish_reason': 'length' })
    // OTLP/HTTP with JSON, at the traces path.
    expect(collector.requests.every((r) => r.path === '/v1/traces' && /application\/json/.test(String(r.headers['content-type'])))).toBe(true)
  })

  it('a streamed legacy completion: the same tree, the spans ending with the stream', async () => {
    const client = clientTraceparent()
    const res = await fetch(`${on.facadeUrl}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...bearer(on.f.key), traceparent: client.header },
      body: JSON.stringify({ model: MODEL, prompt: 'Once upon a time', max_tokens: 6, ignore_eos: true, stream: true, stream_options: { include_usage: true } }),
    })
    expect(res.status).toBe(200)
    expect(await res.text()).toContain('data: [DONE]')
    const { facade, node } = checkTree(await sixSpans(client.traceId), client, '/v1/completions')
    expect(facade.attributes).toMatchObject({ 'onnxd.stream': true, 'gen_ai.usage.output_tokens': 6, 'http.response.status_code': 200 })
    expect(node.attributes).toMatchObject({ 'onnxd.stream': true, 'gen_ai.usage.output_tokens': 6 })
  })

  it('without a client traceparent the facade begins the trace (its span is a root)', async () => {
    const before = on.received.length
    expect((await chat(on, { max_tokens: 2 })).status).toBe(200)
    const traceparent = String(on.received[before]?.traceparent)
    expect(traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/)
    const traceId = traceparent.split('-')[1]!
    const spans = await sixSpans(traceId)
    expect(one(spans, 'POST /v1/chat/completions', 'onnxd-facade').parentSpanId).toBe('')
  })
})

describe('tracing off (the default)', () => {
  it('sends no traceparent to the node and exports nothing', async () => {
    await Promise.all([nodeTracing.forceFlush(), facadeTracing.forceFlush()])
    const exports = collector.requests.length
    const client = clientTraceparent()
    const res = await chat(off, { stream: true }, { traceparent: client.header })
    expect(res.status).toBe(200)
    expect((await chat(off, {}, { traceparent: client.header })).status).toBe(200)
    expect(off.received).toHaveLength(2)
    for (const h of off.received) expect(h.traceparent).toBeUndefined()
    // Nothing of these requests reaches the collector (the traced side's exporters flushed, to be sure).
    await Promise.all([nodeTracing.forceFlush(), facadeTracing.forceFlush()])
    expect(collector.trace(client.traceId)).toEqual([])
    expect(collector.requests.length).toBe(exports)
  })
})
