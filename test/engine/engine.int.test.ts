// The engine end to end on a real trained model (stories260K-hf): determinism, stop strings, validation.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Engine } from '../../src/engine/engine.js'
import { readBundle } from '../../src/engine/model/bundle.js'
import { tinyPlainModelDir, fixture, haveFixtures, tinyGqaModelDir } from '../helpers/fixtures.js'
import { runRequest } from '../helpers/engine-run.js'

describe.skipIf(!haveFixtures)('engine on stories260K-hf', () => {
  let engine: Engine
  beforeAll(async () => {
    engine = await Engine.load({ modelDir: fixture('stories260K-hf') })
  })
  afterAll(() => engine.close())

  const prompt = 'Once upon a time'

  it('writes a story: greedy decoding is deterministic and readable', async () => {
    const a = await runRequest(engine, { prompt, max_tokens: 40, temperature: 0 })
    const b = await runRequest(engine, { prompt, max_tokens: 40, temperature: 0 })
    expect(a.end.type).toBe('done')
    expect(a.ids).toEqual(b.ids)
    expect(a.text).toBe(b.text)
    // A trained TinyStories model continues with English words, not byte soup.
    expect(a.text).toMatch(/\b(there|was|a|little|girl|boy|named)\b/)
    if (a.end.type === 'done') {
      expect(a.end.usage.completion_tokens).toBe(40)
      expect(a.end.usage.prompt_tokens).toBe(5)
      expect(a.end.finishReason).toBe('length')
    }
  })

  it('the same seed gives the same sample; other seeds differ', async () => {
    const req = { prompt, max_tokens: 30, temperature: 1, top_p: 0.95 }
    const a = await runRequest(engine, { ...req, seed: 7 })
    const b = await runRequest(engine, { ...req, seed: 7 })
    expect(a.ids).toEqual(b.ids)
    const others = await Promise.all([8, 9, 10].map((seed) => runRequest(engine, { ...req, seed })))
    expect(others.some((o) => o.ids.join() !== a.ids.join())).toBe(true)
  })

  it('stops at a stop string that spans tokens, without streaming any of it', async () => {
    const full = await runRequest(engine, { prompt, max_tokens: 40, temperature: 0 })
    // A stop string cut from the middle of the greedy text, across token boundaries.
    const at = full.text.indexOf(' ', 12)
    const stop = full.text.slice(at, at + 7)
    expect(stop.length).toBe(7)
    const r = await runRequest(engine, { prompt, max_tokens: 40, temperature: 0, stop })
    expect(r.end.type).toBe('done')
    if (r.end.type !== 'done') return
    expect(r.end.finishReason).toBe('stop')
    expect(r.text).toBe(full.text.slice(0, full.text.indexOf(stop)))
    // No delta ever carried part of the stop string: the stream is exactly the final text.
    const streamed = r.events.map((e) => (e.type === 'token' || e.type === 'done' ? e.text : ''))
    expect(streamed.join('')).not.toContain(stop)
    expect(r.end.usage.completion_tokens).toBeLessThan(40)
  })

  it('max_tokens 1 finishes at the first token', async () => {
    const r = await runRequest(engine, { prompt, max_tokens: 1, temperature: 0 })
    expect(r.end.type === 'done' && r.end.finishReason).toBe('length')
    expect(r.ids).toHaveLength(1)
  })

  it('rejects out-of-range sampling values as invalid_value', async () => {
    const r = await runRequest(engine, { prompt, temperature: 5 })
    expect(r.end.type).toBe('error')
    if (r.end.type === 'error') {
      expect(r.end.error.code).toBe('invalid_value')
      expect(r.end.error.message).toMatch(/temperature/)
    }
  })

  it('rejects prompt + max_tokens over the context as context_length_exceeded', async () => {
    const r = await runRequest(engine, { prompt, max_tokens: 600 })
    expect(r.end.type === 'error' && r.end.error.code).toBe('context_length_exceeded')
  })

  it('needs exactly one of messages, prompt, input_ids', async () => {
    const r = await runRequest(engine, { prompt, input_ids: [1, 2] })
    expect(r.end.type === 'error' && r.end.error.code).toBe('invalid_request')
    const none = await runRequest(engine, {})
    expect(none.end.type === 'error' && none.end.error.code).toBe('invalid_request')
  })

  it('rejects messages for a base model without a chat template, and unknown models', async () => {
    const r = await runRequest(engine, { messages: [{ role: 'user', content: 'hi' }] })
    expect(r.end.type === 'error' && r.end.error.message).toMatch(/no chat template/)
    const m = await runRequest(engine, { prompt, model: 'gpt-4' })
    expect(m.end.type === 'error' && m.end.error.code).toBe('invalid_value')
  })

  it('a cancelled request ends at once and frees its slot', async () => {
    const run = runRequest(engine, { prompt, max_tokens: 400, temperature: 0, ignore_eos: true }, (n) => {
      if (n === 3) run.cancel()
    })
    const r = await run
    expect(r.end.type).toBe('error')
    expect(r.ids.length).toBeLessThan(10)
    expect(engine.stats().running).toBe(0)
  })
})

describe('engine on the embedded default model (onnxd-tiny)', () => {
  let engine: Engine
  beforeAll(async () => {
    engine = await Engine.load({ modelDir: tinyPlainModelDir() })
  })
  afterAll(() => engine.close())

  it('applies the chat template to messages', async () => {
    const tok = engine.model.tokenizer!
    const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello 👋' }]
    const rendered = tok.renderChat(messages)
    expect(rendered).toContain('<|im_start|>user\nHello 👋<|im_end|>')
    expect(rendered.endsWith('<|im_start|>assistant\n')).toBe(true)
    const r = await runRequest(engine, { messages, max_tokens: 8, temperature: 0, ignore_eos: true })
    expect(r.end.type === 'done' && r.end.usage.prompt_tokens).toBe(tok.encodeChat(messages).length)
  })

  it('streams deltas that add up to the decoded tokens, multi-byte characters included', async () => {
    // Sampling at temperature 1.5 from random weights emits plenty of lone UTF-8 bytes and multi-byte pieces.
    for (const seed of [1, 2, 3]) {
      const r = await runRequest(engine, { prompt: 'héllo 日本 🙂', max_tokens: 60, temperature: 1.5, seed, ignore_eos: true })
      expect(r.end.type).toBe('done')
      expect(r.text).toBe(engine.model.tokenizer!.decode(r.ids))
      const deltas = r.events.flatMap((e) => (e.type === 'token' && e.text ? [e.text] : []))
      // A delta may only carry U+FFFD when the model really produced an invalid byte sequence there.
      if (!r.text.includes('\uFFFD')) for (const d of deltas) expect(d).not.toContain('\uFFFD')
    }
  })

  it('reports the KV cache it holds while serving, and gives it back once idle', async () => {
    let during = 0
    const r = await runRequest(engine, { prompt: 'hello', max_tokens: 20, temperature: 0, ignore_eos: true }, (n) => {
      if (n === 10) during = engine.stats().kvUsedBytes
    })
    expect(r.end.type).toBe('done')
    // At least the tokens of the running sequence, for every layer's key and value.
    expect(during).toBeGreaterThanOrEqual(10 * engine.model.kvBytesPerToken)
    const t0 = Date.now()
    while (engine.stats().kvUsedBytes > 0 && Date.now() - t0 < 5000) await new Promise((res) => setTimeout(res, 100))
    expect(engine.stats().kvUsedBytes).toBe(0)
  })
})

describe('--max-model-len (maxModelLen): the longest sequence served, shorter than the model context', () => {
  it("serves up to it, refuses past it as past the context, and refuses one longer than the model's context", async () => {
    const e = await Engine.load({ modelDir: tinyGqaModelDir(), maxModelLen: 40 })
    try {
      expect(e.model.contextLength).toBe(40)
      const ok = await runRequest(e, { input_ids: [5, 6, 7, 8, 9], max_tokens: 35, temperature: 0, ignore_eos: true })
      expect(ok.end.type === 'done' && ok.end.usage.completion_tokens).toBe(35)
      const past = await runRequest(e, { input_ids: [5, 6, 7, 8, 9], max_tokens: 36 })
      expect(past.end.type === 'error' && past.end.error.code).toBe('context_length_exceeded')
      expect(past.end.type === 'error' && past.end.error.message).toMatch(/<= 40/)
    } finally {
      await e.close()
    }
    const ctx = readBundle(tinyGqaModelDir()).contextLength
    await expect(Engine.load({ modelDir: tinyGqaModelDir(), maxModelLen: ctx + 1 })).rejects.toThrow(
      new RegExp(`--max-model-len must be an integer from 2 to the model's context length, ${ctx} .*Given: ${ctx + 1}`),
    )
  })
})

// The C API runs each step on the engine's own thread, and a step settles in microtasks: without a turn of the event
// loop between steps, timers and worker messages (new requests, cancels) would wait until every sequence had ended.
describe.each(['capi', 'js'] as const)('runtime %s: the loop turns the event loop between steps', (runtime) => {
  let engine: Engine
  beforeAll(async () => {
    engine = await Engine.load({ modelDir: tinyPlainModelDir(), runtime })
  })
  afterAll(() => engine.close())

  it("takes work that comes between steps: a timer's request joins a running decode, a timer's cancel ends one", async () => {
    expect(engine.model.session.runtime).toBe(runtime)
    let longTokens = 0
    let joinedAt = -1
    let late: Promise<unknown> = Promise.resolve()
    const long = runRequest(engine, { prompt: 'hello', max_tokens: 400, temperature: 0, ignore_eos: true }, (n) => {
      longTokens = n
      if (n === 2) {
        setTimeout(() => {
          late = runRequest(engine, { prompt: 'world', max_tokens: 5, temperature: 0, ignore_eos: true }, (m) => {
            if (m === 1) joinedAt = longTokens
          })
        }, 0)
      }
    })
    const cut = runRequest(engine, { prompt: 'hi', max_tokens: 400, temperature: 0, ignore_eos: true }, (n) => {
      if (n === 3) setTimeout(() => cut.cancel(), 0)
    })
    const [a, b] = await Promise.all([long, cut])
    await late
    expect(a.end.type).toBe('done')
    // The short request ran beside the long one, long before its 400 tokens; the cancel ended the other at once.
    expect(joinedAt).toBeGreaterThan(0)
    expect(joinedAt).toBeLessThan(50)
    expect(b.end.type).toBe('error')
    expect(b.ids.length).toBeLessThan(50)
  })
})

describe('prefill groups (onnxd-tiny, 128-token steps)', () => {
  /** The prefill steps (rows, tokens) of a burst of `n` prompts of `len` tokens. */
  async function prefillSteps(n: number, len: number, modelDir = tinyPlainModelDir()): Promise<Array<{ batch: number; tokens: number }>> {
    const steps: Array<{ batch: number; tokens: number }> = []
    // The prompts are all the same: with prefix caching on, every group after the first would reuse the first's.
    const engine = await Engine.load({ modelDir, maxBatchedTokens: 128, prefixCaching: false }, { onStep: (s) => s.phase === 'prefill' && steps.push({ batch: s.batch, tokens: s.tokens }) })
    try {
      const ids = Array.from({ length: len }, (_, i) => 5 + i)
      const runs = await Promise.all(Array.from({ length: n }, () => runRequest(engine, { input_ids: ids, max_tokens: 2, temperature: 0, ignore_eos: true })))
      for (const r of runs) expect(r.end.type).toBe('done')
    } finally {
      await engine.close()
    }
    return steps
  }

  it('long prompts: groups of at most 4 rows, so chunks keep 32 columns or more', async () => {
    const steps = await prefillSteps(12, 40)
    // Equal lengths: no padding, so the steps carry exactly the prompts' tokens.
    expect(steps.reduce((n, s) => n + s.tokens, 0)).toBe(12 * 40)
    for (const s of steps) {
      expect(s.batch).toBeLessThanOrEqual(4)
      expect(s.tokens).toBeLessThanOrEqual(128)
    }
    // Each group: a 32-column chunk, then the prompts' last 8 columns.
    expect(steps.map((s) => s.tokens / s.batch)).toEqual([32, 8, 32, 8, 32, 8])
  })

  it('short prompts that fit one step whole are prefilled together', async () => {
    const steps = await prefillSteps(12, 8)
    expect(Math.max(...steps.map((s) => s.batch))).toBeGreaterThan(4)
    for (const s of steps) expect(s.tokens).toBeLessThanOrEqual(128)
  })

  it('GroupQueryAttention: prompts that fit one step whole are prefilled together, longer ones one at a time', async () => {
    const short = await prefillSteps(12, 8, tinyGqaModelDir())
    expect(Math.max(...short.map((s) => s.batch))).toBeGreaterThan(4)
    expect(short.reduce((n, s) => n + s.tokens, 0)).toBe(12 * 8)
    for (const s of short) expect(s.tokens).toBeLessThanOrEqual(128)
    // Two prompts of 70 tokens do not fit 128 whole: chunks over a past, where GroupQueryAttention takes one row.
    const long = await prefillSteps(3, 70, tinyGqaModelDir())
    expect(long.reduce((n, s) => n + s.tokens, 0)).toBe(3 * 70)
    for (const s of long) expect(s.batch).toBe(1)
  })
})
