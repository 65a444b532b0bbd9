// End to end, issue #14: logprobs, top_logprobs and logit_bias through the official `openai` client → the real
// facade → a real node on the tiny default model. The reported log-probabilities are checked against a log-softmax
// computed here from ORT's own logits for the same tokens (onnxruntime-node, one full forward pass per step, no KV
// cache): the node's are the model's raw ones, and a greedy pick is the top one.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type OpenAI from 'openai'
import { UnprocessableEntityError } from 'openai'
import * as ort from 'onnxruntime-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { tinyPlainModelDir } from '../helpers/fixtures.js'
import { apiError, MODEL, nodeCompletion, startStack, type Stack } from './stack.js'

/** Log-softmax of the last position's logits after a full forward pass over `ids`, computed in float64. */
async function logSoftmaxAfter(s: ort.InferenceSession, cfg: { layers: number; kvHeads: number; headDim: number }, ids: number[]): Promise<Float64Array> {
  const n = ids.length
  const i64 = (xs: number[]): ort.Tensor => new ort.Tensor('int64', BigInt64Array.from(xs.map(BigInt)), [1, n])
  const feeds: Record<string, ort.Tensor> = { input_ids: i64(ids), attention_mask: i64(ids.map(() => 1)), position_ids: i64(ids.map((_, i) => i)) }
  for (let l = 0; l < cfg.layers; l++)
    for (const k of ['key', 'value']) feeds[`past_key_values.${l}.${k}`] = new ort.Tensor('float32', new Float32Array(0), [1, cfg.kvHeads, 0, cfg.headDim])
  const out = await s.run(Object.fromEntries(Object.entries(feeds).filter(([k]) => s.inputNames.includes(k))))
  const logits = out.logits!
  const V = logits.dims[2]!
  const row = Float64Array.from((logits.data as Float32Array).subarray((n - 1) * V, n * V))
  const max = row.reduce((a, b) => Math.max(a, b), -Infinity)
  const lse = max + Math.log(row.reduce((z, x) => z + Math.exp(x - max), 0))
  return row.map((x) => x - lse)
}

const topOf = (lp: Float64Array, k: number): number[] => [...lp.keys()].sort((a, b) => lp[b]! - lp[a]! || a - b).slice(0, k)

describe('logprobs and logit_bias on the tiny default model', () => {
  let s: Stack
  let client: OpenAI
  let session: ort.InferenceSession
  let cfg: { layers: number; kvHeads: number; headDim: number }
  beforeAll(async () => {
    s = await startStack()
    client = s.client()
    const dir = tinyPlainModelDir()
    const c = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { num_hidden_layers: number; num_key_value_heads: number; hidden_size: number; num_attention_heads: number }
    cfg = { layers: c.num_hidden_layers, kvHeads: c.num_key_value_heads, headDim: c.hidden_size / c.num_attention_heads }
    session = await ort.InferenceSession.create(join(dir, 'onnx/model.onnx'))
  })
  afterAll(async () => {
    await session?.release()
    await s?.close()
  })

  it('/v1/completions: each greedy token is the top one, its logprob and the top 5 equal a log-softmax of ORT’s logits (1e-4)', async () => {
    const prompt = [1, 403, 407, 261, 378, 395, 289]
    const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 4, temperature: 0, logprobs: 5 })
    const lp = r.choices[0]!.logprobs!
    const direct = (await nodeCompletion(s.node, { input_ids: prompt, max_tokens: 4, temperature: 0 })).body as { output_ids: number[]; text: string }
    expect(lp.tokens).toHaveLength(direct.output_ids.length)
    const ids = [...prompt]
    for (const [i, id] of direct.output_ids.entries()) {
      const ref = await logSoftmaxAfter(session, cfg, ids)
      const top = topOf(ref, 5)
      expect(top[0]).toBe(id)
      expect(lp.token_logprobs![i]).toBeCloseTo(ref[id]!, 4)
      // Keyed by token text, as OpenAI's legacy shape is: tokens whose text is the same (bytes of one character
      // each read as U+FFFD) share a key. Every entry is one of the reference's top 5, the best one first.
      const reported = Object.values(lp.top_logprobs![i]!).sort((x, y) => y - x)
      expect(reported.length).toBeGreaterThan(0)
      expect(reported[0]).toBeCloseTo(ref[id]!, 4)
      for (const v of reported) expect(Math.min(...top.map((t) => Math.abs(ref[t]! - v)))).toBeLessThan(1e-4)
      ids.push(id)
    }
    // The tokens' texts make up the choice's text, and the offsets count them.
    expect(lp.tokens!.join('')).toBe(r.choices[0]!.text)
    expect(lp.text_offset).toEqual(lp.tokens!.map((_, i) => lp.tokens!.slice(0, i).join('').length))
  })

  it('/v1/completions streamed: each chunk carries its tokens’ logprobs, offsets running on; together the JSON answer’s', async () => {
    const req = { model: MODEL, prompt: 'The sea is', max_tokens: 6, temperature: 0, logprobs: 3 }
    const json = (await client.completions.create(req)).choices[0]!.logprobs!
    const got = { tokens: [] as string[], offsets: [] as number[], top: 0 }
    let text = ''
    for await (const c of await client.completions.create({ ...req, stream: true })) {
      const ch = c.choices[0]
      if (!ch) continue
      text += ch.text
      if (!ch.logprobs) continue
      got.tokens.push(...ch.logprobs.tokens!)
      got.offsets.push(...ch.logprobs.text_offset!)
      got.top += ch.logprobs.top_logprobs!.length
    }
    expect(got.tokens).toEqual(json.tokens)
    expect(got.offsets).toEqual(json.text_offset)
    expect(got.top).toBe(json.tokens!.length)
    expect(got.tokens.join('')).toBe(text)
  })

  it('chat: logprobs with top_logprobs in JSON and in the stream are the same entries, the stream one per token', async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Tell me about the sea.' }]
    const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3 })
    const content = r.choices[0]!.logprobs!.content!
    expect(r.choices[0]!.logprobs!.refusal).toBeNull()
    expect(content).toHaveLength(r.usage!.completion_tokens)
    for (const t of content) {
      expect(t.top_logprobs).toHaveLength(3)
      // Greedy: the chosen token is the likeliest one, and the list is best first.
      expect(t.top_logprobs[0]!.token).toBe(t.token)
      expect(t.top_logprobs[0]!.logprob).toBe(t.logprob)
      expect(t.logprob).toBeLessThanOrEqual(0)
      expect(t.top_logprobs.map((x) => x.logprob)).toEqual([...t.top_logprobs.map((x) => x.logprob)].sort((a, b) => b - a))
      expect(t.bytes).toEqual([...Buffer.from(t.token, 'utf8')])
    }
    expect(content.map((t) => t.token).join('')).toBe(r.choices[0]!.message.content)

    const streamed: OpenAI.ChatCompletionTokenLogprob[] = []
    let text = ''
    for await (const c of await client.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3, stream: true })) {
      const ch = c.choices[0]
      if (!ch) continue
      text += ch.delta.content ?? ''
      if (ch.logprobs?.content) streamed.push(...ch.logprobs.content)
    }
    expect(text).toBe(r.choices[0]!.message.content)
    // The same tokens and values (the second request reuses the first's cached prefix: values agree to float rounding).
    const rounded = (xs: OpenAI.ChatCompletionTokenLogprob[]): unknown =>
      xs.map((t) => ({ ...t, logprob: t.logprob.toFixed(5), top_logprobs: t.top_logprobs.map((x) => ({ ...x, logprob: x.logprob.toFixed(5) })) }))
    expect(rounded(streamed)).toEqual(rounded(content))
    // Not asked for: null, as OpenAI answers.
    const plain = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 4, temperature: 0 })
    expect(plain.choices[0]!.logprobs).toBeNull()
  })

  it('logit_bias: -100 bans the greedy token, +100 forces another; the logprobs stay the raw model’s', async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Hello there' }]
    const base = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 2 })
    const first = base.choices[0]!.logprobs!.content![0]!
    const direct = (await nodeCompletion(s.node, { messages, max_tokens: 3, temperature: 0 })).body as { output_ids: number[] }
    const greedy = direct.output_ids[0]!
    const banned = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 2, logit_bias: { [greedy]: -100 } })
    const b0 = banned.choices[0]!.logprobs!.content![0]!
    // The runner-up is picked; its reported logprob is the raw one (the bias is not in it).
    expect(b0.token).toBe(first.top_logprobs[1]!.token)
    expect(b0.logprob).toBeCloseTo(first.top_logprobs[1]!.logprob, 6)
    const forced = (await nodeCompletion(s.node, { messages, max_tokens: 3, temperature: 0, logit_bias: { '300': 100 } })).body as { output_ids: number[] }
    expect(forced.output_ids).toEqual([300, 300, 300])
    // Sampled too: at temperature 1 a +100 bias leaves no other token a chance.
    const sampled = (await nodeCompletion(s.node, { messages, max_tokens: 5, temperature: 1, seed: 7, logit_bias: { '300': 100 } })).body as { output_ids: number[] }
    expect(sampled.output_ids).toEqual([300, 300, 300, 300, 300])
  })

  it('refuses what it cannot do with a 422 naming the field', async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Hi' }]
    const cases: [() => Promise<unknown>, RegExp][] = [
      [() => client.chat.completions.create({ model: MODEL, messages, top_logprobs: 21, logprobs: true }), /top_logprobs/],
      [() => client.chat.completions.create({ model: MODEL, messages, top_logprobs: 2 }), /top_logprobs.*logprobs: true/],
      [() => client.chat.completions.create({ model: MODEL, messages, logit_bias: { abc: 1 } }), /'logit_bias\.abc'/],
      [() => client.chat.completions.create({ model: MODEL, messages, logit_bias: { '99999999': 1 } }), /logit_bias.*token ids in \[0, \d+\)/],
      [() => client.chat.completions.create({ model: MODEL, messages, logit_bias: { '5': 101 } }), /logit_bias/],
      [() => client.completions.create({ model: MODEL, prompt: 'Hi', logprobs: 2, echo: true }), /Unsupported parameter 'logprobs'.*echo/],
      [() => client.completions.create({ model: MODEL, prompt: 'Hi', logprobs: 21 }), /logprobs/],
    ]
    for (const [p, msg] of cases) {
      const e = await apiError(p())
      expect(e, String(msg)).toBeInstanceOf(UnprocessableEntityError)
      expect(e.message).toMatch(msg)
    }
    // top_logprobs is chat's field, not legacy completions'.
    const e = await apiError(client.completions.create({ model: MODEL, prompt: 'Hi', top_logprobs: 2 } as unknown as OpenAI.CompletionCreateParamsNonStreaming))
    expect(e.message).toMatch(/Unrecognized request argument supplied: 'top_logprobs'/)
  })
})
