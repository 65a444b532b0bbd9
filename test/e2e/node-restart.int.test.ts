// End to end: a real node behind the real facade dies mid-stream and comes back on the same port. The client gets
// a clean error in the stream, then 503 with Retry-After while no node is ready (unreachable, then loading), and
// answers again once the facade's health poll sees the new node ready: the same greedy text as before the death.
// Both deaths: a crash (connections dropped, no drain) and a shutdown (the node ends its streams itself).
import type OpenAI from 'openai'
import { InternalServerError } from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { apiError, facadeHealth, MODEL, startRealNode, startStack, waitFor, type RealNode, type Stack } from './stack.js'

let s: Stack
let client: OpenAI
beforeAll(async () => {
  s = await startStack()
  client = s.client()
})
afterAll(() => s?.close())

const request = { model: MODEL, messages: [{ role: 'user' as const, content: 'What is a lighthouse?' }], max_tokens: 10, temperature: 0 }

/** Starts a long stream and reads its first `n` content deltas; returns the iterator to read the rest from. */
async function streamStarted(n: number): Promise<{ text: string; rest: AsyncIterator<OpenAI.ChatCompletionChunk> }> {
  const stream = await client.chat.completions.create({
    model: MODEL,
    messages: [{ role: 'user', content: 'Tell me a long story' }],
    max_tokens: 1500,
    stream: true,
    ...({ ignore_eos: true } as object),
  })
  const rest = stream[Symbol.asyncIterator]()
  let text = ''
  for (let got = 0; got < n; ) {
    const r = await rest.next()
    if (r.done) throw new Error('the stream ended early')
    const delta = r.value.choices[0]?.delta.content
    if (delta) {
      text += delta
      got++
    }
  }
  return { text, rest }
}

/** Reads a stream to its end, which must be the error object of an error event (the client throws it). */
async function streamFailure(rest: AsyncIterator<OpenAI.ChatCompletionChunk>): Promise<{ error: { message: string; type: string; code: number } }> {
  const e = await apiError(
    (async () => {
      while (!(await rest.next()).done);
    })(),
  )
  return { error: e.error as { message: string; type: string; code: number } }
}

/** 503 `service_unavailable` with Retry-After, through the client. */
async function expectUnavailable(): Promise<void> {
  const e = await apiError(client.chat.completions.create(request))
  expect(e).toBeInstanceOf(InternalServerError)
  expect(e.status).toBe(503)
  expect(e.error).toMatchObject({ type: 'service_unavailable', code: 503 })
  expect((e.error as { message: string }).message).toMatch(/No healthy inference node/)
  expect(Number(e.headers?.get('retry-after'))).toBeGreaterThanOrEqual(1)
}

const nodeStatus = async (): Promise<string> => (await facadeHealth(s)).nodes[0]!.status

/** While the node is away: 503s, no models, the facade's own /health 503. Then a new node on the same port. */
async function comesBack(port: number, expected: string): Promise<RealNode> {
  await expectUnavailable()
  await waitFor(async () => (await nodeStatus()) === 'unreachable', 'the facade to see the node unreachable')
  await expectUnavailable()
  expect((await client.models.list()).data).toEqual([])
  expect((await facadeHealth(s)).status).toBe(503)

  // The new node listens before its model has loaded, as `onnxd node` does: the facade sees it loading.
  const node = await startRealNode({ port, ready: false })
  s.node = node
  await waitFor(async () => (await nodeStatus()) === 'loading', 'the facade to see the new node loading')
  await expectUnavailable()

  await node.engine.ready()
  await waitFor(async () => (await facadeHealth(s)).status === 200, 'the facade to see the new node ready')
  const r = await client.chat.completions.create(request)
  expect(r.choices[0]!.message.content).toBe(expected)
  expect((await client.models.list()).data.map((m) => m.id)).toEqual([MODEL])
  return node
}

describe('a node that dies and comes back on the same port', () => {
  it('crashes mid-stream: the stream ends with a server_error event; 503 until a new node is ready; then the same answers', async () => {
    const before = (await client.chat.completions.create(request)).choices[0]!.message.content!
    expect(before.length).toBeGreaterThan(0)
    const { port } = s.node
    const { text, rest } = await streamStarted(3)
    expect(text.length).toBeGreaterThan(0)

    // A crash, as the facade sees one: every connection drops at once, nothing is drained, then the port closes.
    s.node.app.server.closeAllConnections()
    await s.node.close()
    const { error } = await streamFailure(rest)
    expect(error).toEqual({ message: 'The inference backend failed during the stream; it is safe to retry', type: 'server_error', code: 500 })

    await comesBack(port, before)
  })

  it('shuts down mid-stream: the stream ends with an error event; 503 until a new node is ready; then the same answers', async () => {
    const before = (await client.chat.completions.create(request)).choices[0]!.message.content!
    const { port } = s.node
    const { rest } = await streamStarted(3)

    // A shutdown without a grace period: the node ends its streams with an error event of its own and closes.
    await s.node.close()
    const { error } = await streamFailure(rest)
    expect(error.message).toBe('The inference backend failed during the stream; it is safe to retry')
    expect([error.type, error.code]).toEqual(['service_unavailable', 503])

    await comesBack(port, before)
  })
})
