// End to end, issue #14: tool calls through the official `openai` client → the real facade → a real node on the tiny
// default model, whose chat template (the builder's) renders tools as Qwen2.5's does (Hermes style). A required or
// named tool_choice constrains the output to one call whose arguments are valid under the function's parameters
// (checked with ajv); the parsed calls are the generated text's own; a conversation with the calls and their
// results goes back to the model; streaming carries the calls as delta.tool_calls; a template without tools is a 422.
import { Ajv } from 'ajv'
import type OpenAI from 'openai'
import { UnprocessableEntityError } from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fixture, haveFixtures } from '../helpers/fixtures.js'
import { apiError, MODEL, nodeCompletion, startStack, suiteStack, type Stack } from './stack.js'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { CHAT_TEMPLATE } from '../../src/builder/tokenizer.js'

const WEATHER: OpenAI.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 20 }, unit: { enum: ['c', 'f'] }, days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['city', 'unit'], additionalProperties: false },
    strict: true,
  },
}
const TIME: OpenAI.ChatCompletionTool = {
  type: 'function',
  function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string', maxLength: 10 } }, required: ['zone'], additionalProperties: false } },
}

const ajv = new Ajv({ strict: false })
const valid = { get_weather: ajv.compile(WEATHER.function.parameters!), get_time: ajv.compile(TIME.function.parameters!) }
const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'What is the weather in Paris?' }]

describe('tool calls on the tiny default model', () => {
  const stack = suiteStack()

  it("tool_choice 'required': every sampled answer is one call to a listed function, its arguments valid, finish_reason tool_calls", async () => {
    for (let seed = 0; seed < 5; seed++) {
      const r = await stack.client.chat.completions.create({ model: MODEL, messages, tools: [WEATHER, TIME], tool_choice: 'required', temperature: 1, seed, n: 4, max_tokens: 200 })
      for (const c of r.choices) {
        expect(c.finish_reason).toBe('tool_calls')
        expect(c.message.content).toBeNull()
        expect(c.message.tool_calls).toHaveLength(1)
        const call = c.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall
        expect(call).toMatchObject({ type: 'function', id: expect.stringMatching(/^call_/) })
        const name = call.function.name as keyof typeof valid
        expect(['get_weather', 'get_time']).toContain(name)
        expect(valid[name](JSON.parse(call.function.arguments)), call.function.arguments).toBe(true)
      }
    }
  })

  it('a named function is the one called; the parsed call is the text the node generated', async () => {
    const req: OpenAI.ChatCompletionCreateParamsNonStreaming = { model: MODEL, messages, tools: [WEATHER, TIME], tool_choice: { type: 'function', function: { name: 'get_time' } }, temperature: 0, max_tokens: 200 }
    const r = await stack.client.chat.completions.create(req)
    const call = r.choices[0]!.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall
    expect(call.function.name).toBe('get_time')
    const direct = (await nodeCompletion(stack.s.node, { messages, tools: [WEATHER, TIME], tool_choice: req.tool_choice, temperature: 0, max_tokens: 200 })).body as { text: string }
    const m = /^<tool_call>\n(.*)\n<\/tool_call>$/s.exec(direct.text)
    expect(m, direct.text).not.toBeNull()
    const generated = JSON.parse(m![1]!) as { name: string; arguments: unknown }
    expect(generated.name).toBe('get_time')
    expect(JSON.parse(call.function.arguments)).toEqual(generated.arguments)
  })

  it('streamed: the call arrives as delta.tool_calls, the same as the JSON answer, then finish_reason tool_calls', async () => {
    const req: OpenAI.ChatCompletionCreateParamsNonStreaming = { model: MODEL, messages, tools: [WEATHER], tool_choice: 'required', temperature: 1, seed: 11, max_tokens: 200 }
    const json = await stack.client.chat.completions.create(req)
    const want = json.choices[0]!.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall
    let content = ''
    let name = ''
    let args = ''
    let finish: string | null = null
    for await (const c of await stack.client.chat.completions.create({ ...req, stream: true })) {
      const ch = c.choices[0]
      if (!ch) continue
      content += ch.delta.content ?? ''
      for (const t of ch.delta.tool_calls ?? []) {
        name += t.function?.name ?? ''
        args += t.function?.arguments ?? ''
      }
      finish = ch.finish_reason ?? finish
    }
    expect(content).toBe('')
    expect([name, args]).toEqual([want.function.name, want.function.arguments])
    expect(finish).toBe('tool_calls')
  })

  it("a conversation goes on with the calls and their results: the template renders them, and tool_choice 'none' answers in text", async () => {
    const history: OpenAI.ChatCompletionMessageParam[] = [
      ...messages,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris","unit":"c"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temperature":21}' },
    ]
    const r = await stack.client.chat.completions.create({ model: MODEL, messages: history, tools: [WEATHER], tool_choice: 'none', temperature: 0, max_tokens: 8 })
    expect(r.choices[0]!.message.tool_calls).toBeUndefined()
    expect(typeof r.choices[0]!.message.content).toBe('string')
    // The rendered conversation is longer than the question alone by the tools, the call and the result.
    const alone = await stack.client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 1 })
    expect(r.usage!.prompt_tokens).toBeGreaterThan(alone.usage!.prompt_tokens + 40)
  })

  it('auto: free text stays text (the random model writes no call), nothing is held back', async () => {
    const r = await stack.client.chat.completions.create({ model: MODEL, messages, tools: [TIME], tool_choice: 'auto', temperature: 0, max_tokens: 12 })
    const plain = await stack.client.chat.completions.create({ model: MODEL, messages, tools: [TIME], tool_choice: 'none', temperature: 0, max_tokens: 12 })
    expect(r.choices[0]!.message).toEqual({ role: 'assistant', content: plain.choices[0]!.message.content })
    let text = ''
    for await (const c of await stack.client.chat.completions.create({ model: MODEL, messages, tools: [TIME], temperature: 0, max_tokens: 12, stream: true })) text += c.choices[0]?.delta.content ?? ''
    expect(text).toBe(r.choices[0]!.message.content)
  })

  it('auto with a strict tool: text stays the model’s own text (the grammar holds only calls), and any call is valid', async () => {
    const strict = await stack.client.chat.completions.create({ model: MODEL, messages, tools: [WEATHER], tool_choice: 'auto', temperature: 0, max_tokens: 24 })
    const free = await stack.client.chat.completions.create({ model: MODEL, messages, tools: [WEATHER], tool_choice: 'none', temperature: 0, max_tokens: 24 })
    expect(strict.choices[0]!.message.content).toBe(free.choices[0]!.message.content)
    const sampled = await stack.client.chat.completions.create({ model: MODEL, messages, tools: [WEATHER], temperature: 1, seed: 3, n: 8, max_tokens: 60 })
    for (const c of sampled.choices) {
      expect(['stop', 'length', 'tool_calls']).toContain(c.finish_reason)
      for (const t of c.message.tool_calls ?? []) expect(valid.get_weather(JSON.parse((t as OpenAI.ChatCompletionMessageFunctionToolCall).function.arguments))).toBe(true)
    }
  })

  it('refuses what it cannot honour with a 422 naming the field', async () => {
    const cases: [() => Promise<unknown>, RegExp][] = [
      [() => stack.client.chat.completions.create({ model: MODEL, messages, tools: [TIME], tool_choice: { type: 'function', function: { name: 'nope' } } }), /the function 'nope' is not in 'tools'/],
      [() => stack.client.chat.completions.create({ model: MODEL, messages, tool_choice: 'required' }), /'required' needs 'tools'/],
      [
        () => stack.client.chat.completions.create({ model: MODEL, messages, tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'array', uniqueItems: true } } } } }], tool_choice: 'required' }),
        /tools\[\]\.function\.parameters.*uniqueItems/,
      ],
      [() => stack.client.chat.completions.create({ model: MODEL, messages: [{ role: 'tool', content: 'x' } as unknown as OpenAI.ChatCompletionMessageParam] }), /tool_call_id/],
      [
        () => stack.client.chat.completions.create({ model: MODEL, messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: 'not json' } }] }] }),
        /tool_calls\[0\]\.function\.arguments/,
      ],
    ]
    for (const [p, msg] of cases) {
      const e = await apiError(p())
      expect(e, String(msg)).toBeInstanceOf(UnprocessableEntityError)
      expect(e.message).toMatch(msg)
    }
  })
})

describe.skipIf(!haveFixtures)('tools on a fixture model (tiny-random-LlamaForCausalLM-fp16)', () => {
  let s: Stack
  let withTools: Stack
  let dir: string
  const FIXTURE = 'tiny-random-LlamaForCausalLM-fp16'
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'onnxd-template-'))
    // The builder's template, which renders tools Hermes style, served in place of the fixture's (--chat-template).
    writeFileSync(join(dir, 'hermes.jinja'), CHAT_TEMPLATE)
    s = await startStack({ modelDir: fixture(FIXTURE), modelId: 'llama' })
    withTools = await startStack({ modelDir: fixture(FIXTURE), modelId: 'llama', chatTemplateFile: join(dir, 'hermes.jinja') })
  })
  afterAll(async () => {
    await s?.close()
    await withTools?.close()
    rmSync(dir, { recursive: true, force: true })
  })

  it('its own template has no tools: a 422 saying the template cannot render them', async () => {
    const r = await nodeCompletion(s.node, { model: 'llama', messages: [{ role: 'user', content: 'hi' }], tools: [TIME] })
    expect(r.status).toBe(422)
    expect(JSON.stringify(r.body)).toMatch(/chat template does not render tools/)
  })

  it('with a template that renders tools: the parsed calls are the calls in the text the node generated', async () => {
    const client = withTools.client()
    const req = { model: 'llama', messages, tools: [WEATHER, TIME], temperature: 1, max_tokens: 120 }
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.create({ ...req, tool_choice: 'required', seed })
      const direct = (await nodeCompletion(withTools.node, { ...req, tool_choice: 'required', seed })).body as { text: string }
      const inText = [...direct.text.matchAll(/<tool_call>\n(.*?)\n<\/tool_call>/gs)].map((m) => JSON.parse(m[1]!) as { name: string; arguments: unknown })
      expect(inText.length).toBe(1)
      const calls = r.choices[0]!.message.tool_calls!.map((c) => c as OpenAI.ChatCompletionMessageFunctionToolCall)
      expect(calls.map((c) => ({ name: c.function.name, arguments: JSON.parse(c.function.arguments) as unknown }))).toEqual(inText)
      expect(valid[calls[0]!.function.name as keyof typeof valid](JSON.parse(calls[0]!.function.arguments))).toBe(true)
    }
    expect(((await (await fetch(`${withTools.node.url}/health`)).json()) as { chat_template: boolean }).chat_template).toBe(true)
  })
})
