// The typed streams of /v1/responses and /v1/messages against a fake node: how each ends when the node fails
// mid-stream (Responses: `error` then `response.failed`; Messages: `error`), each carrying the spec's error object,
// the partial billed as chat's is; and Anthropic's `x-api-key` header as the same sk-svc- key as a Bearer one.
import { afterEach, describe, expect, it } from 'vitest'
import type { CompletionUsage } from '../../src/store/interfaces.js'
import { deferred, facadeFixture, MODEL, observed, type FacadeFixture } from '../helpers/facade.js'

let f: FacadeFixture | undefined
afterEach(async () => {
  await f?.close()
  f = undefined
})

/** The named events of an SSE body, their data parsed. */
const typedEvents = (body: string): { event: string; data: Record<string, unknown> }[] =>
  body
    .split('\n\n')
    .filter((b) => b.startsWith('event: '))
    .map((b) => {
      const [event, data] = b.split('\n')
      return { event: event!.slice(7), data: JSON.parse(data!.slice(6)) as Record<string, unknown> }
    })

const FAILED = { type: 'server_error', code: 500, message: 'The inference backend failed during the stream; it is safe to retry' }

describe('a node error mid-stream', () => {
  it('/v1/responses: the deltas so far, then an error event and response.failed; the partial is billed', async () => {
    const recorded = deferred<CompletionUsage>()
    f = await facadeFixture({ wrapStore: observed((u) => recorded.resolve(u)) })
    f.nodes[0]!.breakNext(2, 'error')
    const res = await f.app.inject({ method: 'POST', url: '/v1/responses', headers: { authorization: `Bearer ${f.key}` }, payload: { model: MODEL, input: 'Hi', stream: true } })
    expect(res.statusCode).toBe(200)
    const events = typedEvents(res.body)
    expect(events.map((e) => e.event)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'error',
      'response.failed',
    ])
    expect(events.map((e) => e.data.sequence_number)).toEqual(events.map((_, i) => i))
    expect(events.at(-2)!.data.error).toEqual(FAILED)
    const failed = events.at(-1)!.data.response as { usage: { input_tokens: number; output_tokens: number } }
    expect(failed).toMatchObject({ status: 'failed', error: { code: 'server_error', message: FAILED.message }, usage: { output_tokens: 2 } })
    // Billed as the failed response says: the prompt the node reported, the two tokens delivered.
    expect(failed.usage.input_tokens).toBeGreaterThan(0)
    expect(await recorded.promise).toMatchObject({ promptTokens: failed.usage.input_tokens, completionTokens: 2 })
    // A failed response is not kept.
    const id = (events[0]!.data.response as { id: string }).id
    expect((await f.app.inject({ method: 'GET', url: `/v1/responses/${id}`, headers: { authorization: `Bearer ${f.key}` } })).statusCode).toBe(404)
  })

  it('/v1/messages: the deltas so far, then an error event with the spec’s error object, no message_stop; the partial is billed', async () => {
    const recorded = deferred<CompletionUsage>()
    f = await facadeFixture({ wrapStore: observed((u) => recorded.resolve(u)) })
    f.nodes[0]!.breakNext(2, 'error')
    const res = await f.app.inject({ method: 'POST', url: '/v1/messages', headers: { 'x-api-key': f.key, 'anthropic-version': '2023-06-01' }, payload: { model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'Hi' }], stream: true } })
    expect(res.statusCode).toBe(200)
    const events = typedEvents(res.body)
    expect(events.map((e) => e.event)).toEqual(['message_start', 'ping', 'content_block_start', 'content_block_delta', 'content_block_delta', 'error'])
    expect(events.at(-1)!.data).toEqual({ type: 'error', error: FAILED })
    const billed = await recorded.promise
    expect(billed.completionTokens).toBe(2)
    expect(billed.promptTokens).toBeGreaterThan(0)
  })
})

describe('x-api-key', () => {
  it('is the same key as a Bearer one, on every key route; a wrong one is a 401 in the spec’s error object', async () => {
    f = await facadeFixture()
    const body = { model: MODEL, max_tokens: 3, messages: [{ role: 'user', content: 'Hi' }] }
    const viaHeader = await f.app.inject({ method: 'POST', url: '/v1/messages', headers: { 'x-api-key': f.key }, payload: body })
    expect(viaHeader.statusCode).toBe(200)
    expect(viaHeader.json()).toMatchObject({ type: 'message', role: 'assistant', stop_reason: 'max_tokens', usage: { output_tokens: 3 } })
    expect((await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { 'x-api-key': f.key }, payload: body })).statusCode).toBe(200)
    const bad = await f.app.inject({ method: 'POST', url: '/v1/messages', headers: { 'x-api-key': 'sk-svc-0000000000000000000000000000' }, payload: body })
    expect(bad.statusCode).toBe(401)
    expect(bad.json()).toEqual({ error: { type: 'authentication_error', code: 401, message: 'Invalid API key' } })
    const none = await f.app.inject({ method: 'POST', url: '/v1/messages', payload: body })
    expect(none.statusCode).toBe(401)
  })
})
