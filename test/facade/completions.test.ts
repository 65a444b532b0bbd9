// POST /v1/completions over fake nodes: OpenAI's `text_completion` shape (JSON and SSE), one choice per prompt,
// echo, token-id prompts, OpenAI's default max_tokens, the same billing and usage as chat, and the endpoints
// /v1/models lists for a model without a chat template.
import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { bearer, chatBody, facadeFixture, MODEL, sseEvents, type FacadeFixture } from '../helpers/facade.js'

let f: FacadeFixture
let client: OpenAI
const START = 10_000_000
beforeAll(async () => {
  f = await facadeFixture({ credits: START, options: { prices: { [MODEL]: { prompt: 1, completion: 2 } } } })
  client = new OpenAI({ apiKey: f.key, baseURL: `${await f.app.listen({ port: 0, host: '127.0.0.1' })}/v1`, maxRetries: 0 })
})
afterAll(() => f.close())

const post = (payload: Record<string, unknown>) =>
  f.app.inject({ method: 'POST', url: '/v1/completions', headers: bearer(f.key), payload })
const last = () => f.nodes[0]!.requests.at(-1)!

describe('POST /v1/completions', () => {
  it('answers a text_completion and sends the node the prompt with OpenAI’s default max_tokens (16)', async () => {
    const res = await post({ model: MODEL, prompt: 'Once upon a time', temperature: 0, seed: 3, stop: ['\n'], user: 'u' })
    expect(res.statusCode, res.body).toBe(200)
    const body = res.json()
    expect(res.headers['x-request-id']).toBe(body.id)
    expect(body).toEqual({
      id: expect.stringMatching(/^cmpl-[A-Za-z0-9]{24}$/),
      object: 'text_completion',
      created: expect.any(Number),
      model: MODEL,
      // The fake node's 8 tokens (all of them: 8 < 16).
      choices: [{ text: 'Hello, world! How are you?', index: 0, logprobs: null, finish_reason: 'stop' }],
      usage: { prompt_tokens: 4, completion_tokens: 8, total_tokens: 12, prompt_tokens_details: { cached_tokens: 0 } },
    })
    expect(last()).toEqual({ model: MODEL, prompt: 'Once upon a time', request_id: body.id, tenant: expect.any(String), max_tokens: 16, temperature: 0, seed: 3, stop: ['\n'] })
  })

  it('one choice per prompt, numbered as the prompts are, usage summed; echo prepends each prompt', async () => {
    const n0 = f.nodes[0]!.requests.length
    const r = await client.completions.create({ model: MODEL, prompt: ['one two', 'three'], max_tokens: 2, echo: true })
    expect(r.object).toBe('text_completion')
    expect(r.choices).toEqual([
      { text: 'one twoHello,', index: 0, logprobs: null, finish_reason: 'length' },
      { text: 'threeHello,', index: 1, logprobs: null, finish_reason: 'length' },
    ])
    expect(r.usage).toEqual({ prompt_tokens: 3, completion_tokens: 4, total_tokens: 7, prompt_tokens_details: { cached_tokens: 0 } })
    const sent = f.nodes[0]!.requests.slice(n0)
    expect(sent.map((q) => q.prompt).sort()).toEqual(['one two', 'three'])
    expect(sent.map((q) => q.request_id).sort()).toEqual([`${r.id}-0`, `${r.id}-1`])
  })

  it('token-id prompts go to the node as input_ids', async () => {
    const r = await client.completions.create({ model: MODEL, prompt: [[1, 2, 3], [4]], max_tokens: 1 })
    expect(r.choices.map((c) => c.index)).toEqual([0, 1])
    expect(r.usage!.prompt_tokens).toBe(4)
    const one = await client.completions.create({ model: MODEL, prompt: [5, 6], max_tokens: 1 })
    expect(one.choices).toHaveLength(1)
    expect(last()).toMatchObject({ input_ids: [5, 6] })
    expect(last().prompt).toBeUndefined()
  })

  it('streams text_completion chunks as OpenAI does: deltas, a finish chunk, usage, [DONE]', async () => {
    const res = await post({ model: MODEL, prompt: 'Say it', max_tokens: 3, stream: true, echo: true, stream_options: { include_usage: true } })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toMatch(/^text\/event-stream/)
    const events = sseEvents(res.body)
    expect(events.at(-1)).toBe('[DONE]')
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e))
    for (const c of chunks) expect(c).toMatchObject({ id: chunks[0].id, object: 'text_completion', model: MODEL, created: expect.any(Number) })
    expect(chunks.map((c) => c.choices[0] ?? null)).toEqual([
      { text: 'Say it', index: 0, logprobs: null, finish_reason: null },
      { text: 'Hello', index: 0, logprobs: null, finish_reason: null },
      { text: ',', index: 0, logprobs: null, finish_reason: null },
      { text: ' world', index: 0, logprobs: null, finish_reason: null },
      { text: '', index: 0, logprobs: null, finish_reason: 'length' },
      null,
    ])
    expect(chunks.slice(0, -1).every((c) => c.usage === null)).toBe(true)
    expect(chunks.at(-1).usage).toEqual({ prompt_tokens: 2, completion_tokens: 3, total_tokens: 5, prompt_tokens_details: { cached_tokens: 0 } })
  })

  it('streams several prompts as one answer: each choice’s deltas under its index, then the finishes and the summed usage', async () => {
    const res = await post({ model: MODEL, prompt: ['a', 'b c'], max_tokens: 2, stream: true, echo: true, stream_options: { include_usage: true } })
    expect(res.statusCode).toBe(200)
    const chunks = sseEvents(res.body).slice(0, -1).map((e) => JSON.parse(e))
    const text = (i: number): string => chunks.flatMap((c) => c.choices.filter((x: { index: number }) => x.index === i).map((x: { text: string }) => x.text)).join('')
    expect([text(0), text(1)]).toEqual(['aHello,', 'b cHello,'])
    const finishes = chunks.flatMap((c) => c.choices.filter((x: { finish_reason: string | null }) => x.finish_reason !== null))
    expect(finishes).toEqual([
      { text: '', index: 0, logprobs: null, finish_reason: 'length' },
      { text: '', index: 1, logprobs: null, finish_reason: 'length' },
    ])
    expect(chunks.at(-1).usage).toEqual({ prompt_tokens: 3, completion_tokens: 4, total_tokens: 7, prompt_tokens_details: { cached_tokens: 0 } })
  })

  it('one prompt the node refuses fails the whole request with the node’s 422, and nothing stays in flight', async () => {
    f.nodes[0]!.failNext({ status: 422, message: 'prompt tokens + max_tokens must be <= 2048. Given: 4000 + 16' })
    for (const stream of [true, false]) {
      if (!stream) f.nodes[0]!.failNext({ status: 422, message: 'prompt tokens + max_tokens must be <= 2048. Given: 4000 + 16' })
      const res = await post({ model: MODEL, prompt: ['a', 'b'], max_tokens: 2, stream })
      expect(res.statusCode).toBe(422)
      expect(res.json().error).toEqual({ message: expect.stringMatching(/must be <= 2048/), type: 'invalid_request_error', code: 422 })
    }
    expect(f.app.facade.router.nodes.map((n) => n.inflight)).toEqual([0])
  })

  it('the other prompts’ node requests are cancelled at once when one fails, not waited for', async () => {
    const node = f.nodes[0]!
    node.failNext({ status: 422, message: 'prompt tokens + max_tokens must be <= 2048. Given: 4000 + 16' })
    const held = node.holdNext(0) // the other prompt's answer never comes unless the facade gives up on it
    const cancelled = node.cancellations
    const res = await post({ model: MODEL, prompt: ['a', 'b'], max_tokens: 2 })
    expect(res.statusCode).toBe(422)
    await held.cancelled
    expect(node.cancellations).toBe(cancelled + 1)
    held.release()
  })

  it('streams through the openai client without usage unless asked', async () => {
    const stream = await client.completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 4, stream: true })
    let text = ''
    let finish: string | null = null
    for await (const c of stream) {
      expect(c.object).toBe('text_completion')
      expect(c.usage).toBeUndefined()
      text += c.choices[0]?.text ?? ''
      finish = c.choices[0]?.finish_reason ?? finish
    }
    expect(text).toBe('Hello, world!')
    expect(finish).toBe('length')
  })

  it('bills and records usage as chat does, JSON and streamed', async () => {
    const account = await f.newAccount(START)
    const key = await f.newKey(account.id)
    const c = new OpenAI({ apiKey: key, baseURL: client.baseURL, maxRetries: 0 })
    const a = await c.completions.create({ model: MODEL, prompt: 'a b c', max_tokens: 5 })
    const s = await c.completions.create({ model: MODEL, prompt: 'd e', max_tokens: 2, stream: true, stream_options: { include_usage: true } })
    let su: OpenAI.CompletionUsage | undefined
    for await (const ch of s) if (ch.usage) su = ch.usage
    const pt = a.usage!.prompt_tokens + su!.prompt_tokens
    const ct = a.usage!.completion_tokens + su!.completion_tokens
    expect([pt, ct]).toEqual([5, 7])
    // Price: 1 and 2 units per 1M tokens = 1 and 2 micro-units per token.
    expect((await f.store.getAccount(account.id))!.balanceMicros).toBe(START - (pt * 1 + ct * 2))
    const u = (await f.app.inject({ method: 'GET', url: '/v1/usage', headers: bearer(key) })).json()
    expect(u.total).toMatchObject({ requests: 2, prompt_tokens: pt, completion_tokens: ct, cost_micros: pt + 2 * ct })
  })

  it('counts against the key’s rate limit as chat does (429 with Retry-After, the rate-limit headers)', async () => {
    const key = await f.newKey(f.account.id, 1)
    const send = () => f.app.inject({ method: 'POST', url: '/v1/completions', headers: bearer(key), payload: { model: MODEL, prompt: 'x', max_tokens: 1 } })
    const ok = await send()
    expect(ok.statusCode).toBe(200)
    expect(ok.headers['x-ratelimit-limit-requests']).toBe('1')
    const refused = await send()
    expect(refused.statusCode).toBe(429)
    expect(refused.headers['retry-after']).toMatch(/^\d+$/)
    expect(refused.json().error).toMatchObject({ type: 'rate_limit_error', code: 429 })
  })

  it('checks credential, model and balance as chat does', async () => {
    expect((await f.app.inject({ method: 'POST', url: '/v1/completions', payload: { model: MODEL, prompt: 'x' } })).statusCode).toBe(401)
    const unknown = await post({ model: 'gpt-9', prompt: 'x' })
    expect(unknown.statusCode).toBe(422)
    expect(unknown.json().error.message).toMatch(/The model 'gpt-9' does not exist/)
    const broke = await f.newAccount(0)
    const res = await f.app.inject({ method: 'POST', url: '/v1/completions', headers: bearer(await f.newKey(broke.id)), payload: { model: MODEL, prompt: 'x' } })
    expect(res.statusCode).toBe(402)
    expect(res.json().error).toMatchObject({ type: 'payment_required', code: 402 })
  })
})

describe('a model without a chat template', () => {
  it('is listed with only the completions endpoint, serves /v1/completions, and chat is a clear 422', async () => {
    f.nodes[0]!.health.chat_template = false
    await f.app.facade.router.refresh()
    try {
      const models = await client.models.list()
      expect(models.data).toEqual([{ id: MODEL, object: 'model', created: expect.any(Number), owned_by: 'onnxd', endpoints: ['completions'] }])
      expect((await client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 1 })).choices).toHaveLength(1)
      const n0 = f.nodes[0]!.requests.length
      const res = await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody() })
      expect(res.statusCode).toBe(422)
      expect(res.json().error.message).toMatch(/has no chat template.*\/v1\/completions/)
      expect(f.nodes[0]!.requests.length).toBe(n0)
    } finally {
      delete f.nodes[0]!.health.chat_template
      await f.app.facade.router.refresh()
    }
  })
})
