// Issue #10, item 1: eight clients sending megabyte prompts must not take the service down. Through the real
// facade in front of the real node (tiny default model): while they send, a bystander's short streams all
// complete and the node's /health stays `ready`.
import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { FastifyInstance } from 'fastify'
import { buildNode } from '../../src/node/app.js'
import { createEnginePool } from '../../src/engine/pool/pool.js'
import type { EngineClient } from '../../src/engine/index.js'
import { readTokenizerFiles } from '../../src/engine/model/bundle.js'
import { TextTokenizer } from '../../src/engine/tokenizer/tokenizer.js'
import { promptByteLimit } from '../../src/engine/tokenizer/prompt.js'
import { tinyPlainModelDir } from '../helpers/fixtures.js'
import { facadeFixture, type FacadeFixture } from '../helpers/facade.js'
import { listen, testOptions } from './helpers.js'

const ATTACK_MS = 6000
const ATTACKERS = 8

/** Words from a seeded generator, `bytes` long: text a tokenizer has real work on. */
function words(bytes: number, seed: number): string {
  let x = seed
  const parts: string[] = []
  let n = 0
  while (n < bytes) {
    x = (x * 1103515245 + 12345) >>> 0
    const w = (x >>> 8).toString(36)
    parts.push(w)
    n += w.length + 1
  }
  return parts.join(' ').slice(0, bytes)
}

describe('large prompts against the real facade and node', () => {
  let node: FastifyInstance
  let engine: EngineClient
  let nodeUrl: string
  let f: FacadeFixture
  let baseURL: string
  let byteLimit: number
  beforeAll(async () => {
    engine = createEnginePool({ modelDir: tinyPlainModelDir(), modelId: 'onnxd-tiny', workers: 1, intraOpThreads: 1 })
    node = buildNode(testOptions(), { engine })
    nodeUrl = await listen(node)
    await engine.ready()
    f = await facadeFixture({ nodeUrls: [nodeUrl], options: { keyRpm: 0, fleetRpm: 0, healthIntervalMs: 2000 }, deps: { pollHealth: true } })
    baseURL = `${await f.app.listen({ port: 0, host: '127.0.0.1' })}/v1`
    const files = readTokenizerFiles(tinyPlainModelDir())
    byteLimit = promptByteLimit(engine.health().contextLength!, new TextTokenizer(files.tokenizer!.json, files.tokenizer!.config, files.chatTemplate))
  })
  afterAll(async () => {
    await f?.close()
    await node?.close()
    await engine?.close()
  })

  /** Runs `attacker`s until ATTACK_MS have passed, with a bystander streaming and /health polled meanwhile. */
  async function underAttack(attack: (i: number, send: (body: string) => Promise<void>) => Promise<void>): Promise<{ statuses: Map<number, number>; messages: Set<string>; streams: Array<{ finish: string | null; text: string }>; health: string[] }> {
    const until = Date.now() + ATTACK_MS
    const statuses = new Map<number, number>()
    const messages = new Set<string>()
    const send = async (body: string): Promise<void> => {
      const res = await fetch(`${baseURL}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${f.key}`, 'content-type': 'application/json' },
        body,
      })
      const answer = (await res.json()) as { error?: { message: string; type: string; code: number } }
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1)
      if (answer.error) {
        expect(answer.error.code).toBe(res.status)
        messages.add(`${answer.error.type}: ${answer.error.message.replace(/\d+/g, 'N')}`)
      }
    }
    const attacker = async (i: number): Promise<void> => {
      while (Date.now() < until) await attack(i, send)
    }
    const health: string[] = []
    const poller = async (): Promise<void> => {
      while (Date.now() < until) {
        const res = await fetch(`${nodeUrl}/health`)
        health.push(`${res.status} ${((await res.json()) as { status: string }).status}`)
        await new Promise((r) => setTimeout(r, 100))
      }
    }
    const client = new OpenAI({ apiKey: f.key, baseURL, maxRetries: 0 })
    const streams: Array<{ finish: string | null; text: string }> = []
    const bystander = async (): Promise<void> => {
      while (Date.now() < until) {
        const stream = await client.chat.completions.create({ model: 'onnxd-tiny', messages: [{ role: 'user', content: 'hello' }], max_tokens: 8, temperature: 0, stream: true })
        let text = ''
        let finish: string | null = null
        for await (const chunk of stream) {
          text += chunk.choices[0]?.delta.content ?? ''
          finish = chunk.choices[0]?.finish_reason ?? finish
        }
        streams.push({ finish, text })
      }
    }
    await Promise.all([...Array.from({ length: ATTACKERS }, (_, i) => attacker(i)), poller(), bystander()])
    return { statuses, messages, streams, health }
  }

  /** Every stream completed, greedy, with the same whole answer; /health said ready throughout. */
  function bystanderUnharmed(streams: Array<{ finish: string | null; text: string }>, health: string[]): void {
    expect(streams.length).toBeGreaterThanOrEqual(3)
    expect(streams[0].text.length).toBeGreaterThan(0)
    for (const s of streams) expect(s).toEqual({ finish: streams[0].finish, text: streams[0].text })
    expect(streams[0].finish).toMatch(/^(length|stop)$/)
    expect(health.length).toBeGreaterThan(10)
    expect(new Set(health)).toEqual(new Set(['200 ready']))
  }

  it('a bystander streams throughout and /health stays ready while 8 clients send ~1 MB prompts', async () => {
    // Each attacker alternates a prompt of about 1 MB (under the facade's body limit) and one just under the node's
    // byte bound, which is tokenized in full before it is found too long in tokens.
    const { statuses, streams, health } = await underAttack(async (i, send) => {
      const huge = JSON.stringify({ model: 'onnxd-tiny', messages: [{ role: 'user', content: 'a'.repeat(1_000_000) }] })
      const near = JSON.stringify({ model: 'onnxd-tiny', messages: [{ role: 'user', content: words(byteLimit - 64, i + 1) }] })
      await send(huge)
      await send(near)
    })
    // Every attack was refused as too long, none as an overload or a failure.
    expect([...statuses.keys()]).toEqual([422])
    expect(statuses.get(422)).toBeGreaterThanOrEqual(ATTACKERS * 2)
    bystanderUnharmed(streams, health)
  })

  it('issue #32: 8 clients sending ~800 KB of tools or of tool-call arguments are refused by the byte bound, before rendering, while a bystander streams', async () => {
    const user = [{ role: 'user', content: 'hi' }]
    const { statuses, messages, streams, health } = await underAttack(async (i, send) => {
      // 100 tools of 8 KB of description each (under the facade's body limit of 1 MiB) ...
      const tools = Array.from({ length: 100 }, (_, k) => ({ type: 'function', function: { name: `f${k}`, description: words(8000, i * 1000 + k + 1), parameters: { type: 'object', properties: {} } } }))
      // ... and 800 KB of arguments of a call sent back in the conversation.
      const call = { id: 'call_1', type: 'function', function: { name: 'f0', arguments: JSON.stringify({ q: words(800_000, i + 7) }) } }
      const withCall = [...user, { role: 'assistant', content: null, tool_calls: [call] }, { role: 'tool', tool_call_id: 'call_1', content: 'done' }]
      await send(JSON.stringify({ model: 'onnxd-tiny', messages: user, tools }))
      await send(JSON.stringify({ model: 'onnxd-tiny', messages: withCall, tools: tools.slice(0, 1) }))
    })
    expect([...statuses.keys()]).toEqual([422])
    expect(statuses.get(422)).toBeGreaterThanOrEqual(ATTACKERS * 2)
    // The node's byte check answered each, in the spec's error object: nothing was rendered or tokenized.
    expect([...messages].every((m) => m.startsWith('invalid_request_error: The prompt is N bytes of text (messages and tools);'))).toBe(true)
    bystanderUnharmed(streams, health)
  })
})
