// End to end, issue #14: POST /v1/completions through the official `openai` client → the real facade → a real
// node, on the tiny default model and on the trained base model `stories260K-hf` (no chat template; skipped without
// ONNXD_FIXTURES). The facade's text is the node's own for the same prompt, usage is billed as chat's is, and the
// base model, which chat cannot serve, writes its story through /v1/completions.
import type OpenAI from 'openai'
import { UnprocessableEntityError } from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fixture, haveFixtures } from '../helpers/fixtures.js'
import { apiError, defaultCostMicros, MODEL, nodeCompletion, startStack, type Stack } from './stack.js'

interface Streamed {
  text: string
  finish: string | null
  usage: OpenAI.CompletionUsage | null
}

async function collect(stream: AsyncIterable<OpenAI.Completion>): Promise<Streamed> {
  const out: Streamed = { text: '', finish: null, usage: null }
  for await (const c of stream) {
    expect(c.object).toBe('text_completion')
    out.text += c.choices[0]?.text ?? ''
    out.finish = c.choices[0]?.finish_reason ?? out.finish
    if (c.usage) out.usage = c.usage
  }
  return out
}

type Direct = { text: string; finish_reason: string; usage: { prompt_tokens: number; completion_tokens: number } }

describe('/v1/completions on the tiny default model', () => {
  let s: Stack
  let client: OpenAI
  beforeAll(async () => {
    s = await startStack()
    client = s.client()
  })
  afterAll(() => s?.close())

  it('JSON and streamed answers carry the node’s own text, finish reason and usage; the balance goes down by their cost', async () => {
    const before = (await s.f.store.getAccount(s.f.account.id))!.balanceMicros
    const prompt = 'The sea is'
    const direct = await nodeCompletion(s.node, { prompt, max_tokens: 10, temperature: 0 })
    expect(direct.status).toBe(200)
    const d = direct.body as unknown as Direct

    const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 10, temperature: 0 })
    expect(r.choices).toEqual([{ text: d.text, index: 0, logprobs: null, finish_reason: d.finish_reason }])
    expect(r.usage).toMatchObject({ prompt_tokens: d.usage.prompt_tokens, completion_tokens: d.usage.completion_tokens, total_tokens: d.usage.prompt_tokens + d.usage.completion_tokens })

    const st = await collect(
      await client.completions.create({ model: MODEL, prompt, max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true } }),
    )
    expect(st.text).toBe(d.text)
    expect(st.finish).toBe(d.finish_reason)
    expect(st.usage).toEqual(r.usage)

    const after = (await s.f.store.getAccount(s.f.account.id))!.balanceMicros
    expect(before - after).toBe(2 * defaultCostMicros(d.usage))
  })

  it('several prompts: one choice each, the node’s own text per prompt, JSON and streamed', async () => {
    const prompts = ['The sea is', 'Once there was']
    const direct = await Promise.all(prompts.map((prompt) => nodeCompletion(s.node, { prompt, max_tokens: 6, temperature: 0 })))
    const texts = direct.map((d) => (d.body as unknown as Direct).text)
    const r = await client.completions.create({ model: MODEL, prompt: prompts, max_tokens: 6, temperature: 0 })
    expect(r.choices.map((c) => [c.index, c.text])).toEqual([[0, texts[0]], [1, texts[1]]])
    const got = ['', '']
    for await (const c of await client.completions.create({ model: MODEL, prompt: prompts, max_tokens: 6, temperature: 0, stream: true })) {
      for (const ch of c.choices) got[ch.index] += ch.text
    }
    expect(got).toEqual(texts)
  })

  it('lists both endpoints for a model with a chat template', async () => {
    const page = await client.models.list()
    expect((page.data[0] as unknown as { endpoints: string[] }).endpoints).toEqual(['chat.completions', 'completions', 'responses', 'messages'])
  })
})

const STORIES = 'stories260K-hf'

describe.skipIf(!haveFixtures)(`/v1/completions on ${STORIES} (a base model without a chat template)`, () => {
  let s: Stack
  let client: OpenAI
  beforeAll(async () => {
    s = await startStack({ modelDir: fixture(STORIES), modelId: STORIES })
    client = s.client()
  })
  afterAll(() => s?.close())

  it('greedy "Once upon a time" is the real story, the node’s own text, streamed or not', async () => {
    const prompt = 'Once upon a time'
    const direct = await nodeCompletion(s.node, { model: STORIES, prompt, max_tokens: 40, temperature: 0 })
    expect(direct.status).toBe(200)
    const d = direct.body as unknown as Direct

    const r = await client.completions.create({ model: STORIES, prompt, max_tokens: 40, temperature: 0 })
    const text = r.choices[0]!.text
    expect(text).toBe(d.text)
    // The TinyStories model's greedy continuation: English words of a story, not gibberish.
    expect(text).toMatch(/^, there was a little/)
    expect(text.split(/\s+/).filter((w) => /^[A-Za-z.,!']+$/.test(w)).length).toBeGreaterThan(20)

    const echoed = await client.completions.create({ model: STORIES, prompt, max_tokens: 40, temperature: 0, echo: true })
    expect(echoed.choices[0]!.text).toBe(prompt + text)

    const st = await collect(await client.completions.create({ model: STORIES, prompt, max_tokens: 40, temperature: 0, stream: true }))
    expect(st.text).toBe(text)
  })

  it('is listed with the completions endpoint only, and chat on it is a 422 that says to use /v1/completions', async () => {
    const page = await client.models.list()
    expect(page.data).toEqual([{ id: STORIES, object: 'model', created: expect.any(Number), owned_by: 'onnxd', endpoints: ['completions'] }])
    const e = await apiError(client.chat.completions.create({ model: STORIES, messages: [{ role: 'user', content: 'Hi' }] }))
    expect(e).toBeInstanceOf(UnprocessableEntityError)
    expect(e.message).toMatch(/no chat template.*\/v1\/completions/)
  })
})
