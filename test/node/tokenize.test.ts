// POST /internal/v1/tokenize (app.inject, fake engine): a prompt's token count from the engine's tokenizer, with no
// sequence submitted; every refusal in the spec's error object, as the completion endpoint answers it.
import { afterEach, describe, expect, it } from 'vitest'
import { OnnxdError } from '../../src/shared/errors.js'
import { deferred } from '../helpers/fake-engine.js'
import { errorOf, testNode, type TestNode } from './helpers.js'

const PATH = '/internal/v1/tokenize'
let node: TestNode | null = null
afterEach(async () => {
  await node?.app.close()
  node = null
})

describe('POST /internal/v1/tokenize', () => {
  it('answers the count of chat messages with their tools, and of a raw prompt, without submitting a sequence', async () => {
    node = testNode({ countTokens: async (req) => (req.tools ? 40 : 0) + (req.messages?.length ?? 0) * 10 + (req.prompt?.length ?? 0) })
    const tools = [{ type: 'function' as const, function: { name: 'f', parameters: { type: 'object' } } }]
    const chat = await node.app.inject({ method: 'POST', url: PATH, payload: { model: 'onnxd-tiny', messages: [{ role: 'system', content: 'a' }, { role: 'user', content: 'b' }], tools } })
    expect(chat.statusCode).toBe(200)
    expect(chat.json()).toEqual({ model: 'onnxd-tiny', prompt_tokens: 60 })
    const raw = await node.app.inject({ method: 'POST', url: PATH, payload: { model: 'onnxd-tiny', prompt: 'hello' } })
    expect(raw.json()).toEqual({ model: 'onnxd-tiny', prompt_tokens: 5 })
    expect(node.engine.counted).toEqual([{ messages: [{ role: 'system', content: 'a' }, { role: 'user', content: 'b' }], tools, prompt: undefined }, { prompt: 'hello', messages: undefined, tools: undefined }])
    expect(node.engine.submissions).toHaveLength(0)
  })

  it('400 without a prompt, with two, with input_ids or a completion field; 422 for tools beside a raw prompt and for a model it does not serve', async () => {
    node = testNode()
    for (const payload of [{ model: 'onnxd-tiny' }, { model: 'onnxd-tiny', prompt: 'a', messages: [{ role: 'user', content: 'b' }] }, { model: 'onnxd-tiny', input_ids: [1, 2] }, { model: 'onnxd-tiny', prompt: 'a', max_tokens: 3 }]) {
      const res = await node.app.inject({ method: 'POST', url: PATH, payload })
      expect(res.statusCode, JSON.stringify(payload)).toBe(400)
      expect(errorOf(res).type).toBe('invalid_request_error')
    }
    // Tools only render through the chat template: beside a raw prompt they would be dropped from the count.
    const tools = [{ type: 'function' as const, function: { name: 'f', parameters: { type: 'object' } } }]
    const dropped = await node.app.inject({ method: 'POST', url: PATH, payload: { model: 'onnxd-tiny', prompt: 'a', tools } })
    expect(dropped.statusCode).toBe(422)
    expect(errorOf(dropped).message).toContain('`tools` need `messages`')
    const res = await node.app.inject({ method: 'POST', url: PATH, payload: { model: 'gpt-4', prompt: 'a' } })
    expect(res.statusCode).toBe(422)
    expect(errorOf(res).message).toBe("The model 'gpt-4' does not exist on this node. Available: onnxd-tiny")
    expect(node.engine.counted).toHaveLength(0)
  })

  it("passes the engine's refusal on with its status: 422 for a prompt over the byte bound, 503 with Retry-After when full", async () => {
    const refusals = [new OnnxdError('context_length_exceeded', 'The prompt is 9999999 bytes of text'), new OnnxdError('queue_full', 'node is at capacity', { retryAfterS: 1 })]
    node = testNode({ countTokens: () => Promise.reject(refusals.shift()!) })
    const long = await node.app.inject({ method: 'POST', url: PATH, payload: { model: 'onnxd-tiny', prompt: 'x' } })
    expect(long.statusCode).toBe(422)
    expect(errorOf(long).message).toBe('The prompt is 9999999 bytes of text')
    const full = await node.app.inject({ method: 'POST', url: PATH, payload: { model: 'onnxd-tiny', prompt: 'x' } })
    expect(full.statusCode).toBe(503)
    expect(full.headers['retry-after']).toBe('1')
    expect(errorOf(full).type).toBe('service_unavailable')
  })

  it('a draining node refuses new counts with 503, and its drain waits for the one under way', async () => {
    const count = deferred<number>()
    node = testNode({ countTokens: () => count.promise })
    const pending = node.app.inject({ method: 'POST', url: PATH, payload: { model: 'onnxd-tiny', prompt: 'x' } })
    while (node.engine.counted.length === 0) await new Promise((r) => setImmediate(r))
    let drained = false
    const drain = node.app.node.drain(10_000).then((r) => (drained = r.drained))
    const refused = await node.app.inject({ method: 'POST', url: PATH, payload: { model: 'onnxd-tiny', prompt: 'y' } })
    expect(refused.statusCode).toBe(503)
    expect(refused.headers['retry-after']).toBe('1')
    expect(drained).toBe(false)
    count.resolve(3)
    expect((await pending).json()).toEqual({ model: 'onnxd-tiny', prompt_tokens: 3 })
    await drain
    expect(drained).toBe(true)
  })
})
