import { afterEach, describe, expect, it } from 'vitest'
import type { FakeNode } from '../helpers/fake-node.js'
import { bearer, chatBody, facadeFixture, MODEL, sseEvents, type FacadeFixture, type FixtureOptions } from '../helpers/facade.js'

let f: FacadeFixture | null = null
afterEach(async () => {
  await f?.close()
  f = null
})
const setup = async (o: FixtureOptions = {}): Promise<FacadeFixture> => (f = await facadeFixture(o))

const post = (fx: FacadeFixture, payload: unknown, headers: Record<string, string> = {}) =>
  fx.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { ...bearer(fx.key), ...headers }, payload: payload as string })

function expectError(res: { statusCode: number; json(): unknown }, status: number, type: string, message: RegExp): void {
  expect(res.statusCode).toBe(status)
  const body = res.json() as { error: { message: string; type: string; code: number } }
  expect(Object.keys(body)).toEqual(['error'])
  expect(body.error.type).toBe(type)
  expect(body.error.code).toBe(status)
  expect(body.error.message).toMatch(message)
}

describe('POST /v1/chat/completions', () => {
  it('answers an OpenAI chat.completion and forwards only the contract fields to the node', async () => {
    const fx = await setup()
    const res = await post(fx, chatBody({ max_tokens: 3, temperature: 0.5, n: 1, user: 'u1', stream_options: null, tools: [], seed: 7, stop: ['\n'] }))
    expect(res.statusCode).toBe(200)
    const body = res.json()
    expect(res.headers['x-request-id']).toBe(body.id)
    expect(body).toEqual({
      id: expect.stringMatching(/^chatcmpl-[A-Za-z0-9]{24}$/),
      object: 'chat.completion',
      created: expect.any(Number),
      model: MODEL,
      choices: [{ index: 0, message: { role: 'assistant', content: 'Hello, world' }, finish_reason: 'length', logprobs: null }],
      usage: { prompt_tokens: 4, completion_tokens: 3, total_tokens: 7, prompt_tokens_details: { cached_tokens: 0 } },
    })
    expect(fx.nodes[0]!.requests).toEqual([
      { model: MODEL, messages: [{ role: 'user', content: 'Say hello' }], request_id: body.id, tenant: expect.any(String), max_tokens: 3, temperature: 0.5, seed: 7, stop: ['\n'] },
    ])
  })

  it('accepts stop_token_ids and forwards them to the node (which checks them against the vocabulary)', async () => {
    const fx = await setup()
    expect((await post(fx, chatBody({ stop_token_ids: [2, 7] }))).statusCode).toBe(200)
    expect(fx.nodes[0]!.requests[0]).toMatchObject({ stop_token_ids: [2, 7] })
    expectError(await post(fx, chatBody({ stop_token_ids: [-1] })), 422, 'invalid_request_error', /'stop_token_ids.0'/)
    expectError(await post(fx, chatBody({ stop_token_ids: 2 })), 422, 'invalid_request_error', /'stop_token_ids'.*array/)
  })

  it('flattens text content parts, maps developer to system, and accepts max_completion_tokens', async () => {
    const fx = await setup()
    const res = await post(fx, {
      model: MODEL,
      messages: [
        { role: 'developer', content: 'Be brief.' },
        { role: 'user', content: [{ type: 'text', text: 'Hi ' }, { type: 'text', text: 'there' }] },
      ],
      max_completion_tokens: 2,
    })
    expect(res.statusCode).toBe(200)
    expect(fx.nodes[0]!.requests[0]).toMatchObject({
      messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi there' }],
      max_tokens: 2,
    })
  })

  it('streams chat.completion.chunk events: role, content deltas, finish, usage, [DONE]', async () => {
    const fx = await setup({ node: { tokens: ['A', 'B', 'C'] } })
    const res = await post(fx, chatBody({ stream: true, stream_options: { include_usage: true } }))
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toMatch(/^text\/event-stream/)
    expect(res.headers['x-ratelimit-limit-requests']).toBeDefined()
    const events = sseEvents(res.body)
    expect(events.at(-1)).toBe('[DONE]')
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e))
    for (const c of chunks) expect(c).toMatchObject({ id: chunks[0].id, object: 'chat.completion.chunk', model: MODEL })
    expect(chunks.map((c) => c.choices[0]?.delta ?? null)).toEqual([{ role: 'assistant' }, { content: 'A' }, { content: 'B' }, { content: 'C' }, {}, null])
    expect(chunks[4].choices[0].finish_reason).toBe('stop')
    expect(chunks.slice(0, 5).every((c) => c.usage === null)).toBe(true)
    expect(chunks[5]).toMatchObject({ choices: [], usage: { prompt_tokens: 4, completion_tokens: 3, total_tokens: 7, prompt_tokens_details: { cached_tokens: 0 } } })
    expect(fx.nodes[0]!.requests[0]).not.toHaveProperty('stream_options')
  })

  it('streams without a usage chunk unless asked', async () => {
    const fx = await setup({ node: { tokens: ['A'] } })
    const chunks = sseEvents((await post(fx, chatBody({ stream: true }))).body)
    expect(chunks).toHaveLength(4)
    expect(JSON.parse(chunks[2]!)).not.toHaveProperty('usage')
  })
})

describe('400 invalid_request_error', () => {
  it('unparseable JSON', async () => {
    const fx = await setup()
    expectError(await post(fx, '{"model": ', { 'content-type': 'application/json' }), 400, 'invalid_request_error', /not valid JSON/)
  })
  it('an empty body', async () => {
    const fx = await setup()
    expectError(await post(fx, '', { 'content-type': 'application/json' }), 400, 'invalid_request_error', /empty/)
  })
  it('a body that is not an object', async () => {
    const fx = await setup()
    expectError(await post(fx, '[1,2]', { 'content-type': 'application/json' }), 400, 'invalid_request_error', /body must be object/)
  })
  it('missing model', async () => {
    const fx = await setup()
    expectError(await post(fx, { messages: [{ role: 'user', content: 'x' }] }), 400, 'invalid_request_error', /Missing required field 'model'/)
  })
  it('missing messages', async () => {
    const fx = await setup()
    expectError(await post(fx, { model: MODEL }), 400, 'invalid_request_error', /Missing required field 'messages'/)
  })
  it('a message without content', async () => {
    const fx = await setup()
    expectError(await post(fx, { model: MODEL, messages: [{ role: 'user' }] }), 400, 'invalid_request_error', /Missing required field 'messages.0.content'/)
  })
})

describe('422 invalid_request_error', () => {
  it('a required field present with a value of the wrong type (the spec: valid JSON, invalid values)', async () => {
    const fx = await setup()
    expectError(await post(fx, { model: 7, messages: [] }), 422, 'invalid_request_error', /'model' must be string/)
    expectError(await post(fx, { model: MODEL, messages: 'hi' }), 422, 'invalid_request_error', /'messages' must be array/)
    expectError(await post(fx, { model: MODEL, messages: ['hi'] }), 422, 'invalid_request_error', /'messages.0' must be object/)
    expect(fx.nodes[0]!.requests).toHaveLength(0)
  })
  it('unknown model', async () => {
    const fx = await setup()
    expectError(await post(fx, chatBody({ model: 'gpt-9' })), 422, 'invalid_request_error', /The model 'gpt-9' does not exist/)
    expect(fx.nodes[0]!.requests).toHaveLength(0)
  })
  it.each([
    [{ temperature: 3 }, /'temperature'.*less or equal to 2.*Given: 3/],
    [{ temperature: 'hot' }, /'temperature'.*Expected number/],
    [{ top_p: 0 }, /'top_p'/],
    [{ max_tokens: 0 }, /'max_tokens'.*greater or equal to 1/],
    [{ max_tokens: 1.5 }, /'max_tokens'.*integer/],
    [{ presence_penalty: -3 }, /'presence_penalty'/],
    [{ n: 17 }, /'n'.*less or equal to 16.*Given: 17/],
    [{ logprobs: 'yes' }, /'logprobs'.*boolean/],
    [{ stream: 'yes' }, /'stream'/],
    [{ stream_options: { include_usage: true } }, /only allowed when 'stream' is true/],
    [{ messages: [] }, /'messages'.*1/],
    [{ messages: [{ role: 'wizard', content: 'x' }] }, /'messages.0.role'/],
    [{ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }] }, /'messages\[0\].content\[0\]'.*'image_url'/],
  ])('out-of-range or wrong-typed value %j', async (extra, message) => {
    const fx = await setup()
    expectError(await post(fx, chatBody(extra)), 422, 'invalid_request_error', message)
    expect(fx.nodes[0]!.requests).toHaveLength(0)
  })
  it("the node's 422 (context length) passes through", async () => {
    const fx = await setup()
    const res = await post(fx, chatBody({ messages: [{ role: 'user', content: 'CONTEXT-TOO-LONG' }] }))
    expectError(res, 422, 'invalid_request_error', /prompt tokens \+ max_tokens must be <= 2048/)
  })
  it('a 4xx from the node passes through in the error object', async () => {
    const fx = await setup()
    fx.nodes[0]!.failNext({ status: 400, message: 'the node did not like it' })
    expectError(await post(fx, chatBody()), 400, 'invalid_request_error', /the node did not like it/)
  })
  it('comes before 402', async () => {
    const fx = await setup({ credits: 0 })
    expectError(await post(fx, chatBody({ temperature: 9 })), 422, 'invalid_request_error', /temperature/)
  })
})

describe('402 payment_required', () => {
  it('balance exhausted', async () => {
    const fx = await setup({ credits: 0 })
    expectError(await post(fx, chatBody()), 402, 'payment_required', /balance exhausted/)
    expect(fx.nodes[0]!.requests).toHaveLength(0)
  })
  it('subscription inactive', async () => {
    const fx = await setup()
    await fx.store.setSubscription(fx.account.id, 'inactive')
    expectError(await post(fx, chatBody()), 402, 'payment_required', /Subscription inactive/)
  })
  it('a completion may take the balance below zero; the next one is refused', async () => {
    const fx = await setup({ credits: 1, options: { prices: { [MODEL]: { prompt: 1, completion: 1 } } } })
    expect((await post(fx, chatBody())).statusCode).toBe(200)
    expect((await fx.store.getAccount(fx.account.id))!.balanceMicros).toBe(1 - 12)
    expectError(await post(fx, chatBody()), 402, 'payment_required', /balance exhausted/)
  })
})

describe('503 service_unavailable and 500 server_error', () => {
  it('503 with Retry-After when no node is healthy', async () => {
    const fx = await setup({ node: { status: 'loading' } })
    await fx.app.facade.router.refresh()
    const res = await post(fx, chatBody())
    expectError(res, 503, 'service_unavailable', /No healthy inference node/)
    expect(res.headers['retry-after']).toBe('1')
  })
  it('503 when every node is unreachable', async () => {
    const fx = await setup({ nodeUrls: ['http://127.0.0.1:1'] })
    expectError(await post(fx, chatBody()), 503, 'service_unavailable', /No healthy inference node/)
  })
  it("a node's 503 (queue full) sends the request to another ready node; all full is 503 with the node's Retry-After", async () => {
    const fx = await setup({ nodeCount: 2 })
    const [a, b] = fx.nodes as [FakeNode, FakeNode]
    a.health.capacity = 100 // picked first: the most free capacity
    b.health.capacity = 10
    await fx.app.facade.router.refresh()
    a.failNext({ status: 503, retryAfterS: 3 })
    expect((await post(fx, chatBody())).statusCode).toBe(200)
    expect([a.requests.length, b.requests.length]).toEqual([1, 1])

    a.failNext({ status: 503, retryAfterS: 3 })
    b.failNext({ status: 503, retryAfterS: 2 })
    const res = await post(fx, chatBody())
    expectError(res, 503, 'service_unavailable', /No healthy inference node/)
    expect(res.headers['retry-after']).toBe('3')
    expect([a.requests.length, b.requests.length]).toEqual([2, 2])
  })
  it("a node's 500 is retried once, at once, on another node, then surfaces as 500", async () => {
    const fx = await setup({ nodeCount: 2 })
    const [a, b] = fx.nodes as [FakeNode, FakeNode]
    a.health.capacity = 100
    b.health.capacity = 10
    await fx.app.facade.router.refresh()
    a.failNext({ status: 500, message: 'worker crashed' })
    expect((await post(fx, chatBody())).statusCode).toBe(200)
    expect([a.requests.length, b.requests.length]).toEqual([1, 1])

    a.failNext({ status: 500, message: 'worker crashed' })
    b.failNext({ status: 500, message: 'worker crashed' })
    const res = await post(fx, chatBody())
    expectError(res, 500, 'server_error', /inference backend failed.*safe to retry/)
    expect(res.json().error.message).not.toMatch(/worker crashed/) // 5xx detail stays in the log
    expect([a.requests.length, b.requests.length]).toEqual([2, 2])
  })
  it('an unreachable node is taken out and the request goes to another', async () => {
    const fx = await setup({ nodeCount: 2 })
    const [a, b] = fx.nodes as [FakeNode, FakeNode]
    a.health.capacity = 100
    await fx.app.facade.router.refresh()
    await a.close()
    expect((await post(fx, chatBody())).statusCode).toBe(200)
    expect(b.requests).toHaveLength(1)
    expect(fx.app.facade.router.nodes[0]!.status).toBe('unreachable')
  })
  it('with one node, a 500 is retried once on the same node', async () => {
    const fx = await setup()
    fx.nodes[0]!.failNext({ status: 500 })
    expect((await post(fx, chatBody())).statusCode).toBe(200)
    expect(fx.nodes[0]!.requests).toHaveLength(2)
    fx.nodes[0]!.failNext({ status: 500 }, { status: 500 })
    expectError(await post(fx, chatBody()), 500, 'server_error', /safe to retry/)
    expect(fx.nodes[0]!.requests).toHaveLength(4)
  })
})

describe('404 and 413', () => {
  it('unknown routes answer 404 in the error object', async () => {
    const fx = await setup()
    expectError(await fx.app.inject({ method: 'GET', url: '/v1/nope', headers: bearer(fx.key) }), 404, 'invalid_request_error', /Unknown route: GET \/v1\/nope/)
    expectError(await fx.app.inject({ method: 'DELETE', url: '/v1/models' }), 404, 'invalid_request_error', /Unknown route/)
  })
  it('an unknown model id on /v1/models/{id} is 404', async () => {
    const fx = await setup()
    expectError(await fx.app.inject({ method: 'GET', url: '/v1/models/nope', headers: bearer(fx.key) }), 404, 'invalid_request_error', /'nope' does not exist/)
  })
  it('an oversized body answers 413', async () => {
    const fx = await setup({ options: { bodyLimit: 1024 } })
    const res = await post(fx, chatBody({ messages: [{ role: 'user', content: 'x'.repeat(2000) }] }))
    expectError(res, 413, 'invalid_request_error', /exceeds the limit of 1024 bytes/)
  })
})

describe('GET /v1/models', () => {
  it('lists the union of the models of ready nodes in the OpenAI list shape', async () => {
    const fx = await setup({ nodeCount: 3 })
    const [a, b, c] = fx.nodes as [typeof fx.nodes[0], typeof fx.nodes[0], typeof fx.nodes[0]]
    a.health.models = ['m1', 'm2']
    b.health.models = ['m2', 'm3']
    c.health.models = ['m4']
    c.health.status = 'draining'
    await fx.app.facade.router.refresh()
    const res = await fx.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(fx.key) })
    expect(res.statusCode).toBe(200)
    const body = res.json()
    expect(body.object).toBe('list')
    expect(body.data.map((m: { id: string }) => m.id)).toEqual(['m1', 'm2', 'm3'])
    expect(body.data[0]).toEqual({ id: 'm1', object: 'model', created: expect.any(Number), owned_by: 'onnxd', endpoints: ['chat.completions', 'completions', 'responses', 'messages'] })
    const one = await fx.app.inject({ method: 'GET', url: '/v1/models/m3', headers: bearer(fx.key) })
    expect(one.json()).toMatchObject({ id: 'm3', object: 'model' })
    // A model only a draining node has is known (so not 422) but not servable: 503.
    expect((await post(fx, chatBody({ model: 'm4' }))).statusCode).toBe(503)
  })
})

describe('GET /health (the facade itself)', () => {
  it('is ready while a node is ready, with no credential', async () => {
    const fx = await setup()
    expect((await fx.app.inject({ method: 'GET', url: '/health' })).json()).toMatchObject({ status: 'ready', nodes: [{ status: 'ready' }] })
    fx.nodes[0]!.health.status = 'unhealthy'
    await fx.app.facade.router.refresh()
    const res = await fx.app.inject({ method: 'GET', url: '/health' })
    expect(res.statusCode).toBe(503)
    expect(res.json().nodes[0].status).toBe('unhealthy')
  })
})
