// End to end, issue #34: OpenAI's Responses API (POST /v1/responses and the kept responses) through the official
// `openai` client, the AI SDK's default OpenAI provider (`openai(modelId)` calls /v1/responses) and LangChain's
// ChatOpenAI with `useResponsesApi`, to the real facade and a real node on the tiny default model. Greedy answers
// equal the node's own answer to the same conversation as chat messages; usage equals what was billed; a client that
// leaves mid-stream is billed for what it read.
import { Ajv } from 'ajv'
import type OpenAI from 'openai'
import { NotFoundError, UnprocessableEntityError } from 'openai'
import { createOpenAI } from '@ai-sdk/openai'
import { generateObject, generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai'
import { ChatOpenAI } from '@langchain/openai'
import { z } from 'zod'
import { describe, expect, it } from 'vitest'
import { abortCount, apiError, defaultCostMicros, expectBilledForWhatWasRead, MODEL, nodeAnswer, nodeCompletion, suiteStack, WEATHER_PARAMETERS, type NodeAnswer } from './stack.js'


const WEATHER = WEATHER_PARAMETERS
const weatherTool: OpenAI.Responses.FunctionTool = { type: 'function', name: 'get_weather', description: 'The weather in a city', parameters: WEATHER, strict: true }
const ajv = new Ajv({ strict: false })

type Usage = { total: { requests: number; prompt_tokens: number; completion_tokens: number; cost_micros: number } }

describe('POST /v1/responses through the openai client', () => {
  const stack = suiteStack()
  const node = (body: Record<string, unknown>): Promise<NodeAnswer> => nodeAnswer(stack.s.node, body)

  it('plain: a string input and instructions give the node’s greedy answer to the same messages, its usage, incomplete when cut', async () => {
    const r = await stack.client.responses.create({ model: MODEL, input: 'Tell me about the sea', instructions: 'You are terse.', max_output_tokens: 12, temperature: 0 })
    const d = await node({ messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Tell me about the sea' }], max_tokens: 12, temperature: 0 })
    expect(r).toMatchObject({ object: 'response', id: expect.stringMatching(/^resp_/), model: MODEL, instructions: 'You are terse.', max_output_tokens: 12, store: true })
    expect(r.output_text).toBe(d.text)
    expect(r.output).toEqual([{ type: 'message', id: expect.stringMatching(/^msg_/), role: 'assistant', status: d.finish_reason === 'length' ? 'incomplete' : 'completed', content: [{ type: 'output_text', text: d.text, annotations: [], logprobs: [] }] }])
    expect(r.status).toBe(d.finish_reason === 'length' ? 'incomplete' : 'completed')
    expect(r.incomplete_details).toEqual(d.finish_reason === 'length' ? { reason: 'max_output_tokens' } : null)
    expect(r.usage).toMatchObject({ input_tokens: d.usage.prompt_tokens, output_tokens: d.usage.completion_tokens, total_tokens: d.usage.prompt_tokens + d.usage.completion_tokens, input_tokens_details: { cached_tokens: expect.any(Number) } })
  })

  it('streamed: the typed events in OpenAI’s order, numbered; the deltas make the JSON answer’s text; the final response is the JSON one', async () => {
    const body = { model: MODEL, input: 'Once upon a time', max_output_tokens: 10, temperature: 0, store: false } as const
    const whole = await stack.client.responses.create(body)
    const events: OpenAI.Responses.ResponseStreamEvent[] = []
    for await (const e of await stack.client.responses.create({ ...body, stream: true })) events.push(e)
    const types = events.map((e) => e.type)
    const deltas = types.filter((t) => t === 'response.output_text.delta').length
    expect(deltas).toBeGreaterThan(0)
    expect(types).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      ...Array<string>(deltas).fill('response.output_text.delta'),
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      whole.status === 'incomplete' ? 'response.incomplete' : 'response.completed',
    ])
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i))
    const text = events.flatMap((e) => (e.type === 'response.output_text.delta' ? [e.delta] : [])).join('')
    expect(text).toBe(whole.output_text)
    const done = events.find((e) => e.type === 'response.output_text.done')!
    expect(done.type === 'response.output_text.done' && done.text).toBe(text)
    const last = events.at(-1)! as OpenAI.Responses.ResponseCompletedEvent
    // The second run's prompt comes from the prefix cache: only cached_tokens may differ.
    expect(last.response.usage).toMatchObject({ input_tokens: whole.usage!.input_tokens, output_tokens: whole.usage!.output_tokens, total_tokens: whole.usage!.total_tokens })
    expect(last.response.output[0]).toMatchObject({ type: 'message', content: [{ type: 'output_text', text }] })
    expect(events[0]).toMatchObject({ response: { status: 'in_progress', output: [] } })
  })

  it('tools: a required call is a function_call item valid under its parameters; its output goes back (by previous_response_id and statelessly) as the node’s conversation', async () => {
    const first = await stack.client.responses.create({ model: MODEL, input: 'What is the weather in Paris?', tools: [weatherTool], tool_choice: 'required', temperature: 0, max_output_tokens: 100 })
    expect(first.output).toHaveLength(1)
    const call = first.output[0]! as OpenAI.Responses.ResponseFunctionToolCall
    expect(call).toMatchObject({ name: 'get_weather', call_id: expect.stringMatching(/^call_/), status: 'completed' })
    expect(call.type).toBe('function_call')
    expect(ajv.validate(WEATHER, JSON.parse(call.arguments)), call.arguments).toBe(true)
    // The node's own answer to the same request, as chat messages and chat's tool shape.
    const chatTools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: WEATHER, strict: true } }]
    const direct = await node({ messages: [{ role: 'user', content: 'What is the weather in Paris?' }], tools: chatTools, tool_choice: 'required', temperature: 0, max_tokens: 100 })
    expect(JSON.parse(/<tool_call>\s*(.*?)\s*<\/tool_call>/s.exec(direct.text)![1]!)).toEqual({ name: 'get_weather', arguments: JSON.parse(call.arguments) })

    const result = { type: 'function_call_output', call_id: call.call_id, output: '{"temperature": 21}' } as const
    const chained = await stack.client.responses.create({ model: MODEL, previous_response_id: first.id, input: [result], tools: [weatherTool], temperature: 0, max_output_tokens: 12 })
    const stateless = await stack.client.responses.create({
      model: MODEL,
      input: [{ role: 'user', content: 'What is the weather in Paris?' }, { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments }, result],
      tools: [weatherTool],
      temperature: 0,
      max_output_tokens: 12,
      store: false,
    })
    const reply = await node({
      messages: [
        { role: 'user', content: 'What is the weather in Paris?' },
        { role: 'assistant', content: '', tool_calls: [{ id: call.call_id, type: 'function', function: { name: 'get_weather', arguments: JSON.parse(call.arguments) } }] },
        { role: 'tool', content: result.output, tool_call_id: call.call_id },
      ],
      tools: chatTools,
      temperature: 0,
      max_tokens: 12,
    })
    expect(chained.previous_response_id).toBe(first.id)
    for (const r of [chained, stateless]) {
      expect(r.usage!.input_tokens).toBe(reply.usage.prompt_tokens)
      expect(r.usage!.output_tokens).toBe(reply.usage.completion_tokens)
    }
    expect(stateless.output).toEqual(chained.output.map((x) => ({ ...x, id: expect.any(String), ...('call_id' in x ? { call_id: expect.any(String) } : {}) })))
  })

  it('streamed tool call: output_item.added, function_call_arguments.delta and .done, output_item.done carry the call', async () => {
    const events: OpenAI.Responses.ResponseStreamEvent[] = []
    const req: OpenAI.Responses.ResponseCreateParamsNonStreaming = { model: MODEL, input: 'Weather in Oslo?', tools: [weatherTool], tool_choice: { type: 'function', name: 'get_weather' }, temperature: 1, top_p: 0.9, max_output_tokens: 100, store: false, ...({ seed: 5 } as object) }
    const whole = await stack.client.responses.create(req)
    for await (const e of await stack.client.responses.create({ ...req, stream: true })) events.push(e)
    expect(events.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ])
    const args = events.find((e) => e.type === 'response.function_call_arguments.done')! as OpenAI.Responses.ResponseFunctionCallArgumentsDoneEvent
    expect(args.arguments).toBe((whole.output[0] as OpenAI.Responses.ResponseFunctionToolCall).arguments)
  })

  it('text.format json_schema: the output parses and is valid under the schema', async () => {
    const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 0, maximum: 120 } }, required: ['name', 'age'], additionalProperties: false }
    for (const seed of [1, 2, 3]) {
      const r = await stack.client.responses.create({ model: MODEL, input: 'A person as JSON', text: { format: { type: 'json_schema', name: 'person', schema, strict: true } }, temperature: 1, max_output_tokens: 80, store: false, ...({ seed } as object) })
      expect(r.status).toBe('completed')
      expect(r.text?.format).toMatchObject({ type: 'json_schema', name: 'person' })
      expect(ajv.validate(schema, JSON.parse(r.output_text)), r.output_text).toBe(true)
    }
  })

  it('previous_response_id continues the conversation; retrieve, input_items and delete; another account sees none of it', async () => {
    const first = await stack.client.responses.create({ model: MODEL, input: 'My name is Ada.', instructions: 'Be brief.', temperature: 0, max_output_tokens: 8 })
    const second = await stack.client.responses.create({ model: MODEL, previous_response_id: first.id, input: [{ role: 'user', content: 'What is my name?' }], temperature: 0, max_output_tokens: 8 })
    // The previous turn's instructions are not carried over (OpenAI's rule); its input and output are.
    const d = await node({ messages: [{ role: 'user', content: 'My name is Ada.' }, { role: 'assistant', content: first.output_text }, { role: 'user', content: 'What is my name?' }], temperature: 0, max_tokens: 8 })
    expect(second.output_text).toBe(d.text)
    expect(second.usage!.input_tokens).toBe(d.usage.prompt_tokens)

    const got = await stack.client.responses.retrieve(first.id)
    expect(got.id).toBe(first.id)
    expect(got.output).toEqual(first.output)
    expect(got.usage).toEqual(first.usage)
    expect(got.output_text).toBe(first.output_text)
    const items = await stack.client.responses.inputItems.list(second.id)
    expect(items.data).toEqual([{ type: 'message', id: expect.stringMatching(/^msg_/), role: 'user', status: 'completed', content: [{ type: 'input_text', text: 'What is my name?' }] }])

    const other = stack.s.client(await stack.s.f.newKey((await stack.s.f.newAccount(1_000_000)).id))
    expect(await apiError(other.responses.retrieve(first.id))).toBeInstanceOf(NotFoundError)
    expect(await apiError(other.responses.delete(first.id))).toBeInstanceOf(NotFoundError)
    expect(await apiError(other.responses.inputItems.list(second.id))).toBeInstanceOf(NotFoundError)
    expect(await apiError(other.responses.create({ model: MODEL, previous_response_id: first.id, input: 'Hi' }))).toBeInstanceOf(NotFoundError)

    await stack.client.responses.delete(first.id)
    expect(await apiError(stack.client.responses.retrieve(first.id))).toBeInstanceOf(NotFoundError)
    expect((await stack.client.responses.retrieve(second.id)).id).toBe(second.id)
    // An item of a kept response, by reference; one of another account's, or of none, is not found.
    const referenced = await stack.client.responses.create({ model: MODEL, input: [{ role: 'user', content: 'What is my name?' }, { type: 'item_reference', id: second.output[0]!.id! }], temperature: 0, max_output_tokens: 4, store: false })
    expect((await stack.client.responses.inputItems.list(second.id)).data).toHaveLength(1)
    expect(referenced.status).not.toBe('failed')
    expect(await apiError(other.responses.create({ model: MODEL, input: [{ type: 'item_reference', id: second.output[0]!.id! }] }))).toBeInstanceOf(NotFoundError)
    expect(await apiError(stack.client.responses.create({ model: MODEL, input: [{ type: 'item_reference', id: 'msg_nothing_0' }] }))).toBeInstanceOf(NotFoundError)
    const unkept = await stack.client.responses.create({ model: MODEL, input: 'Hi', store: false, max_output_tokens: 2 })
    expect((unkept as unknown as { store: boolean }).store).toBe(false)
    expect(await apiError(stack.client.responses.retrieve(unkept.id))).toBeInstanceOf(NotFoundError)
  })

  it('fields onnxd cannot honour are a 422 naming them', async () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ tools: [{ type: 'web_search' }] }, /'tools\[0\]\.type'.*built-in/],
      [{ background: true }, /'background'/],
      [{ reasoning: { effort: 'high' } }, /'reasoning'/],
      [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x' }] }] }, /'input\[0\]\.content\[0\]'/],
      [{ input: [{ type: 'reasoning', id: 'rs_1', summary: [] }] }, /'input\[0\]\.type'/],
      [{ conversation: 'conv_1' }, /'conversation'/],
      [{ no_such_field: 1 }, /'no_such_field'/],
    ]
    for (const [extra, message] of cases) {
      const e = await apiError(stack.client.responses.create({ model: MODEL, input: 'Hi', ...extra } as OpenAI.Responses.ResponseCreateParamsNonStreaming))
      expect(e, JSON.stringify(extra)).toBeInstanceOf(UnprocessableEntityError)
      expect(e.error).toMatchObject({ type: 'invalid_request_error', code: 422, message: expect.stringMatching(message) })
    }
  })

  it('usage equals what was billed, streamed or not; a client that leaves mid-stream is billed for what it read', async () => {
    const account = await stack.s.f.newAccount(1_000_000)
    const c = stack.s.client(await stack.s.f.newKey(account.id))
    const a = await c.responses.create({ model: MODEL, input: 'Tell me a story', max_output_tokens: 6, store: false })
    let b: OpenAI.Responses.Response | null = null
    for await (const e of await c.responses.create({ model: MODEL, input: 'Tell me a story', max_output_tokens: 9, stream: true })) {
      if (e.type === 'response.completed' || e.type === 'response.incomplete') b = e.response
    }
    const reported = [a.usage!, b!.usage!]
    const usage = (await c.get('/usage')) as Usage
    expect(usage.total).toEqual(
      expect.objectContaining({
        requests: 2,
        prompt_tokens: reported.reduce((n, u) => n + u.input_tokens, 0),
        completion_tokens: reported.reduce((n, u) => n + u.output_tokens, 0),
        cost_micros: reported.reduce((n, u) => n + defaultCostMicros({ prompt_tokens: u.input_tokens, completion_tokens: u.output_tokens }), 0),
      }),
    )

    const leaverKey = await stack.s.f.newKey((await stack.s.f.newAccount(1_000_000)).id)
    const aborts = abortCount(stack.s)
    let read = 0
    for await (const e of await stack.s.client(leaverKey).responses.create({ model: MODEL, input: 'Count to a thousand', max_output_tokens: 1500, stream: true, ...({ ignore_eos: true } as object) })) {
      if (e.type === 'response.output_text.delta') read++
      if (read === 5) break
    }
    await expectBilledForWhatWasRead(stack.s, leaverKey, read, aborts)
  })
})

describe('the AI SDK’s default OpenAI provider and LangChain’s useResponsesApi', () => {
  const stack = suiteStack()
  const provider = () => createOpenAI({ baseURL: stack.s.baseURL, apiKey: stack.s.f.key })
  const greedy = async (content: string, max: number): Promise<NodeAnswer> =>
    (await nodeCompletion(stack.s.node, { messages: [{ role: 'user', content }], max_tokens: max, temperature: 0 })).body as unknown as NodeAnswer

  it('generateText and streamText give the node’s greedy answer, and its usage', async () => {
    const d = await greedy('Tell me about the sea', 10)
    const r = await generateText({ model: provider()(MODEL), prompt: 'Tell me about the sea', maxOutputTokens: 10, temperature: 0 })
    expect(r.text).toBe(d.text)
    expect(r.usage.inputTokens).toBe(d.usage.prompt_tokens)
    expect(r.usage.outputTokens).toBe(d.usage.completion_tokens)
    const s = streamText({ model: provider()(MODEL), prompt: 'Tell me about the sea', maxOutputTokens: 10, temperature: 0 })
    let text = ''
    for await (const t of s.textStream) text += t
    expect(text).toBe(d.text)
    expect((await s.usage).outputTokens).toBe(d.usage.completion_tokens)
  })

  it('generateObject: an object valid under its zod schema', async () => {
    const r = await generateObject({
      model: provider()(MODEL),
      schema: z.object({ name: z.string().max(12), age: z.number().int().min(0).max(120) }),
      prompt: 'A person',
      temperature: 0,
      maxOutputTokens: 80,
    })
    expect(typeof r.object.name).toBe('string')
    expect(Number.isInteger(r.object.age)).toBe(true)
  })

  it('a required tool call: one call, its input valid under the tool’s schema', async () => {
    const r = await generateText({
      model: provider()(MODEL),
      prompt: 'What is the weather in Paris?',
      tools: { get_weather: tool({ description: 'The weather in a city', inputSchema: jsonSchema<{ city: string; unit: 'c' | 'f' }>(WEATHER as unknown as Parameters<typeof jsonSchema>[0]) }) },
      toolChoice: 'required',
      temperature: 0,
      maxOutputTokens: 100,
    })
    expect(r.toolCalls).toHaveLength(1)
    expect(r.toolCalls[0]!.toolName).toBe('get_weather')
    expect(ajv.validate(WEATHER, r.toolCalls[0]!.input)).toBe(true)
    expect(r.finishReason).toBe('tool-calls')
  })

  it('a tool loop (execute, two steps), and a conversation whose earlier answer the SDK sends as an item_reference to the kept response', async () => {
    const sent: { input: { type?: string }[] }[] = []
    const watched = createOpenAI({
      baseURL: stack.s.baseURL,
      apiKey: stack.s.f.key,
      fetch: async (url, init) => {
        if (typeof init?.body === 'string') sent.push(JSON.parse(init.body) as (typeof sent)[number])
        return fetch(url, init)
      },
    })
    const executed: unknown[] = []
    const r = await generateText({
      model: watched(MODEL),
      prompt: 'What is the weather in Paris?',
      tools: {
        get_weather: tool({
          description: 'The weather in a city',
          inputSchema: jsonSchema<{ city: string; unit: 'c' | 'f' }>(WEATHER as unknown as Parameters<typeof jsonSchema>[0]),
          execute: async (input) => {
            executed.push(input)
            return { temperature: 21 }
          },
        }),
      },
      toolChoice: 'required',
      stopWhen: stepCountIs(2),
      temperature: 0,
      maxOutputTokens: 100,
    })
    expect(r.steps).toHaveLength(2)
    expect(executed).toHaveLength(2)
    expect(sent[1]!.input.map((i) => i.type)).toEqual([undefined, 'function_call', 'function_call_output'])

    const first = await generateText({ model: watched(MODEL), prompt: 'My name is Ada.', temperature: 0, maxOutputTokens: 8 })
    const second = await generateText({ model: watched(MODEL), messages: [{ role: 'user', content: 'My name is Ada.' }, ...first.response.messages, { role: 'user', content: 'What is my name?' }], temperature: 0, maxOutputTokens: 8 })
    expect(sent.at(-1)!.input.map((i) => i.type)).toEqual([undefined, 'item_reference', undefined])
    const d = await nodeCompletion(stack.s.node, { messages: [{ role: 'user', content: 'My name is Ada.' }, { role: 'assistant', content: first.text }, { role: 'user', content: 'What is my name?' }], temperature: 0, max_tokens: 8 })
    expect(second.text).toBe((d.body as unknown as NodeAnswer).text)
  })

  it('LangChain ChatOpenAI with useResponsesApi: the node’s greedy answer, invoked and streamed', async () => {
    const d = await greedy('Tell me about the sea', 10)
    const llm = new ChatOpenAI({ model: MODEL, useResponsesApi: true, apiKey: stack.s.f.key, configuration: { baseURL: stack.s.baseURL }, temperature: 0, maxTokens: 10, maxRetries: 0 })
    const m = await llm.invoke('Tell me about the sea')
    expect(m.text).toBe(d.text)
    expect(m.usage_metadata).toMatchObject({ input_tokens: d.usage.prompt_tokens, output_tokens: d.usage.completion_tokens })
    let streamed = ''
    for await (const chunk of await llm.stream('Tell me about the sea')) streamed += chunk.text
    expect(streamed).toBe(d.text)
  })
})
