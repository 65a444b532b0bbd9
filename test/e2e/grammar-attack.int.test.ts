// Issue #32: no structured-output schema takes a node down. Through the real facade and node (tiny default model),
// while a bystander streams greedy completions: the 80 KB schema of 3,000 optional properties and a burst of twelve
// 630 KB enum schemas are refused at once with a 422 naming the bound, and four different slow schemas within the
// bounds (256 properties: about a second of compile each) compile on the grammar thread and are answered. The
// bystander's streams all complete with the text it gets alone, /health stays ready, no worker is replaced, memory
// does not balloon, and a small schema afterwards works.
import type OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { apiError, MODEL, suiteStack } from './stack.js'

const props = (n: number, prefix: string): Record<string, unknown> => Object.fromEntries(Array.from({ length: n }, (_, i) => [`${prefix}${i}`, { type: 'integer' }]))
const format = (schema: Record<string, unknown>): OpenAI.ResponseFormatJSONSchema => ({ type: 'json_schema', json_schema: { name: 'x', schema } })

describe('structured-output schemas against a serving node', () => {
  const stack = suiteStack()

  it('refuses the oversized ones at once, compiles the slow ones off the step loop, and the bystander never notices', async () => {
    const { s, client } = stack
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Tell me a story.' }]
    const bystander = async (): Promise<string> => {
      let text = ''
      const stream = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 48, temperature: 0, stream: true })
      for await (const c of stream) text += c.choices[0]?.delta.content ?? ''
      return text
    }
    const alone = await bystander()
    const rss0 = process.memoryUsage().rss

    const health: number[] = []
    let attacking = true
    const poll = (async () => {
      while (attacking) {
        health.push((await fetch(`${s.node.url}/health`)).status)
        await new Promise((r) => setTimeout(r, 100))
      }
    })()
    const texts: string[] = []
    const watching = (async () => {
      while (attacking) texts.push(await bystander())
    })()

    const huge = apiError(client.chat.completions.create({ model: MODEL, messages, max_tokens: 8, response_format: format({ type: 'object', properties: props(3000, 'p') }) }))
    const enums = Array.from({ length: 12 }, (_, k) =>
      apiError(
        client.chat.completions.create({
          model: MODEL,
          messages,
          max_tokens: 8,
          response_format: format({ type: 'object', properties: { a: { enum: Array.from({ length: 12_000 }, (_, i) => `v${k}-${i}-${'x'.repeat(40)}`) } } }),
        }),
      ),
    )
    const slow = Array.from({ length: 4 }, (_, k) => client.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 0, response_format: format({ type: 'object', properties: props(256, `s${k}_`) }) }))

    const e = await huge
    expect(e.status).toBe(422)
    expect(e.message).toMatch(/more than 256 object properties/)
    for (const r of await Promise.all(enums)) {
      expect(r.status).toBe(422)
      expect(r.message).toMatch(/more than 1024 enum values|bytes of JSON schema/)
    }
    for (const r of await Promise.all(slow)) expect(r.choices[0]!.finish_reason).toMatch(/stop|length/)
    // Two more of the bystander's streams after the attack, then stop watching.
    const seen = texts.length
    while (texts.length < seen + 2) await new Promise((r) => setTimeout(r, 50))
    attacking = false
    await Promise.all([poll, watching])

    expect(texts.length).toBeGreaterThan(2)
    for (const t of texts) expect(t).toBe(alone)
    expect(health.length).toBeGreaterThan(0)
    expect(health.every((h) => h === 200)).toBe(true)
    const metrics = await (await fetch(`${s.node.url}/metrics`)).text()
    expect(metrics).toMatch(/^onnxd_worker_restarts_total\{[^}]*\} 0$/m)
    // Twelve 630 KB enums took a node from 195 MB to 1.4 GB before the bounds; now they never reach the compiler.
    expect(process.memoryUsage().rss - rss0).toBeLessThan(300 * 1024 ** 2)

    const small = await client.chat.completions.create({
      model: MODEL,
      messages,
      max_tokens: 60,
      temperature: 0,
      response_format: format({ type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] }),
    })
    expect(JSON.parse(small.choices[0]!.message.content!)).toHaveProperty('ok')
  }, 180_000)
})
