// Issue #10: the pool replaces a stalled replica, tokenizes off the step loop, and refuses prompts whose bytes
// cannot fit the context before tokenizing them.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEnginePool } from '../../../src/engine/pool/pool.js'
import type { EngineClient, EngineRequest, SeqEvent } from '../../../src/engine/index.js'
import { readTokenizerFiles } from '../../../src/engine/model/bundle.js'
import { TextTokenizer } from '../../../src/engine/tokenizer/tokenizer.js'
import { promptByteLimit } from '../../../src/engine/tokenizer/prompt.js'
import { tinyPlainModelDir } from '../../helpers/fixtures.js'
import { deferred } from '../../helpers/deferred.js'

function collect(pool: EngineClient, req: Partial<EngineRequest>, onEvent?: (e: SeqEvent) => void): Promise<SeqEvent[]> {
  const events: SeqEvent[] = []
  return new Promise((resolve) => {
    pool.submit({ model: 'onnxd-tiny', request_id: 'r', prompt: 'hello', ...req } as EngineRequest, (e) => {
      events.push(e)
      onEvent?.(e)
      if (e.type === 'done' || e.type === 'error') resolve(events)
    })
  })
}

const last = (events: SeqEvent[]): SeqEvent => events[events.length - 1]

async function until(cond: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const t0 = Date.now()
  while (!cond()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

describe('engine pool under hostile load', () => {
  let pool: EngineClient
  let restarts = 0
  let tok: TextTokenizer
  beforeAll(async () => {
    const files = readTokenizerFiles(tinyPlainModelDir())
    tok = new TextTokenizer(files.tokenizer!.json, files.tokenizer!.config, files.chatTemplate)
    pool = createEnginePool(
      { modelDir: tinyPlainModelDir(), modelId: 'onnxd-tiny', workers: 1, intraOpThreads: 1, heartbeatTimeoutMs: 300, stallTimeoutMs: 800, faultInjection: true },
      { onWorkerRestart: () => restarts++ },
    )
    await pool.ready()
  })
  afterAll(() => pool.close())

  it('refuses a prompt with more bytes than the context can hold, naming the bound, without tokenizing it', async () => {
    const context = pool.health().contextLength!
    const limit = promptByteLimit(context, tok)
    expect(tok.lengthPreserving).toBe(true) // byte-level BPE: the bound is exact
    const events = await collect(pool, { prompt: 'x'.repeat(limit + 1) })
    const end = last(events)
    expect(end.type === 'error' && end.error.code).toBe('context_length_exceeded')
    expect(end.type === 'error' && end.error.message).toContain(`holds at most ${limit} bytes`)
    // Chat messages count their contents' bytes.
    const half = 'y'.repeat(Math.ceil(limit / 2) + 1)
    const chat = last(await collect(pool, { prompt: undefined, messages: [{ role: 'system', content: half }, { role: 'user', content: half }] }))
    expect(chat.type === 'error' && chat.error.message).toContain('bytes of text')
  })

  it('issue #32: counts tools, tool-call arguments, tool results and names in the byte bound, refusing before rendering', async () => {
    const limit = promptByteLimit(pool.health().contextLength!, tok)
    const refusedByBytes = (events: SeqEvent[]): void => {
      const end = last(events)
      expect(end.type === 'error' && end.error.code).toBe('context_length_exceeded')
      // The pool's byte check, not the tokenizer's count of tokens: nothing was rendered or tokenized.
      expect(end.type === 'error' && end.error.message).toContain('bytes of text')
      expect(events.map((e) => e.type)).toEqual(['error'])
    }
    const user = [{ role: 'user', content: 'hi' }]
    const description = 'd'.repeat(limit + 1)
    refusedByBytes(await collect(pool, { prompt: undefined, messages: user, tools: [{ type: 'function', function: { name: 'f', description } }] }))
    // Many small tools, none of them large.
    const many = Array.from({ length: 128 }, (_, i) => ({ type: 'function' as const, function: { name: `f${i}`, parameters: { type: 'object', properties: { q: { type: 'string', description: 'e'.repeat(Math.ceil(limit / 128)) } } } } }))
    refusedByBytes(await collect(pool, { prompt: undefined, messages: user, tools: many }))
    // A call's arguments, sent back as the template reads them (an object).
    const call = { id: 'c1', type: 'function', function: { name: 'f', arguments: { q: 'a'.repeat(limit + 1) } } }
    refusedByBytes(await collect(pool, { prompt: undefined, messages: [...user, { role: 'assistant', content: '', tool_calls: [call] }] as EngineRequest['messages'] }))
    // A tool result, and a name.
    refusedByBytes(await collect(pool, { prompt: undefined, messages: [...user, { role: 'tool', content: 'r'.repeat(limit + 1), tool_call_id: 'c1' }] as EngineRequest['messages'] }))
    refusedByBytes(await collect(pool, { prompt: undefined, messages: [{ role: 'user', content: 'hi', name: 'n'.repeat(limit + 1) }] as unknown as EngineRequest['messages'] }))
    // Under the bound, tools are rendered and the request completes.
    const small = last(await collect(pool, { prompt: undefined, messages: user, tools: [{ type: 'function', function: { name: 'f', description: 'a tool' } }], max_tokens: 2 }))
    expect(small.type).toBe('done')
  })

  it('tokenizes a prompt under the byte bound and judges it by its tokens', async () => {
    const limit = promptByteLimit(pool.health().contextLength!, tok)
    const words = 'lorem ipsum dolor sit amet '.repeat(Math.floor(limit / 27))
    const end = last(await collect(pool, { prompt: words }))
    // Too many tokens for the context, found by tokenizing: the engine's own message, with the token count.
    expect(end.type === 'error' && end.error.code).toBe('context_length_exceeded')
    expect(end.type === 'error' && end.error.message).not.toContain('bytes of text')
    // A short text prompt and a chat prompt still complete.
    expect(last(await collect(pool, { prompt: 'hello there', max_tokens: 3 })).type).toBe('done')
    expect(last(await collect(pool, { prompt: undefined, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 })).type).toBe('done')
  })

  it('a stalled replica is replaced: its requests end with worker_crashed, restarts counts it, and the pool is ready again', async () => {
    const started = deferred<void>()
    const inflight = collect(pool, { max_tokens: 2000, temperature: 0, ignore_eos: true }, (e) => e.type === 'token' && started.resolve())
    await started.promise
    const before = restarts
    // Stalls the replica's thread for a minute; the pool gives up on it after stallTimeoutMs (800 ms).
    void pool.inject!({ kind: 'stall', ms: 60_000 })
    const events = await inflight
    const end = last(events)
    expect(end.type === 'error' && end.error.code).toBe('worker_crashed')
    expect(end.type === 'error' && end.error.message).toMatch(/made no progress/)
    await until(() => restarts === before + 1 && pool.health().status === 'ready', 'the replacement replica')
    expect(pool.health().restarts).toBe(before + 1)
    const again = await collect(pool, { max_tokens: 4, temperature: 0 })
    expect(last(again).type).toBe('done')
  })

  it('a client that cancels while its prompt is being tokenized ends without reaching a replica', async () => {
    const limit = promptByteLimit(pool.health().contextLength!, tok)
    const events: SeqEvent[] = []
    const ended = deferred<void>()
    const cancel = pool.submit({ model: 'onnxd-tiny', request_id: 'c', prompt: 'word '.repeat(Math.floor(limit / 5)) } as EngineRequest, (e) => {
      events.push(e)
      if (e.type === 'done' || e.type === 'error') ended.resolve()
    })
    cancel()
    await ended.promise
    expect(events.map((e) => e.type)).toEqual(['error'])
    expect(pool.health().running).toBe(0)
  })
})
