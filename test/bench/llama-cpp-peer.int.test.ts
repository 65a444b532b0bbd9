// The llama.cpp peer (src/bench/peer/llama-cpp.ts) on the tiny preset's F32 GGUF, driven by the bench's own load
// generator and by plain HTTP: every request streams its tokens; two streams stepped together in one context give
// each the tokens it gets alone; a field it cannot honour is refused with a 422 naming it. Skipped where
// node-llama-cpp's prebuilt binary cannot load.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PRESETS, buildModel } from '../../src/builder/index.js'
import { writeGguf } from '../../src/builder/gguf.js'
import { loadLlama, startLlamaCppPeer, type LlamaPeer } from '../../src/bench/peer/llama-cpp.js'
import { createAgent } from '../../src/bench/client.js'
import { runLevel } from '../../src/bench/loadgen.js'

const available = await loadLlama(1).then(
  async (l) => (await l.dispose(), true),
  () => false,
)
const PROMPTS = [[5, 100, 200, 300], [1000, 1500, 7, 9, 11, 13]]

describe.skipIf(!available)('llama.cpp peer', () => {
  let root: string
  let peer: LlamaPeer
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'onnxd-llama-peer-'))
    const dir = (await buildModel({ preset: 'tiny', outDir: join(root, 'tiny') })).dir
    const file = join(dir, 'model-f32.gguf')
    await writeGguf(file, { preset: PRESETS.tiny, name: 'onnxd-tiny', seed: 0, type: 'f32' })
    peer = await startLlamaCppPeer({ model: file, sequences: 2, threads: 1, contextPerSequence: 128 })
  })
  afterAll(async () => {
    await peer?.close()
    await rm(root, { recursive: true, force: true })
  })

  const post = (body: unknown): Promise<Response> =>
    fetch(`${peer.url}/internal/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })

  /** The ids of a streamed greedy completion, delta by delta. */
  const streamIds = async (input_ids: number[], max_tokens: number): Promise<{ deltas: number[][]; finish: unknown }> => {
    const res = await post({ input_ids, max_tokens, temperature: 0, ignore_eos: true, stream: true })
    expect(res.headers.get('content-type')).toBe('text/event-stream')
    const events = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6))
    expect(events.at(-1)).toBe('[DONE]')
    const parsed = events.slice(0, -1).map((e) => JSON.parse(e) as { ids?: number[]; finish_reason?: string })
    return { deltas: parsed.filter((e) => e.ids).map((e) => e.ids!), finish: parsed.at(-1)?.finish_reason }
  }

  it('answers /health as ready with its capacity', async () => {
    const res = await fetch(`${peer.url}/health`)
    expect(res.status).toBe(200)
    expect(await res.json()).toMatchObject({ status: 'ready', capacity: 2, peer: 'llama.cpp', threads: 1 })
  })

  it('two concurrent streams, stepped together, each get the tokens they get alone, one token per delta', async () => {
    const alone: number[][] = []
    for (const input_ids of PROMPTS) {
      const res = await post({ input_ids, max_tokens: 12, temperature: 0, ignore_eos: true })
      const body = (await res.json()) as { output_ids: number[]; finish_reason: string; usage: { completion_tokens: number } }
      expect(body.finish_reason).toBe('length')
      expect(body.usage.completion_tokens).toBe(12)
      alone.push(body.output_ids)
    }
    const together = await Promise.all(PROMPTS.map((ids) => streamIds(ids, 12)))
    for (let i = 0; i < PROMPTS.length; i++) {
      expect(together[i].deltas.every((d) => d.length === 1)).toBe(true)
      expect(together[i].deltas.flat()).toEqual(alone[i])
      expect(together[i].finish).toBe('length')
    }
  })

  it('the bench load generator drives it: every request streams max_tokens tokens', async () => {
    const agent = createAgent(3)
    try {
      const items = Array.from({ length: 4 }, (_, i) => ({ input: { input_ids: [10 + i, 20, 30] }, maxTokens: 8 }))
      const run = await runLevel(agent, { url: peer.url, protocol: 'node', model: 'model-f32' }, items, { temperature: 0, ignoreEos: true }, { concurrency: 2, requestRate: Infinity, deadlineS: null, seed: 0 })
      expect(run.records).toHaveLength(4)
      for (const r of run.records) {
        expect(r.ok, r.error).toBe(true)
        expect(r.outputTokens).toBe(8)
        expect(r.itlMs).toHaveLength(7)
        expect(Number.isFinite(r.ttftMs)).toBe(true)
      }
    } finally {
      await agent.close()
    }
  })

  it('refuses messages with a 422 naming the field, and bad ids with a 400', async () => {
    const res = await post({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 })
    expect(res.status).toBe(422)
    expect(await res.json()).toEqual({ error: { message: expect.stringContaining('messages') as unknown, type: 'invalid_request_error', code: 422 } })
    const bad = await post({ input_ids: [PRESETS.tiny.vocabSize], max_tokens: 4 })
    expect(bad.status).toBe(400)
    expect(((await bad.json()) as { error: { message: string } }).error.message).toMatch(/input_ids.*below 2048/)
  })
})
