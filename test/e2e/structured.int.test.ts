// End to end, issue #14: structured outputs through the official `openai` client → the real facade → a real node on
// the tiny default model (random weights: left free, it writes no JSON at all). response_format json_object and
// json_schema constrain every token (xgrammar's mask per step), so every answer parses, and validates under the
// schema (checked with ajv), streamed or not, at temperature 1 over 200 seeded samples. The nested schema is the one
// bench/grammar.bench.ts times the mask on.
import { Ajv } from 'ajv'
import type OpenAI from 'openai'
import { UnprocessableEntityError } from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { apiError, MODEL, nodeCompletion, startStack, type Stack } from './stack.js'
import { SCHEMA } from '../../bench/grammar.bench.js'

const jsonSchema = (schema: object = SCHEMA): OpenAI.ResponseFormatJSONSchema => ({ type: 'json_schema', json_schema: { name: 'pet', schema: schema as Record<string, unknown>, strict: true } })

describe('structured outputs on the tiny default model', () => {
  let s: Stack
  let client: OpenAI
  const validate = new Ajv({ strict: false }).compile(SCHEMA)
  beforeAll(async () => {
    s = await startStack()
    client = s.client()
  })
  afterAll(() => s?.close())

  const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Describe a pet as JSON.' }]

  it('unconstrained, the random model writes no JSON: the constraint is what makes the answers parse', async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 40, temperature: 0 })
    expect(() => JSON.parse(r.choices[0]!.message.content!)).toThrow()
  })

  it('json_schema: 200 seeded samples at temperature 1 all parse and validate, and end with finish_reason stop', async () => {
    const bad: string[] = []
    let finished = 0
    for (let batch = 0; batch < 25; batch++) {
      const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 400, temperature: 1, seed: 1000 + 8 * batch, n: 8, response_format: jsonSchema() })
      for (const c of r.choices) {
        const text = c.message.content ?? ''
        if (c.finish_reason === 'stop') finished++
        try {
          if (!validate(JSON.parse(text))) bad.push(`${text}: ${JSON.stringify(validate.errors)}`)
        } catch {
          bad.push(text)
        }
      }
    }
    expect(bad).toEqual([])
    expect(finished).toBe(200)
  }, 180_000)

  it('json_schema streamed: the deltas put together parse and validate, the same text as the JSON answer', async () => {
    const req = { model: MODEL, messages, max_tokens: 400, temperature: 1, seed: 77, response_format: jsonSchema() }
    const json = await client.chat.completions.create(req)
    let text = ''
    let finish: string | null = null
    for await (const c of await client.chat.completions.create({ ...req, stream: true })) {
      text += c.choices[0]?.delta.content ?? ''
      finish = c.choices[0]?.finish_reason ?? finish
    }
    expect(text).toBe(json.choices[0]!.message.content)
    expect(validate(JSON.parse(text))).toBe(true)
    expect(finish).toBe('stop')
  })

  it('json_object: an object whenever the value ends (a free-form object can run past max_tokens, as with OpenAI), chat and /v1/completions', async () => {
    const isObject = (text: string): boolean => {
      const v = JSON.parse(text) as unknown
      return typeof v === 'object' && v !== null && !Array.isArray(v)
    }
    let ended = 0
    for (const temperature of [0, 1]) {
      const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 400, temperature, seed: 5, n: 8, response_format: { type: 'json_object' } })
      for (const c of r.choices) {
        if (c.finish_reason === 'length') continue
        ended++
        expect(c.finish_reason).toBe('stop')
        expect(isObject(c.message.content!), c.message.content!).toBe(true)
      }
    }
    // Greedy ends (8 of 8 here), and so do some sampled ones.
    expect(ended).toBeGreaterThan(8)
    const legacy = await client.completions.create({ model: MODEL, prompt: 'A pet:', max_tokens: 400, temperature: 0, response_format: { type: 'json_object' } } as OpenAI.CompletionCreateParamsNonStreaming)
    expect(legacy.choices[0]!.finish_reason).toBe('stop')
    expect(isObject(legacy.choices[0]!.text)).toBe(true)
    // {"type":"text"} is free text, as without the field.
    const text = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 20, temperature: 0, response_format: { type: 'text' } })
    const plain = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 20, temperature: 0 })
    expect(text.choices[0]!.message.content).toBe(plain.choices[0]!.message.content)
  })

  it('a number at the root ends where the model ends it (its EOS), not at its first digit; an object at its closing brace', async () => {
    const EOS = 2 // the tiny model's eos_token_id
    for (const schema of [{ type: 'integer' }, { type: 'number' }]) {
      const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 64, temperature: 1, seed: 41, n: 8, response_format: jsonSchema(schema) })
      for (const c of r.choices) {
        expect(c.finish_reason, c.message.content!).toBe('stop')
        const v = JSON.parse(c.message.content!) as unknown
        expect(schema.type === 'integer' ? Number.isSafeInteger(v) : Number.isFinite(v), c.message.content!).toBe(true)
      }
      // On the node, the ids: the numbers go on past a sign and a digit, to where the model wrote its EOS or to their
      // last digit allowed.
      const sample = (i: number, extra: object = {}): Promise<{ text: string; output_ids: number[] }> =>
        nodeCompletion(s.node, { messages, max_tokens: 64, temperature: 1, seed: 300 + i, response_format: jsonSchema(schema), ...extra }).then((r) => r.body as never)
      const answers = await Promise.all([0, 1, 2, 3, 4, 5, 6, 7].map((i) => sample(i)))
      expect(answers.some((a) => a.output_ids.filter((id) => id !== EOS).length > 2), JSON.stringify(answers)).toBe(true)
      // With the EOS made likely, each ends with it as soon as the text is a number: allowed there, and only there.
      for (const a of await Promise.all([0, 1, 2, 3].map((i) => sample(i, { logit_bias: { [EOS]: 20 } })))) {
        expect(a.output_ids.at(-1), a.text).toBe(EOS)
        expect(Number.isFinite(JSON.parse(a.text)), a.text).toBe(true)
        expect(a.output_ids.length, a.text).toBeLessThanOrEqual(a.text.startsWith('-') ? 3 : 2)
      }
    }
    for (const schema of [SCHEMA, { type: 'string', maxLength: 8 }, { type: 'boolean' }]) {
      const a = (await nodeCompletion(s.node, { messages, max_tokens: 400, temperature: 0, response_format: jsonSchema(schema) })).body as { text: string; finish_reason: string; output_ids: number[] }
      expect(a.finish_reason).toBe('stop')
      // The last id is the value's last character: no step spent on an EOS.
      expect(a.output_ids.at(-1)).not.toBe(EOS)
      expect(JSON.parse(a.text)).toBeDefined()
    }
  })

  it('logprobs under a schema: the picked tokens are the grammar’s, the reported values the raw model’s', async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 400, temperature: 0, logprobs: true, top_logprobs: 1, response_format: jsonSchema() })
    const content = r.choices[0]!.logprobs!.content!
    expect(content.map((t) => t.token).join('')).toBe(r.choices[0]!.message.content)
    // The model's own top token is not '{': the grammar chose against it, and the logprob says so.
    expect(content[0]!.token).toBe('{')
    expect(content[0]!.top_logprobs[0]!.token).not.toBe('{')
    expect(content[0]!.logprob).toBeLessThan(content[0]!.top_logprobs[0]!.logprob)
  })

  it('refuses what it cannot honour with a 422 naming the field', async () => {
    const cases: [() => Promise<unknown>, RegExp][] = [
      [() => client.chat.completions.create({ model: MODEL, messages, response_format: { type: 'json_object' }, ignore_eos: true } as OpenAI.ChatCompletionCreateParamsNonStreaming), /ignore_eos/],
      [() => client.chat.completions.create({ model: MODEL, messages, response_format: { type: 'xml' } as unknown as OpenAI.ResponseFormatText }), /response_format/],
      [() => client.chat.completions.create({ model: MODEL, messages, response_format: jsonSchema({ type: 'object', properties: { a: { $ref: '#/nope' } } }) }), /response_format\.json_schema\.schema/],
    ]
    for (const [p, msg] of cases) {
      const e = await apiError(p())
      expect(e, String(msg)).toBeInstanceOf(UnprocessableEntityError)
      expect(e.message).toMatch(msg)
    }
    // The node itself answers its own 422 for a schema that cannot compile.
    const direct = await nodeCompletion(s.node, { prompt: 'x', response_format: jsonSchema({ type: 'object', properties: { a: { $ref: '#/nope' } } }) })
    expect(direct.status).toBe(422)
  })
})
