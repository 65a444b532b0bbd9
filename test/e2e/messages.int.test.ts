// End to end, issue #34: Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) through the official
// `@anthropic-ai/sdk`, which sends the key as `x-api-key`, to the real facade and a real node on the tiny default
// model. Greedy answers equal the node's own answer to the same conversation as chat messages; stop_reason follows
// what ended the text; tools round trip; usage equals what was billed; a client that leaves mid-stream is billed for
// what it read; errors are the spec's error object.
import Anthropic from '@anthropic-ai/sdk'
import { Ajv } from 'ajv'
import { Agent, fetch as undiciFetch, type RequestInit as UndiciInit } from 'undici'
import { afterAll, describe, expect, it } from 'vitest'
import { abortCount, defaultCostMicros, expectBilledForWhatWasRead, MODEL, nodeAnswer, suiteStack, waitFor, WEATHER_PARAMETERS, type NodeAnswer } from './stack.js'

type Usage = { total: { requests: number; prompt_tokens: number; completion_tokens: number; cost_micros: number } }

const WEATHER = WEATHER_PARAMETERS
const weather: Anthropic.Tool = { name: 'get_weather', description: 'The weather in a city', input_schema: WEATHER as unknown as Anthropic.Tool.InputSchema }
const ajv = new Ajv({ strict: false })
// Anthropic's sampling fields, which this SDK's types no longer list (newer Claude models refuse them); onnxd takes them.
const GREEDY = { temperature: 0 } as object

describe('POST /v1/messages through the Anthropic SDK', () => {
  const stack = suiteStack()
  const agent = new Agent()
  afterAll(() => agent.destroy())
  const anthropic = (apiKey = stack.s.f.key): Anthropic =>
    new Anthropic({
      apiKey,
      baseURL: stack.s.facadeUrl,
      maxRetries: 0,
      fetch: ((url: string | URL, init?: RequestInit) => undiciFetch(url, { ...(init as UndiciInit), dispatcher: agent })) as unknown as typeof fetch,
    })
  const node = (body: Record<string, unknown>): Promise<NodeAnswer> => nodeAnswer(stack.s.node, body)
  const textOf = (m: Anthropic.Message): string => m.content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join('')
  const usageOf = (m: Anthropic.Message): { prompt: number; completion: number } => ({ prompt: m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0), completion: m.usage.output_tokens })

  it('messages.create: the node’s greedy answer to system and messages, its usage, stop_reason max_tokens or end_turn', async () => {
    const m = await anthropic().messages.create({ model: MODEL, system: 'You are terse.', messages: [{ role: 'user', content: 'Tell me about the sea' }], max_tokens: 12, ...GREEDY })
    const d = await node({ messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Tell me about the sea' }], max_tokens: 12, ...GREEDY })
    expect(m).toMatchObject({ type: 'message', role: 'assistant', model: MODEL, id: expect.stringMatching(/^msg_/), stop_sequence: null })
    expect(m.content).toEqual([{ type: 'text', text: d.text }])
    expect(m.stop_reason).toBe(d.finish_reason === 'length' ? 'max_tokens' : 'end_turn')
    expect(usageOf(m)).toEqual({ prompt: d.usage.prompt_tokens, completion: d.usage.completion_tokens })
  })

  it('stop_sequences: the text stops before the first one, stop_reason stop_sequence naming it, JSON and streamed', async () => {
    const d = await node({ messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 30, temperature: 0, ignore_eos: true })
    // A stop string the greedy answer is known to reach: two characters from its middle.
    const at = Math.floor(d.text.length / 2)
    const stop = d.text.slice(at, at + 2)
    expect(stop.trim().length).toBeGreaterThan(0)
    const m = await anthropic().messages.create({ model: MODEL, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 30, stop_sequences: [stop], ...({ temperature: 0, ignore_eos: true } as object) })
    expect(m.stop_reason).toBe('stop_sequence')
    expect(m.stop_sequence).toBe(stop)
    expect(textOf(m)).toBe(d.text.slice(0, d.text.indexOf(stop)))
    // Streamed, the node's final event names it too: message_delta carries it.
    const streamed = await anthropic().messages.stream({ model: MODEL, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 30, stop_sequences: [stop], ...({ temperature: 0, ignore_eos: true } as object) }).finalMessage()
    expect(streamed).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: stop, content: m.content })
  })

  it('messages.stream: Anthropic’s event order; the deltas make the JSON answer’s text; finalMessage is that answer', async () => {
    const body = { model: MODEL, messages: [{ role: 'user' as const, content: 'Once upon a time' }], max_tokens: 10, ...GREEDY }
    const whole = await anthropic().messages.create(body)
    const stream = anthropic().messages.stream(body)
    const types: string[] = []
    let text = ''
    for await (const e of stream) {
      types.push(e.type)
      if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') text += e.delta.text
    }
    const deltas = types.filter((t) => t === 'content_block_delta').length
    expect(deltas).toBeGreaterThan(0)
    expect(types).toEqual(['message_start', 'content_block_start', ...Array<string>(deltas).fill('content_block_delta'), 'content_block_stop', 'message_delta', 'message_stop'])
    expect(text).toBe(textOf(whole))
    const final = await stream.finalMessage()
    expect(final.content).toEqual(whole.content)
    expect(final.stop_reason).toBe(whole.stop_reason)
    expect(usageOf(final)).toEqual(usageOf(whole))
  })

  it('tools: tool_choice any is one tool_use block valid under input_schema; the tool_result goes back as the node’s conversation', async () => {
    const client = anthropic()
    const q = { role: 'user' as const, content: 'What is the weather in Paris?' }
    const m = await client.messages.create({ model: MODEL, messages: [q], tools: [weather], tool_choice: { type: 'any' }, max_tokens: 100, ...GREEDY })
    expect(m.stop_reason).toBe('tool_use')
    expect(m.content).toHaveLength(1)
    const use = m.content[0]! as Anthropic.ToolUseBlock
    expect(use).toMatchObject({ type: 'tool_use', name: 'get_weather', id: expect.stringMatching(/^toolu_/) })
    expect(ajv.validate(WEATHER, use.input)).toBe(true)

    const streamed = await client.messages.stream({ model: MODEL, messages: [q], tools: [weather], tool_choice: { type: 'tool', name: 'get_weather' }, max_tokens: 100, ...GREEDY }).finalMessage()
    expect(streamed.stop_reason).toBe('tool_use')
    expect((streamed.content[0] as Anthropic.ToolUseBlock).input).toEqual(use.input)

    const next = await client.messages.create({
      model: MODEL,
      messages: [q, { role: 'assistant', content: m.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '21 degrees' }] }],
      tools: [weather],
      max_tokens: 12,
      ...GREEDY,
    })
    const chatTools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: WEATHER } }]
    const d = await node({
      messages: [q, { role: 'assistant', content: '', tool_calls: [{ id: use.id, type: 'function', function: { name: 'get_weather', arguments: use.input } }] }, { role: 'tool', content: '21 degrees', tool_call_id: use.id }],
      tools: chatTools,
      max_tokens: 12,
      temperature: 0,
    })
    expect(usageOf(next)).toEqual({ prompt: d.usage.prompt_tokens, completion: d.usage.completion_tokens })
  })

  it('countTokens: the prompt tokens messages.create is billed for; no sequence runs for it, it is rate limited and not billed', async () => {
    const key = await stack.s.f.newKey((await stack.s.f.newAccount(1_000_000)).id, 100)
    const body = { model: MODEL, system: 'Be brief.', messages: [{ role: 'user' as const, content: 'How many tokens is this?' }], tools: [weather] }
    const from = stack.s.node.finishes.length
    const { data: counted, response } = await anthropic(key).messages.countTokens(body).withResponse()
    expect(response.headers.get('x-ratelimit-limit-requests')).toBe('100')
    expect(response.headers.get('x-ratelimit-remaining-requests')).toBe('99')
    expect(((await stack.s.client(key).get('/usage')) as Usage).total).toMatchObject({ requests: 0, prompt_tokens: 0, cost_micros: 0 })
    const m = await anthropic(key).messages.create({ ...body, max_tokens: 2 })
    expect(counted.input_tokens).toBe(usageOf(m).prompt)
    // Counted on the node's tokenizer: of the sequences finished since, one has this prompt, messages.create's (a
    // count run as a completion would have finished before it, on the same worker).
    const since = (): number => stack.s.node.finishes.slice(from).filter((f) => f.promptTokens === counted.input_tokens).length
    await waitFor(() => since() > 0, 'the message finished')
    expect(since()).toBe(1)
    // Without the tools the template renders fewer tokens; an unknown model is the spec's 422.
    const plain = await anthropic(key).messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'How many tokens is this?' }] })
    expect(plain.input_tokens).toBeLessThan(counted.input_tokens)
    const bad = await anthropic(key).messages.countTokens({ model: 'nope', messages: [{ role: 'user', content: 'Hi' }] }).catch((e: unknown) => e)
    expect(bad).toBeInstanceOf(Anthropic.UnprocessableEntityError)
    expect((bad as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({ error: { type: 'invalid_request_error', code: 422 } })
  })

  it('usage equals what was billed; a client that leaves mid-stream is billed for what it read', async () => {
    const account = await stack.s.f.newAccount(1_000_000)
    const key = await stack.s.f.newKey(account.id)
    const c = anthropic(key)
    const a = await c.messages.create({ model: MODEL, messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 6 })
    const b = await c.messages.stream({ model: MODEL, messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 9 }).finalMessage()
    const reported = [usageOf(a), usageOf(b)]
    const usage = (await stack.s.client(key).get('/usage')) as Usage
    expect(usage.total).toEqual(
      expect.objectContaining({
        requests: 2,
        prompt_tokens: reported[0]!.prompt + reported[1]!.prompt,
        completion_tokens: reported[0]!.completion + reported[1]!.completion,
        cost_micros: reported.reduce((n, u) => n + defaultCostMicros({ prompt_tokens: u.prompt, completion_tokens: u.completion }), 0),
      }),
    )

    const leaverKey = await stack.s.f.newKey((await stack.s.f.newAccount(1_000_000)).id)
    const aborts = abortCount(stack.s)
    const stream = await anthropic(leaverKey).messages.create({ model: MODEL, messages: [{ role: 'user', content: 'Count to a thousand' }], max_tokens: 1500, stream: true, ...({ ignore_eos: true } as object) })
    let read = 0
    for await (const e of stream) {
      if (e.type === 'content_block_delta') read++
      if (read === 5) break
    }
    await expectBilledForWhatWasRead(stack.s, leaverKey, read, aborts)
  })

  it('errors keep the spec’s error object: a bad key (x-api-key) 401, a missing max_tokens 400, a server tool 422 naming it', async () => {
    const bad = await anthropic('sk-svc-0000000000000000000000000000').messages.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 5 }).catch((e: unknown) => e)
    expect(bad).toBeInstanceOf(Anthropic.AuthenticationError)
    expect((bad as InstanceType<typeof Anthropic.APIError>).error).toEqual({ error: { type: 'authentication_error', code: 401, message: 'Invalid API key' } })
    const missing = await anthropic().messages.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }] } as unknown as Anthropic.MessageCreateParamsNonStreaming).catch((e: unknown) => e)
    expect(missing).toBeInstanceOf(Anthropic.BadRequestError)
    expect((missing as InstanceType<typeof Anthropic.APIError>).message).toMatch(/max_tokens/)
    const server = await anthropic()
      .messages.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 5, tools: [{ type: 'web_search_20250305', name: 'web_search' }] })
      .catch((e: unknown) => e)
    expect(server).toBeInstanceOf(Anthropic.UnprocessableEntityError)
    expect((server as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({ error: { type: 'invalid_request_error', code: 422, message: expect.stringMatching(/'tools\[0\]\.type'/) } })
    const image = await anthropic()
      .messages.create({ model: MODEL, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'http://x/y.png' } }] }], max_tokens: 5 })
      .catch((e: unknown) => e)
    expect((image as InstanceType<typeof Anthropic.APIError>).message).toMatch(/'messages\[0\]\.content\[0\]'/)
  })
})
