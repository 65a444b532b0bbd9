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
import { defaultModelDir } from '../helpers/fixtures.js'
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
    engine = createEnginePool({ modelDir: defaultModelDir(), modelId: 'onnxd-tiny', workers: 1, intraOpThreads: 1 })
    node = buildNode(testOptions(), { engine })
    nodeUrl = await listen(node)
    await engine.ready()
    f = await facadeFixture({ nodeUrls: [nodeUrl], options: { keyRpm: 0, fleetRpm: 0, healthIntervalMs: 2000 }, deps: { pollHealth: true } })
    baseURL = `${await f.app.listen({ port: 0, host: '127.0.0.1' })}/v1`
    const files = readTokenizerFiles(defaultModelDir())
    byteLimit = new TextTokenizer(files.tokenizer!.json, files.tokenizer!.config, files.chatTemplate).promptByteLimit(engine.health().contextLength!)
  })
  afterAll(async () => {
    await f?.close()
    await node?.close()
    await engine?.close()
  })

  it('a bystander streams throughout and /health stays ready while 8 clients send ~1 MB prompts', async () => {
    const until = Date.now() + ATTACK_MS
    const attackStatuses = new Map<number, number>()
    // Each attacker alternates a prompt of about 1 MB (under the facade's body limit) and one just under the node's
    // byte bound, which is tokenized in full before it is found too long in tokens.
    const attacker = async (i: number): Promise<void> => {
      const huge = JSON.stringify({ model: 'onnxd-tiny', messages: [{ role: 'user', content: 'a'.repeat(1_000_000) }] })
      const near = JSON.stringify({ model: 'onnxd-tiny', messages: [{ role: 'user', content: words(byteLimit - 64, i + 1) }] })
      for (let k = 0; Date.now() < until; k++) {
        const res = await fetch(`${baseURL}/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${f.key}`, 'content-type': 'application/json' },
          body: k % 2 === 0 ? huge : near,
        })
        await res.arrayBuffer()
        attackStatuses.set(res.status, (attackStatuses.get(res.status) ?? 0) + 1)
      }
    }
    const healthStatuses: string[] = []
    const poller = async (): Promise<void> => {
      while (Date.now() < until) {
        const res = await fetch(`${nodeUrl}/health`)
        healthStatuses.push(`${res.status} ${((await res.json()) as { status: string }).status}`)
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

    // Every attack was refused as too long, none as an overload or a failure.
    expect([...attackStatuses.keys()]).toEqual([422])
    expect(attackStatuses.get(422)).toBeGreaterThanOrEqual(ATTACKERS * 2)
    expect(streams.length).toBeGreaterThanOrEqual(3)
    // Greedy: every stream is the whole of the same answer, attack or not.
    expect(streams[0].text.length).toBeGreaterThan(0)
    for (const s of streams) expect(s).toEqual({ finish: streams[0].finish, text: streams[0].text })
    expect(streams[0].finish).toMatch(/^(length|stop)$/)
    expect(healthStatuses.length).toBeGreaterThan(10)
    expect(new Set(healthStatuses)).toEqual(new Set(['200 ready']))
  })
})
