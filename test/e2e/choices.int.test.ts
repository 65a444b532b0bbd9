// End to end, issue #14: `n` choices through the official `openai` client → the real facade → a real node on the
// tiny default model. Each choice is its own sequence (choice j seeded with seed + j, so it replays alone), usage
// counts every choice's completion and the prompt once (issue #34: as OpenAI and vLLM count it), the bill and the
// node's prompt-token metrics the same, and the prompt is computed once: the other choices find it in the prefix cache.
import type OpenAI from 'openai'
import { UnprocessableEntityError } from 'openai'
import { describe, expect, it } from 'vitest'
import { apiError, MODEL, suiteStack } from './stack.js'

const LONG = 'The tide came in over the rocks and the gulls rose from the water. '.repeat(4)

describe('n choices on the tiny default model', () => {
  const stack = suiteStack()

  it('chat: n = 3 gives three choices, each the answer its own seed gives alone; usage counts all three completions and the prompt once', async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: LONG }]
    const r = await stack.client.chat.completions.create({ model: MODEL, messages, n: 3, max_tokens: 8, temperature: 1, seed: 40 })
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2])
    const alone = await Promise.all([40, 41, 42].map((seed) => stack.client.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 1, seed })))
    expect(r.choices.map((c) => c.message.content)).toEqual(alone.map((a) => a.choices[0]!.message.content))
    // Different seeds: at temperature 1 on this vocabulary the three texts are not all the same.
    expect(new Set(r.choices.map((c) => c.message.content)).size).toBeGreaterThan(1)
    const prompt = alone[0]!.usage!.prompt_tokens
    expect(r.usage!.prompt_tokens).toBe(prompt)
    expect(r.usage!.completion_tokens).toBe(alone.reduce((n, a) => n + a.usage!.completion_tokens, 0))
    // The prompt's cached tokens are counted once too: never more than the prompt.
    expect(r.usage!.prompt_tokens_details!.cached_tokens).toBeLessThanOrEqual(prompt)
  })

  it('chat, streamed: every choice’s deltas under its index, each finished, one usage for all', async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Say something about boats.' }]
    const json = await stack.client.chat.completions.create({ model: MODEL, messages, n: 2, max_tokens: 6, temperature: 1, seed: 3 })
    const text = ['', '']
    const finish: (string | null)[] = [null, null]
    let usage: OpenAI.CompletionUsage | undefined
    const fingerprints = new Set<string>()
    for await (const c of await stack.client.chat.completions.create({ model: MODEL, messages, n: 2, max_tokens: 6, temperature: 1, seed: 3, stream: true, stream_options: { include_usage: true } })) {
      if (c.system_fingerprint) fingerprints.add(c.system_fingerprint)
      for (const ch of c.choices) {
        text[ch.index] += ch.delta.content ?? ''
        finish[ch.index] = ch.finish_reason ?? finish[ch.index]!
      }
      if (c.usage) usage = c.usage
    }
    expect(text).toEqual(json.choices.map((c) => c.message.content))
    expect(finish).toEqual(json.choices.map((c) => c.finish_reason))
    // The node's fingerprint: the same seed on the same fingerprint gave the same tokens, JSON and streamed.
    expect(json.system_fingerprint).toMatch(/^fp_[0-9a-f]{10}$/)
    expect(fingerprints).toEqual(new Set([json.system_fingerprint]))
    expect(usage).toMatchObject({ prompt_tokens: json.usage!.prompt_tokens, completion_tokens: json.usage!.completion_tokens })
  })

  it('/v1/completions: n per prompt, prompt i’s choice j at index i * n + j', async () => {
    const prompts = ['The sea is', 'Once there was']
    const r = await stack.client.completions.create({ model: MODEL, prompt: prompts, n: 2, max_tokens: 5, temperature: 1, seed: 9 })
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2, 3])
    const alone = await Promise.all(
      [0, 1, 2, 3].map((i) => stack.client.completions.create({ model: MODEL, prompt: prompts[Math.floor(i / 2)]!, max_tokens: 5, temperature: 1, seed: 9 + (i % 2) })),
    )
    expect(r.choices.map((c) => c.text)).toEqual(alone.map((a) => a.choices[0]!.text))
    // Each prompt once, every choice's completion.
    expect(r.usage!.prompt_tokens).toBe(alone[0]!.usage!.prompt_tokens + alone[2]!.usage!.prompt_tokens)
    expect(r.usage!.completion_tokens).toBe(alone.reduce((n, a) => n + a.usage!.completion_tokens, 0))
  })

  it('n = 2 on a 16-token prompt: 16 prompt tokens in the usage, the bill and the node metrics, JSON and streamed, completions and chat', async () => {
    const billed = async (): Promise<{ prompt: number; completion: number; metric: number }> => {
      const rows = await stack.s.f.store.usage({ accountId: stack.s.f.account.id })
      const text = await (await fetch(`${stack.s.node.url}/metrics`)).text()
      const metric = text.split('\n').filter((l) => l.startsWith('onnxd_prompt_tokens_total{')).reduce((n, l) => n + Number(l.slice(l.lastIndexOf(' ') + 1)), 0)
      return { prompt: rows.reduce((n, r) => n + r.promptTokens, 0), completion: rows.reduce((n, r) => n + r.completionTokens, 0), metric }
    }
    /** Runs `call`; returns its usage and what the store billed for it. */
    const measure = async (call: () => Promise<{ prompt_tokens: number; completion_tokens: number }>): Promise<{ usage: { prompt_tokens: number; completion_tokens: number }; billed: { prompt: number; completion: number }; metric: number }> => {
      const before = await billed()
      const usage = await call()
      // The node counts a sequence as its answer ends; the last choice's count may trail the answer a moment.
      let after = await billed()
      for (let i = 0; i < 50 && after.metric - before.metric < usage.prompt_tokens; i++) after = await new Promise((r) => setTimeout(r, 20)).then(billed)
      return { usage, billed: { prompt: after.prompt - before.prompt, completion: after.completion - before.completion }, metric: after.metric - before.metric }
    }
    const ids = Array.from({ length: 16 }, (_, i) => 100 + i)
    const legacy = (n: number) => async () => (await stack.client.completions.create({ model: MODEL, prompt: ids, n, max_tokens: 4, temperature: 1, seed: 5 })).usage!
    const streamed = (n: number) => async () => {
      let usage: OpenAI.CompletionUsage | undefined
      for await (const c of await stack.client.completions.create({ model: MODEL, prompt: ids, n, max_tokens: 4, temperature: 1, seed: 5, stream: true, stream_options: { include_usage: true } })) usage = c.usage ?? usage
      return usage!
    }
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Tell me about the sea.' }]
    const chat = (n: number) => async () => (await stack.client.chat.completions.create({ model: MODEL, messages, n, max_tokens: 4, temperature: 1, seed: 5 })).usage!
    for (const call of [legacy, streamed, chat]) {
      const one = await measure(call(1))
      const two = await measure(call(2))
      if (call !== chat) expect(one.usage.prompt_tokens).toBe(16)
      // The prompt once (it was 32 for 16 with n = 2), both completions; billed exactly as reported.
      expect(two.usage.prompt_tokens).toBe(one.usage.prompt_tokens)
      expect(two.usage.completion_tokens).toBe(8)
      expect(two.billed).toEqual({ prompt: two.usage.prompt_tokens, completion: two.usage.completion_tokens })
      expect(one.billed).toEqual({ prompt: one.usage.prompt_tokens, completion: one.usage.completion_tokens })
      // The node's onnxd_prompt_tokens_total: the prompt once for both choices.
      expect(two.metric).toBe(two.usage.prompt_tokens)
      expect(one.metric).toBe(one.usage.prompt_tokens)
    }
  })

  it('refuses more choices than it runs, and best_of, with a 422 naming the field', async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Hi' }]
    const cases: [() => Promise<unknown>, RegExp][] = [
      [() => stack.client.chat.completions.create({ model: MODEL, messages, n: 17 }), /'n'/],
      [() => stack.client.chat.completions.create({ model: MODEL, messages, n: 0 }), /'n'/],
      [() => stack.client.completions.create({ model: MODEL, prompt: Array(5).fill('x'), n: 16 }), /'n': at most 64 choices per request \(n x prompts\)\. Given: 16 x 5/],
      [() => stack.client.completions.create({ model: MODEL, prompt: 'x', n: 2, best_of: 3 }), /Unsupported parameter 'best_of'/],
    ]
    for (const [p, msg] of cases) {
      const e = await apiError(p())
      expect(e, String(msg)).toBeInstanceOf(UnprocessableEntityError)
      expect(e.message).toMatch(msg)
    }
  })
})
