// Streamed completions and client disconnects over a real listening server (port 0): SSE framing and [DONE],
// errors before and after acceptance, and cancellation the moment a client leaves (SSE and JSON alike).
import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http'
import { connect } from 'node:net'
import { once } from 'node:events'
import { afterEach, describe, expect, it } from 'vitest'
import { deferred } from '../helpers/fake-engine.js'
import { completionBody, listen, post, readUntil, sseData, testNode, URL_PATH, type TestNode } from './helpers.js'

let node: TestNode | null = null
afterEach(async () => {
  await node?.app.close()
  node = null
})

/** A raw HTTP request whose socket the test can destroy, resolving once the response headers arrive. */
function rawPost(base: string, body: unknown): { req: ClientRequest; response: Promise<IncomingMessage> } {
  const req = httpRequest(`${base}${URL_PATH}`, { method: 'POST', headers: { 'content-type': 'application/json' } })
  const response = new Promise<IncomingMessage>((resolve, reject) => {
    req.on('response', resolve)
    req.on('error', (e) => (req.destroyed ? undefined : reject(e)))
  })
  req.end(JSON.stringify(body))
  return { req, response }
}

describe('POST /internal/v1/completions (stream: true)', () => {
  it('sends one data frame per delta, a final frame with finish_reason, usage and timings, then [DONE]', async () => {
    node = testNode({ script: [{ accept: 4 }, { token: 'Hel', ids: [7] }, { token: '', ids: [] }, { token: 'lo', ids: [8] }, { done: 'length' }] })
    const base = await listen(node.app)
    const res = await post(base, completionBody({ stream: true, request_id: 'sse-1' }))
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8')
    expect(res.headers.get('cache-control')).toBe('no-cache')
    const text = await res.text()
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true)
    const frames = sseData(text)
    expect(frames.at(-1)).toBe('[DONE]')
    expect(frames.slice(0, -1).map((f) => JSON.parse(f) as unknown)).toEqual([
      { id: 'sse-1', text: 'Hel', ids: [7], usage: { prompt_tokens: 4, completion_tokens: 1 } },
      { id: 'sse-1', text: 'lo', ids: [8], usage: { prompt_tokens: 4, completion_tokens: 2 } },
      { id: 'sse-1', text: '', finish_reason: 'length', usage: { prompt_tokens: 4, completion_tokens: 2 }, timings: { queue_ms: 1, ttft_ms: 5, total_ms: 20 }, system_fingerprint: expect.stringMatching(/^fp_[0-9a-f]{10}$/) },
    ])
  })

  it("honours a client's Connection: close: the server closes the socket after the stream", async () => {
    node = testNode({ script: [{ accept: 1 }, { token: 'Hi', ids: [7] }, { done: 'length' }] })
    const base = new URL(await listen(node.app))
    const body = JSON.stringify(completionBody({ stream: true }))
    const sock = connect(Number(base.port), base.hostname)
    sock.write(`POST ${URL_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`)
    let raw = ''
    sock.on('data', (d: Buffer) => (raw += d.toString()))
    await once(sock, 'end') // the server ended the connection; a keep-alive answer would leave it open
    const head = raw.slice(0, raw.indexOf('\r\n\r\n')).toLowerCase()
    expect(head).toContain('connection: close')
    expect(head).not.toContain('keep-alive')
    expect(raw).toContain('data: [DONE]')
    sock.destroy()
  })

  it('flushes each delta as the engine produces it', async () => {
    node = testNode({ script: 'manual' })
    const base = await listen(node.app)
    const pending = post(base, completionBody({ stream: true, request_id: 's' }))
    const seq = await node.engine.submission(0)
    // Headers go out at acceptance, before any token exists.
    seq.accept(2)
    const res = await pending
    expect(res.status).toBe(200)
    const reader = res.body!.getReader()
    const got = { text: '' }
    seq.token('one')
    await readUntil(reader, got, (t) => t.includes('"one"'))
    expect(got.text).not.toContain('[DONE]')
    seq.token(' two')
    await readUntil(reader, got, (t) => t.includes('" two"'))
    seq.done('stop')
    await readUntil(reader, got, (t) => t.endsWith('data: [DONE]\n\n'))
    expect(sseData(got.text).slice(0, -1).map((f) => (JSON.parse(f) as { text: string }).text)).toEqual(['one', ' two', ''])
  })

  it('answers an engine error before acceptance as a plain JSON error with its status', async () => {
    node = testNode({ script: [{ error: 'invalid_value', message: "'temperature' must be >= 0. Given: -1" }] })
    const base = await listen(node.app)
    const res = await post(base, completionBody({ stream: true }))
    expect(res.status).toBe(422)
    expect(res.headers.get('content-type')).toMatch(/^application\/json/)
    expect(await res.json()).toEqual({ error: { message: "'temperature' must be >= 0. Given: -1", type: 'invalid_request_error', code: 422 } })
  })

  it('answers queue_full before acceptance as 503 with Retry-After, not as a stream', async () => {
    node = testNode({ script: [{ error: 'queue_full', message: 'queue full', details: { retryAfterS: 1 } }] })
    const base = await listen(node.app)
    const res = await post(base, completionBody({ stream: true }))
    expect(res.status).toBe(503)
    expect(res.headers.get('retry-after')).toBe('1')
    expect(((await res.json()) as { error: { type: string } }).error.type).toBe('service_unavailable')
  })

  it('sends an error after acceptance as an error frame (with usage so far), then [DONE]', async () => {
    node = testNode({ script: [{ accept: 3 }, { token: 'a' }, { error: 'worker_crashed', message: 'worker 3 died: detail' }] })
    const base = await listen(node.app)
    const res = await post(base, completionBody({ stream: true, request_id: 'e-1' }))
    expect(res.status).toBe(200)
    const frames = sseData(await res.text())
    expect(frames).toHaveLength(3)
    expect(JSON.parse(frames[0]!)).toEqual({ id: 'e-1', text: 'a', ids: [100], usage: { prompt_tokens: 3, completion_tokens: 1 } })
    expect(JSON.parse(frames[1]!)).toEqual({
      error: { message: 'The inference worker failed while running the request; retry it', type: 'server_error', code: 500 },
      usage: { prompt_tokens: 3, completion_tokens: 1 },
    })
    expect(frames[2]).toBe('[DONE]')
  })

  it('sends the delta that `done` carries as a last data frame', async () => {
    node = testNode({ script: 'manual' })
    const base = await listen(node.app)
    const pending = post(base, completionBody({ stream: true, request_id: 'h' }))
    const seq = await node.engine.submission(0)
    seq.accept(1)
    seq.token('ab', [1])
    // The engine sends its last sampled token, and any text it held back, with `done`.
    seq.done('stop', { text: 'c', ids: [2] })
    const frames = sseData(await (await pending).text())
    expect(frames.slice(0, 2).map((f) => JSON.parse(f) as { text: string; ids: number[] }).map(({ text, ids }) => ({ text, ids }))).toEqual([
      { text: 'ab', ids: [1] },
      { text: 'c', ids: [2] },
    ])
    expect(JSON.parse(frames[2]!)).toMatchObject({ finish_reason: 'stop' })
  })
})

describe('client disconnect', () => {
  it('cancels the sequence when an SSE client disconnects mid-stream', async () => {
    node = testNode({ script: 'manual' })
    const base = await listen(node.app)
    const { req, response } = rawPost(base, completionBody({ stream: true, request_id: 'gone-1' }))
    const seq = await node.engine.submission(0)
    seq.accept(3)
    seq.token('first')
    const res = await response
    await new Promise<void>((resolve) => res.once('data', () => resolve()))
    expect(node.engine.cancellations).toEqual([])
    req.destroy()
    await seq.cancellation.promise
    expect(node.engine.cancellations).toEqual(['gone-1'])
    // The node stays healthy and serves the next request.
    await node.app.node.whenIdle()
    const text = (await node.app.inject({ url: '/metrics' })).body
    expect(text).toContain('onnxd_request_failures_total{model_name="onnxd-tiny",code="client_gone",outcome="client_gone"} 1')
    expect(text).toContain('onnxd_request_success_total{model_name="onnxd-tiny",finished_reason="abort"} 1')
  })

  it('cancels the sequence when a JSON client disconnects before the answer', async () => {
    node = testNode({ script: 'manual' })
    const base = await listen(node.app)
    const { req } = rawPost(base, completionBody({ request_id: 'gone-2' }))
    const seq = await node.engine.submission(0)
    seq.accept(3)
    seq.token('partial')
    req.destroy()
    await seq.cancellation.promise
    expect(node.engine.cancellations).toEqual(['gone-2'])
  })

  it('cancels a sequence still waiting for admission when its client leaves', async () => {
    const admitted = deferred()
    node = testNode({ script: [{ wait: admitted.promise }, { accept: 3 }, { done: 'stop' }] })
    const base = await listen(node.app)
    const { req } = rawPost(base, completionBody({ stream: true, request_id: 'gone-3' }))
    const seq = await node.engine.submission(0)
    req.destroy()
    await seq.cancellation.promise
    admitted.resolve()
    expect(node.engine.cancellations).toEqual(['gone-3'])
    expect(seq.events).toEqual([])
  })

  it('does not cancel a sequence that finished normally', async () => {
    node = testNode()
    const base = await listen(node.app)
    const res = await post(base, completionBody({ stream: true }))
    expect(sseData(await res.text()).at(-1)).toBe('[DONE]')
    const json = await post(base, completionBody())
    expect(json.status).toBe(200)
    await node.app.close()
    expect(node.engine.cancellations).toEqual([])
    node = null
  })
})
