// Issue #14: a request field onnxd cannot honour is refused with a 422 naming it, never accepted and dropped; the
// fields it honours trivially or takes as information are accepted. Through the real facade app (inject) over a
// fake node, and through the official `openai` client.
import OpenAI, { UnprocessableEntityError } from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { bearer, chatBody, facadeFixture, MODEL, type FacadeFixture } from '../helpers/facade.js'

let f: FacadeFixture
beforeAll(async () => {
  f = await facadeFixture()
})
afterAll(() => f.close())

const post = (url: string, payload: unknown) =>
  f.app.inject({ method: 'POST', url, headers: bearer(f.key), payload: payload as Record<string, unknown> })
const completionBody = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({ model: MODEL, prompt: 'Once upon a time', ...extra })

/** Answers 422 in the spec's error object whose message names `field`, and never reaches the node. */
async function expectRefused(url: string, payload: Record<string, unknown>, field: string, message?: RegExp): Promise<void> {
  const before = f.nodes[0]!.requests.length
  const res = await post(url, payload)
  expect(res.statusCode, res.body).toBe(422)
  const body = res.json() as { error: { message: string; type: string; code: number } }
  expect(body).toEqual({ error: { message: expect.any(String), type: 'invalid_request_error', code: 422 } })
  expect(body.error.message).toContain(`'${field}'`)
  if (message) expect(body.error.message).toMatch(message)
  expect(f.nodes[0]!.requests.length).toBe(before)
}

async function expectAccepted(url: string, payload: Record<string, unknown>): Promise<void> {
  const res = await post(url, payload)
  expect(res.statusCode, res.body).toBe(200)
}

const tool = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } }

describe('/v1/chat/completions refuses what it cannot honour', () => {
  it.each([
    ['tools.0.function.name', { tools: [{ type: 'function', function: { name: 'bad name!' } }] }, /Invalid value for 'tools.0.function.name'/],
    ['tool_choice', { tool_choice: 'required' }, /Invalid value for 'tool_choice': 'required' needs 'tools'/],
    ['tool_choice', { tools: [tool], tool_choice: { type: 'function', function: { name: 'nope' } } }, /the function 'nope' is not in 'tools'/],
    ['functions', { functions: [tool.function] }, /deprecated forms; send tools and tool_choice/],
    ['function_call', { function_call: { name: 'get_weather' } }, /deprecated forms/],
    ['response_format', { response_format: { type: 'xml' } }, /Invalid value for 'response_format'/],
    ['ignore_eos', { response_format: { type: 'json_object' }, ignore_eos: true }, /Invalid value for 'ignore_eos': must be false with a JSON response_format/],
    ['top_logprobs', { top_logprobs: 5 }, /Invalid value for 'top_logprobs': must be used only with logprobs: true. Given: 5/],
    ['top_logprobs', { logprobs: true, top_logprobs: 21 }, /Invalid value for 'top_logprobs'/],
    ['n', { n: 17 }, /Invalid value for 'n'/],
    ['n', { n: 0 }, /Invalid value for 'n'/],
    ['logit_bias.x', { logit_bias: { x: -100 } }, /Invalid value for 'logit_bias.x': Unexpected property/],
    ['logit_bias.7', { logit_bias: { '7': 101 } }, /Invalid value for 'logit_bias.7'/],
    ['modalities', { modalities: ['text', 'audio'] }, /only text output/],
    ['audio', { audio: { voice: 'alloy', format: 'wav' } }, /audio output is not supported/],
    ['prediction', { prediction: { type: 'content', content: 'x' } }, /predicted outputs/],
    ['reasoning_effort', { reasoning_effort: 'low' }, /reasoning/],
    ['verbosity', { verbosity: 'low' }, /verbosity/],
    ['web_search_options', { web_search_options: {} }, /web search/],
    ['store', { store: true }, /not stored/],
    ['service_tier', { service_tier: 'priority' }, /one service tier/],
    ['metadata', { metadata: { a: 1 } }, /Invalid value for 'metadata': it must be an object of string values/],
    ['user', { user: 42 }, /Invalid value for 'user': it must be a string. Given: 42/],
    ['stream_options.include_obfuscation', { stream: true, stream_options: { include_obfuscation: true } }, /obfuscation/],
    ['stream_options.foo', { stream: true, stream_options: { foo: 1 } }, /Unrecognized/],
    ['best_of', { best_of: 1 }, /Unrecognized/],
    ['suffix', { suffix: 'x' }, /Unrecognized/],
    ['frobnicate', { frobnicate: true }, /Unrecognized request argument supplied/],
  ])('%s (%j)', async (field, extra, message) => {
    await expectRefused('/v1/chat/completions', chatBody(extra), field, message)
  })

  it.each([
    ['messages[1].tool_call_id', [{ role: 'user', content: 'hi' }, { role: 'tool', content: '{}' }], /Missing required parameter/],
    ['messages[0].role', [{ role: 'function', name: 'f', content: '{}' }], /'function' messages/],
    ['messages[0].tool_calls[0].function.arguments', [{ role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '[1]' } }] }], /JSON text of an object/],
    ['messages[0].content', [{ role: 'user', content: null }], /null only on an assistant message with tool_calls/],
    ['messages[0].content[1]', [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'image_url', image_url: { url: 'http://x/y.png' } }] }], /'image_url'/],
    ['messages[0].content[0]', [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: '', format: 'wav' } }] }], /'input_audio'/],
    ['messages[0].content[0]', [{ role: 'user', content: [{ type: 'file', file: { file_id: 'f' } }] }], /'file'/],
  ])('%s in messages', async (field, messages, message) => {
    await expectRefused('/v1/chat/completions', { model: MODEL, messages }, field, message)
  })

  it('a refusal comes before the node and before billing, whatever else the body has', async () => {
    // Even with a value error elsewhere, the unsupported field is named first (its own key comes first).
    await expectRefused('/v1/chat/completions', chatBody({ audio: { voice: 'alloy' }, temperature: 9 }), 'audio')
  })
})

describe('/v1/chat/completions accepts what it honours or takes as information', () => {
  it.each([
    { user: 'u-1', metadata: { team: 'a' }, store: false, service_tier: 'auto', safety_identifier: 's', prompt_cache_key: 'k' },
    { service_tier: 'default' },
    { n: 1, logprobs: false, top_logprobs: 0, logit_bias: {} },
    { n: 3, logprobs: true, top_logprobs: 5, logit_bias: { '50256': -100 } },
    { response_format: { type: 'json_object' } },
    { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' }, strict: true } } },
    { tools: [], functions: [], tool_choice: 'none', function_call: 'auto', parallel_tool_calls: false },
    { response_format: { type: 'text' }, modalities: ['text'] },
    { stream: true, stream_options: { include_usage: true, include_obfuscation: false } },
    // Null is absent, as with OpenAI.
    { tools: null, response_format: null, audio: null, logprobs: null, n: null },
  ])('%j', async (extra) => {
    await expectAccepted('/v1/chat/completions', chatBody(extra))
  })

  it('what the node is sent has only the fields it acts on', async () => {
    const before = f.nodes[0]!.requests.length
    await expectAccepted(
      '/v1/chat/completions',
      chatBody({ user: 'u', tools: [], response_format: { type: 'text' }, max_tokens: 2, seed: 1, messages: [{ role: 'user', name: 'ann', content: 'hi' }] }),
    )
    const sent = f.nodes[0]!.requests[before]!
    expect(Object.keys(sent).sort()).toEqual(['max_tokens', 'messages', 'model', 'request_id', 'response_format', 'seed', 'tenant'])
    // A message's name goes to the chat template, as transformers passes it.
    expect(sent.messages).toEqual([{ role: 'user', name: 'ann', content: 'hi' }])
  })
})

describe('/v1/completions refuses what it cannot honour', () => {
  it.each([
    ['suffix', { suffix: ' the end' }, /suffix/],
    ['logprobs', { logprobs: 21 }, /Invalid value for 'logprobs'/],
    ['logprobs', { logprobs: true }, /Invalid value for 'logprobs'/],
    ['logprobs', { logprobs: 2, echo: true }, /Unsupported parameter 'logprobs'.*not with echo/],
    ['top_logprobs', { top_logprobs: 2 }, /Unrecognized/],
    ['best_of', { best_of: 3 }, /only 1/],
    ['n', { n: 17 }, /Invalid value for 'n'/],
    ['logit_bias.1', { logit_bias: { '1': 500 } }, /logit_bias/],
    ['echo', { echo: true, prompt: [1, 2, 3] }, /token-id prompts/],
    ['prompt', { prompt: { text: 'x' } }, /expected a string/],
    ['prompt', { prompt: [] }, /expected a string/],
    ['prompt', { prompt: Array.from({ length: 33 }, () => 'x') }, /at most 32 prompts/],
    ['tools', { tools: [] }, /Unrecognized/],
    ['messages', { messages: [{ role: 'user', content: 'x' }] }, /Unrecognized/],
    ['temperature', { temperature: 3 }, /Invalid value/],
  ])('%s (%j)', async (field, extra, message) => {
    await expectRefused('/v1/completions', completionBody(extra), field, message)
  })

  it('accepts best_of 1, n 1, logit_bias {}, user, echo with text, and nulls', async () => {
    await expectAccepted('/v1/completions', completionBody({ best_of: 1, n: 1, logit_bias: {}, user: 'u', echo: true, suffix: null, logprobs: null }))
  })

  it('accepts n, logprobs as a count, logit_bias and response_format', async () => {
    await expectAccepted('/v1/completions', completionBody({ n: 2, logprobs: 3, logit_bias: { '1': 5 }, response_format: { type: 'json_object' } }))
  })

  it('a missing prompt is a 400', async () => {
    const res = await post('/v1/completions', { model: MODEL })
    expect(res.statusCode).toBe(400)
    expect(res.json().error).toMatchObject({ type: 'invalid_request_error', code: 400, message: expect.stringContaining('prompt') })
  })
})

describe('a body lacking a required field is a 400 before any of its values is a 422 (the spec\'s order)', () => {
  it('whatever unknown field it also has', async () => {
    for (const [url, payload, field] of [
      ['/v1/completions', { model: MODEL, prompt: null, suffix: 'x' }, 'prompt'],
      ['/v1/responses', { model: MODEL, foo: 1 }, 'input'],
      ['/v1/responses', { model: MODEL, input: null, temperature: 9 }, 'input'],
    ] as const) {
      const res = await post(url, payload)
      expect(res.statusCode, `${url} ${JSON.stringify(payload)}`).toBe(400)
      expect(res.json().error).toEqual({ type: 'invalid_request_error', code: 400, message: `Missing required field '${field}'` })
    }
  })
})

describe('the official openai client', () => {
  let client: OpenAI
  beforeAll(async () => {
    const url = await f.app.listen({ port: 0, host: '127.0.0.1' })
    client = new OpenAI({ apiKey: f.key, baseURL: `${url}/v1`, maxRetries: 0 })
  })

  it('surfaces a refused field as UnprocessableEntityError carrying the message', async () => {
    const e = await client.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], prediction: { type: 'content', content: 'x' } })
      .catch((x: unknown) => x)
    expect(e).toBeInstanceOf(UnprocessableEntityError)
    const err = e as UnprocessableEntityError
    expect(err.status).toBe(422)
    expect(err.type).toBe('invalid_request_error')
    expect(err.message).toMatch(/Unsupported parameter 'prediction': predicted outputs are not supported/)
  })

  it('a tools request through the client reaches the node with its tools and tool_choice', async () => {
    const before = f.nodes[0]!.requests.length
    await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'weather?' }], tools: [tool as OpenAI.ChatCompletionTool], tool_choice: 'required' })
    expect(f.nodes[0]!.requests[before]).toMatchObject({ tools: [tool], tool_choice: 'required' })
  })
})
