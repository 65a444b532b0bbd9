// Issue #15, the node's side: a SERVER span per completion, child of the traceparent it receives, its engine phases
// under it; failed and cancelled requests end their spans as errors (a 4xx is not a server error). A fake engine
// reports no phase instants, so the one phase seen is `queue`, from the submit to the end.
import { request as httpRequest } from 'node:http'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { openTracing, type Tracing } from '../../src/shared/tracing.js'
import { deferred } from '../helpers/fake-engine.js'
import { arrived, clientTraceparent, KIND, startCollector, STATUS_ERROR, until, type CollectedSpan, type Collector } from '../helpers/tracing-collector.js'
import { completionBody, listen, testNode, URL_PATH, type TestNode } from './helpers.js'

let collector: Collector
let tracing: Tracing
let node: TestNode | null = null

beforeAll(async () => {
  collector = await startCollector()
  tracing = (await openTracing({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${collector.url}/v1/traces`, OTEL_SERVICE_NAME: 'node-under-test' }, 'onnxd-node'))!
})
afterAll(async () => {
  await tracing?.shutdown()
  await collector?.close()
})
afterEach(async () => {
  await node?.app.close()
  node = null
})

const send = (base: string, body: Record<string, unknown>, traceparent: string): Promise<Response> =>
  fetch(`${base}${URL_PATH}`, { method: 'POST', headers: { 'content-type': 'application/json', traceparent }, body: JSON.stringify(body) })

/** The trace's spans once `n` have arrived. */
async function spans(traceId: string, n: number): Promise<{ server: CollectedSpan; phases: CollectedSpan[] }> {
  const all = await arrived(collector, traceId, n, () => tracing.forceFlush())
  expect(all).toHaveLength(n)
  const server = all.find((s) => s.kind === KIND.server)!
  expect(server).toMatchObject({ name: `POST ${URL_PATH}`, service: 'node-under-test' })
  const phases = all.filter((s) => s !== server)
  for (const p of phases) expect(p.parentSpanId).toBe(server.spanId)
  return { server, phases }
}

describe('node spans: failures and cancellations end as errors', () => {
  it('a JSON completion the engine fails after accepting it: a 500, an Error span naming the code, the queue phase failed', async () => {
    node = testNode({ script: [{ accept: 3 }, { error: 'worker_crashed' }] }, { deps: { tracing } })
    const base = await listen(node.app)
    const client = clientTraceparent()
    const res = await send(base, completionBody(), client.header)
    expect(res.status).toBe(500)
    const { server, phases } = await spans(client.traceId, 2)
    expect(server.parentSpanId).toBe(client.spanId)
    expect(server.status.code).toBe(STATUS_ERROR)
    expect(server.attributes).toMatchObject({ 'http.response.status_code': 500, 'error.type': 'worker_crashed', 'gen_ai.request.model': 'onnxd-tiny' })
    expect(phases.map((p) => [p.name, p.status.code, p.attributes['error.type']])).toEqual([['queue', STATUS_ERROR, 'worker_crashed']])
    expect(phases[0]!.start).toBeGreaterThanOrEqual(server.start)
    expect(phases[0]!.end).toBeLessThanOrEqual(server.end)
  })

  it('a stream that fails after its 200: the span is an Error although the status is 200', async () => {
    node = testNode({ script: [{ accept: 3 }, { token: 'Hel' }, { error: 'internal' }] }, { deps: { tracing } })
    const base = await listen(node.app)
    const client = clientTraceparent()
    const res = await send(base, completionBody({ stream: true }), client.header)
    expect(res.status).toBe(200)
    expect(await res.text()).toContain('"error"')
    const { server } = await spans(client.traceId, 2)
    expect(server.status.code).toBe(STATUS_ERROR)
    expect(server.attributes).toMatchObject({ 'http.response.status_code': 200, 'error.type': 'internal', 'onnxd.stream': true })
  })

  it('a client that disconnects mid-stream: client_gone, on the span and on the phase it was in', async () => {
    const gate = deferred<void>()
    node = testNode({ script: [{ accept: 3 }, { token: 'Hel' }, { wait: gate.promise }, { done: 'length' }] }, { deps: { tracing } })
    const base = await listen(node.app)
    const client = clientTraceparent()
    const req = httpRequest(`${base}${URL_PATH}`, { method: 'POST', headers: { 'content-type': 'application/json', traceparent: client.header } })
    const firstBytes = new Promise<void>((resolve, reject) => {
      req.on('response', (res) => res.once('data', () => resolve()))
      req.on('error', (e) => (req.destroyed ? undefined : reject(e)))
    })
    req.end(JSON.stringify(completionBody({ stream: true })))
    await firstBytes
    req.destroy()
    await until(() => node!.engine.cancellations.length === 1, 'the cancellation')
    gate.resolve()
    const { server, phases } = await spans(client.traceId, 2)
    expect(server.status.code).toBe(STATUS_ERROR)
    expect(server.attributes['error.type']).toBe('client_gone')
    expect(phases.map((p) => [p.name, p.status.code, p.attributes['error.type']])).toEqual([['queue', STATUS_ERROR, 'client_gone']])
  })

  it('a request refused as invalid (400): error.type set, status not Error (a client error is not a server failure)', async () => {
    node = testNode({}, { deps: { tracing } })
    const base = await listen(node.app)
    const client = clientTraceparent()
    const res = await send(base, { model: 'onnxd-tiny' }, client.header)
    expect(res.status).toBe(400)
    const { server, phases } = await spans(client.traceId, 1)
    expect(phases).toEqual([])
    expect(server.status.code).not.toBe(STATUS_ERROR)
    expect(server.attributes).toMatchObject({ 'http.response.status_code': 400, 'error.type': 'invalid_request' })
  })

  it('a completion that succeeds is not an error; the fake engine reports no phase instants, so its one phase is queue', async () => {
    node = testNode({}, { deps: { tracing } })
    const base = await listen(node.app)
    const client = clientTraceparent()
    expect((await send(base, completionBody(), client.header)).status).toBe(200)
    const { server, phases } = await spans(client.traceId, 2)
    expect(server.status.code).toBe(0)
    expect(server.attributes).toMatchObject({ 'gen_ai.usage.input_tokens': 3, 'gen_ai.usage.output_tokens': 2, 'gen_ai.response.finish_reasons': ['length'] })
    expect(phases.map((p) => [p.name, p.status.code])).toEqual([['queue', 0]])
  })

  it('other routes are not traced', async () => {
    node = testNode({}, { deps: { tracing } })
    const base = await listen(node.app)
    const client = clientTraceparent()
    expect((await fetch(`${base}/health`, { headers: { traceparent: client.header } })).status).toBe(200)
    await tracing.forceFlush()
    expect(collector.trace(client.traceId)).toEqual([])
  })
})
