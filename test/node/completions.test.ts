// POST /internal/v1/completions answered as JSON (app.inject, fake engine): success shape, and every error status
// the node answers itself or maps from the engine, in the spec's error object.
import { afterEach, describe, expect, it } from 'vitest'
import { completionBody, errorOf, testNode, URL_PATH, type TestNode } from './helpers.js'
import { REQUEST_ID_PATTERN } from '../../src/contract/completions.js'
import { deferred } from '../helpers/fake-engine.js'

let node: TestNode | null = null
afterEach(async () => {
  await node?.app.close()
  node = null
})

describe('POST /internal/v1/completions (JSON)', () => {
  it('answers id, model, text, finish_reason, usage, timings and output_ids', async () => {
    // As the real engine does, `done` brings the last token (and any held-back text) as a final delta.
    node = testNode({ script: [{ accept: 4 }, { token: 'He', ids: [7] }, { token: 'l', ids: [8] }, { done: 'stop', text: 'lo', ids: [9] }] })
    const res = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody({ request_id: 'req-1' }) })
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({
      id: 'req-1',
      model: 'onnxd-tiny',
      text: 'Hello',
      finish_reason: 'stop',
      usage: { prompt_tokens: 4, completion_tokens: 3 },
      timings: { queue_ms: 1, ttft_ms: 5, total_ms: 20 },
      output_ids: [7, 8, 9],
      system_fingerprint: expect.stringMatching(/^fp_[0-9a-f]{10}$/),
    })
    expect(node.engine.submissions[0]?.req).toMatchObject({ request_id: 'req-1', model: 'onnxd-tiny', max_tokens: 8 })
  })

  it('generates a request id when none is given, and takes x-request-id when sane', async () => {
    node = testNode()
    const a = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody() })
    expect(a.json<{ id: string }>().id).toMatch(/^cmpl-[0-9a-f-]{36}$/)
    const b = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody(), headers: { 'x-request-id': 'gw-42' } })
    expect(b.json<{ id: string }>().id).toBe('gw-42')
    expect(node.engine.submissions.map((s) => s.req.request_id)).toEqual([a.json<{ id: string }>().id, 'gw-42'])
  })

  it('passes prompt and input_ids through as the engine request', async () => {
    node = testNode()
    expect((await node.app.inject({ method: 'POST', url: URL_PATH, payload: { model: 'onnxd-tiny', prompt: 'raw' } })).statusCode).toBe(200)
    expect((await node.app.inject({ method: 'POST', url: URL_PATH, payload: { model: 'onnxd-tiny', input_ids: [1, 2, 3] } })).statusCode).toBe(200)
    expect(node.engine.submissions.map((s) => s.req.prompt ?? s.req.input_ids)).toEqual(['raw', [1, 2, 3]])
  })

  describe('400 invalid_request_error', () => {
    it('on unparseable JSON', async () => {
      node = testNode()
      const res = await node.app.inject({ method: 'POST', url: URL_PATH, headers: { 'content-type': 'application/json' }, payload: '{"model": "onnxd-tiny",' })
      expect(res.statusCode).toBe(400)
      expect(errorOf(res)).toEqual({ message: 'The request body is not valid JSON', type: 'invalid_request_error', code: 400 })
    })

    it('on an empty JSON body', async () => {
      node = testNode()
      const res = await node.app.inject({ method: 'POST', url: URL_PATH, headers: { 'content-type': 'application/json' }, payload: '' })
      expect(res.statusCode).toBe(400)
      expect(errorOf(res).type).toBe('invalid_request_error')
    })

    it('on a missing `model`, naming it', async () => {
      node = testNode()
      const res = await node.app.inject({ method: 'POST', url: URL_PATH, payload: { messages: [{ role: 'user', content: 'hi' }] } })
      expect(res.statusCode).toBe(400)
      expect(errorOf(res)).toMatchObject({ message: "Missing required field 'model'", type: 'invalid_request_error' })
    })

    it('on an unknown field, naming it', async () => {
      node = testNode()
      const res = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody({ temprature: 0.5 }) })
      expect(res.statusCode).toBe(400)
      expect(errorOf(res).message).toBe("Unknown field 'temprature'")
      expect(node.engine.submissions).toHaveLength(0)
    })

    it('on a wrong type, without coercing "8" into 8', async () => {
      node = testNode()
      const res = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody({ max_tokens: '8' }) })
      expect(res.statusCode).toBe(400)
      expect(errorOf(res).message).toBe("'max_tokens' must be integer")
    })

    it('on a request_id that cannot go back in the x-request-id header, streamed or not', async () => {
      node = testNode()
      for (const request_id of ['\ud800', 'a b', 'x\ny', '', 'a'.repeat(129)]) {
        for (const stream of [true, false]) {
          const res = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody({ request_id, stream }) })
          expect(res.statusCode, JSON.stringify({ request_id, stream })).toBe(400)
          expect(errorOf(res).message).toBe(`'request_id' must match pattern "${REQUEST_ID_PATTERN}"`)
        }
      }
      expect(node.engine.submissions).toHaveLength(0)
      const ok = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody({ request_id: 'gw.1:a@b-C_9' }) })
      expect(ok.json<{ id: string }>().id).toBe('gw.1:a@b-C_9')
    })

    it('on a nested shape error', async () => {
      node = testNode()
      const res = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody({ messages: [{ role: 'user' }] }) })
      expect(res.statusCode).toBe(400)
      expect(errorOf(res).message).toBe("Missing required field 'messages.0.content'")
    })

    it('when none, or more than one, of messages / prompt / input_ids is given', async () => {
      node = testNode()
      const none = await node.app.inject({ method: 'POST', url: URL_PATH, payload: { model: 'onnxd-tiny' } })
      expect(none.statusCode).toBe(400)
      expect(errorOf(none).message).toMatch(/one of 'messages', 'prompt' or 'input_ids'/)
      const two = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody({ prompt: 'x' }) })
      expect(two.statusCode).toBe(400)
      expect(errorOf(two).message).toBe("Exactly one of 'messages', 'prompt' or 'input_ids' is allowed. Given: messages, prompt")
    })

    it('when the body is not JSON', async () => {
      node = testNode()
      const res = await node.app.inject({ method: 'POST', url: URL_PATH, headers: { 'content-type': 'text/plain' }, payload: 'hello' })
      expect(res.statusCode).toBe(400)
      expect(errorOf(res).type).toBe('invalid_request_error')
    })

    it('when the body is a JSON array', async () => {
      node = testNode()
      const res = await node.app.inject({ method: 'POST', url: URL_PATH, payload: '[]', headers: { 'content-type': 'application/json' } })
      expect(res.statusCode).toBe(400)
      expect(errorOf(res).message).toBe('The request body must be object')
    })
  })

  it('answers 404 for an unknown route, in the error object', async () => {
    node = testNode()
    const res = await node.app.inject({ method: 'GET', url: '/v1/models' })
    expect(res.statusCode).toBe(404)
    expect(errorOf(res)).toEqual({ message: 'Unknown route: GET /v1/models', type: 'invalid_request_error', code: 404 })
  })

  it('answers 413 for a body over the limit', async () => {
    node = testNode({}, { options: { bodyLimit: 2048 } })
    const res = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody({ prompt: 'x'.repeat(4096), messages: undefined }) })
    expect(res.statusCode).toBe(413)
    expect(errorOf(res).type).toBe('invalid_request_error')
    expect(node.engine.submissions).toHaveLength(0)
  })

  it('answers 422 for a model this node does not serve', async () => {
    node = testNode()
    const res = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody({ model: 'gpt-4' }) })
    expect(res.statusCode).toBe(422)
    expect(errorOf(res)).toMatchObject({ type: 'invalid_request_error', message: "The model 'gpt-4' does not exist on this node. Available: onnxd-tiny" })
  })

  it('answers an engine error before acceptance with its own status (422)', async () => {
    node = testNode({ script: [{ error: 'context_length_exceeded', message: 'prompt tokens + max_tokens must be <= 2048. Given: 2000 + 100' }] })
    const res = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody() })
    expect(res.statusCode).toBe(422)
    expect(errorOf(res)).toEqual({ message: 'prompt tokens + max_tokens must be <= 2048. Given: 2000 + 100', type: 'invalid_request_error', code: 422 })
  })

  it('answers queue_full with 503 and Retry-After from the error details', async () => {
    node = testNode({ script: [{ error: 'queue_full', message: 'queue full (256 waiting)', details: { retryAfterS: 2.5 } }] })
    const res = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody() })
    expect(res.statusCode).toBe(503)
    expect(res.headers['retry-after']).toBe('3')
    expect(errorOf(res).type).toBe('service_unavailable')
  })

  it('answers not_ready (model loading) with 503 and Retry-After: 1 by default', async () => {
    node = testNode({ script: [{ error: 'not_ready', message: 'model is loading' }] })
    const res = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody() })
    expect(res.statusCode).toBe(503)
    expect(res.headers['retry-after']).toBe('1')
  })

  it('keeps 5xx bodies generic and logs the detail', async () => {
    node = testNode({ script: [{ accept: 3 }, { error: 'worker_crashed', message: 'inference worker failed: at /srv/secret/path.js:12' }] }, { captureLogs: true })
    const res = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody() })
    expect(res.statusCode).toBe(500)
    expect(errorOf(res)).toEqual({ message: 'The inference worker failed while running the request; retry it', type: 'server_error', code: 500 })
    expect(res.body).not.toContain('/srv/secret')
    expect(node.logs.join('')).toContain('/srv/secret/path.js')
  })

  it('turns an engine whose submit throws into a generic 500', async () => {
    node = testNode()
    node.engine.submit = () => {
      throw new Error('boom: internal detail')
    }
    const res = await node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody() })
    expect(res.statusCode).toBe(500)
    expect(errorOf(res)).toEqual({ message: 'Internal server error', type: 'server_error', code: 500 })
  })

  it('logs sizes and ids but never the prompt text or the authorization header', async () => {
    node = testNode({}, { captureLogs: true })
    const secret = 'the secret prompt text 12345'
    const res = await node.app.inject({
      method: 'POST',
      url: URL_PATH,
      payload: completionBody({ messages: [{ role: 'user', content: secret }], request_id: 'log-1' }),
      headers: { authorization: 'Bearer sk-svc-abcdefghijklmnopqrstuvwxyz' },
    })
    expect(res.statusCode).toBe(200)
    const logs = node.logs.join('')
    expect(logs).toContain('"request_id":"log-1"')
    expect(logs).toContain('completion finished')
    expect(logs).not.toContain(secret)
    expect(logs).not.toContain('sk-svc-abcdefghijklmnopqrstuvwxyz')
    // Even a handler that logs the headers cannot leak the credential.
    node.app.log.info({ headers: { authorization: 'Bearer sk-svc-zzzzzzzzzzzzzzzzzzzzzzzz' } }, 'headers')
    expect(node.logs.join('')).not.toContain('sk-svc-zzzz')
    expect(node.logs.join('')).toContain('[redacted]')
  })

  it('holds the JSON answer until the sequence is done (the engine paces it)', async () => {
    const gate = deferred()
    node = testNode({ script: [{ accept: 2 }, { token: 'a' }, { wait: gate.promise }, { token: 'b' }, { done: 'length' }] })
    const pending = node.app.inject({ method: 'POST', url: URL_PATH, payload: completionBody() })
    const seq = await node.engine.submission(0)
    expect(seq.finished.settled).toBe(false)
    gate.resolve()
    const res = await pending
    expect(res.json()).toMatchObject({ text: 'ab', finish_reason: 'length', usage: { prompt_tokens: 2, completion_tokens: 2 } })
  })
})
