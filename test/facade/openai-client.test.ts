// The official `openai` npm client, unchanged, against a listening facade: success paths and error classes.
import OpenAI, {
  APIError,
  AuthenticationError,
  BadRequestError,
  InternalServerError,
  NotFoundError,
  RateLimitError,
  UnprocessableEntityError,
} from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { facadeFixture, MODEL, type FacadeFixture } from '../helpers/facade.js'

let f: FacadeFixture
let baseURL: string
let client: OpenAI
const clientFor = (apiKey: string): OpenAI => new OpenAI({ apiKey, baseURL, maxRetries: 0 })

beforeAll(async () => {
  f = await facadeFixture({ nodeCount: 2 })
  baseURL = `${await f.app.listen({ port: 0, host: '127.0.0.1' })}/v1`
  client = clientFor(f.key)
})
afterAll(() => f.close())

async function caught(p: Promise<unknown>): Promise<APIError> {
  try {
    await p
  } catch (e) {
    if (e instanceof APIError) return e
    throw e
  }
  throw new Error('expected an APIError')
}

function expectSpecError(e: APIError, status: number, type: string, message: RegExp): void {
  expect(e.status).toBe(status)
  expect(e.error).toMatchObject({ type, code: status })
  expect((e.error as { message: string }).message).toMatch(message)
  expect(e.type).toBe(type)
  expect(e.code).toBe(status)
}

describe('openai client: success paths', () => {
  it('lists models', async () => {
    const page = await client.models.list()
    expect(page.data).toEqual([{ id: MODEL, object: 'model', created: expect.any(Number), owned_by: 'onnxd', endpoints: ['chat.completions', 'completions', 'responses', 'messages'] }])
    expect((await client.models.retrieve(MODEL)).id).toBe(MODEL)
  })

  it('creates a chat completion', async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi there' }], max_tokens: 4, user: 'u', n: 1 })
    expect(r.object).toBe('chat.completion')
    expect(r.choices[0]!.message).toEqual({ role: 'assistant', content: 'Hello, world!' })
    expect(r.choices[0]!.finish_reason).toBe('length')
    expect(r.usage).toEqual({ prompt_tokens: 4, completion_tokens: 4, total_tokens: 8, prompt_tokens_details: { cached_tokens: 0 } })
  })

  it('streams a chat completion with usage', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'system', content: 'Be nice' }, { role: 'user', content: 'Hi' }],
      stream: true,
      stream_options: { include_usage: true },
    })
    let text = ''
    let finish: string | null = null
    let usage: OpenAI.CompletionUsage | null | undefined
    for await (const chunk of stream) {
      expect(chunk.object).toBe('chat.completion.chunk')
      text += chunk.choices[0]?.delta.content ?? ''
      finish = chunk.choices[0]?.finish_reason ?? finish
      if (chunk.usage) usage = chunk.usage
    }
    expect(text).toBe('Hello, world! How are you?')
    expect(finish).toBe('stop')
    expect(usage).toEqual({ prompt_tokens: 7, completion_tokens: 8, total_tokens: 15, prompt_tokens_details: { cached_tokens: 0 } })
  })

  it('works with the stream helper, which accumulates the final message', async () => {
    const runner = client.chat.completions.stream({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 })
    const done = await runner.finalChatCompletion()
    expect(done.choices[0]!.message.content).toBe('Hello,')
  })

  it('reads usage of its key through the raw client', async () => {
    const u = (await client.get('/usage')) as { object: string; total: { requests: number } }
    expect(u.object).toBe('usage')
    expect(u.total.requests).toBe(3) // the three completions above
  })
})

describe('openai client: error classes', () => {
  it('401 → AuthenticationError with `Invalid API key`', async () => {
    const e = await caught(clientFor('sk-svc-0000000000000000000000000000').models.list())
    expect(e).toBeInstanceOf(AuthenticationError)
    expectSpecError(e, 401, 'authentication_error', /^Invalid API key$/)
  })

  it('400 → BadRequestError', async () => {
    const e = await caught(client.post('/chat/completions', { body: { model: MODEL } }))
    expect(e).toBeInstanceOf(BadRequestError)
    expectSpecError(e, 400, 'invalid_request_error', /Missing required field 'messages'/)
  })

  it('422 → UnprocessableEntityError', async () => {
    const e = await caught(client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }))
    expect(e).toBeInstanceOf(UnprocessableEntityError)
    expectSpecError(e, 422, 'invalid_request_error', /does not exist/)
  })

  it('402 → APIError with status 402', async () => {
    const broke = await f.newAccount(0)
    const e = await caught(clientFor(await f.newKey(broke.id)).chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }] }))
    expectSpecError(e, 402, 'payment_required', /balance exhausted/)
  })

  it('404 → NotFoundError', async () => {
    const e = await caught(client.models.retrieve('nope'))
    expect(e).toBeInstanceOf(NotFoundError)
    expectSpecError(e, 404, 'invalid_request_error', /does not exist/)
  })

  it('429 → RateLimitError with Retry-After', async () => {
    const limited = clientFor(await f.newKey(f.account.id, 1))
    await limited.models.list()
    const e = await caught(limited.models.list())
    expect(e).toBeInstanceOf(RateLimitError)
    expectSpecError(e, 429, 'rate_limit_error', /Rate limit reached/)
    expect(Number(e.headers?.get('retry-after'))).toBeGreaterThanOrEqual(1)
  })

  it('500 → InternalServerError after the facade retried once', async () => {
    for (const n of f.nodes) n.failNext({ status: 500 })
    const e = await caught(client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }] }))
    expect(e).toBeInstanceOf(InternalServerError)
    expectSpecError(e, 500, 'server_error', /safe to retry/)
  })

  it('503 → InternalServerError (status 503) with Retry-After', async () => {
    for (const n of f.nodes) n.failNext({ status: 503, retryAfterS: 2 })
    const e = await caught(client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }] }))
    expect(e).toBeInstanceOf(InternalServerError)
    expectSpecError(e, 503, 'service_unavailable', /No healthy inference node/)
    expect(e.headers?.get('retry-after')).toBe('2')
  })

  it('an error mid-stream is thrown by the stream iterator as an APIError', async () => {
    for (const n of f.nodes) n.breakNext(1, 'error')
    const stream = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], stream: true })
    const seen: string[] = []
    const e = await caught(
      (async () => {
        for await (const c of stream) seen.push(c.choices[0]?.delta.content ?? '')
      })(),
    )
    expect(seen.join('')).toBe('Hello')
    expect(e.error).toMatchObject({ type: 'server_error', code: 500 })
    // Consume the other node's queued fault.
    await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], stream: true }).then(async (s) => {
      for await (const _ of s) void _
    }).catch(() => undefined)
  })
})
