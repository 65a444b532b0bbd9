// The llama.cpp peer (src/bench/peer/llama-cpp.ts) on the tiny preset's F32 GGUF, driven by the bench's own load
// generator and by plain HTTP: every request streams its tokens; two streams stepped together in one context give
// each the tokens it gets alone; a field it cannot honour is refused with a 422 naming it. At 8 streams it advances
// all 8 sequences in one llama_decode per step (8 tokens per decode call, on /metrics), as does the second,
// independent driver of the same weights (driveDirect: node-llama-cpp's own generation loop, in process), and both
// give the same greedy tokens; their throughputs are logged side by side (no timing bound). With its prompt cache
// (llama-server's cache_prompt, on by default) a request that shares a prefix with a free sequence's tokens evaluates
// only the rest of its prompt and gets the greedy tokens a peer without the cache gives. Skipped where
// node-llama-cpp's prebuilt binary cannot load.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PRESETS, buildModel } from '../../src/builder/index.js'
import { writeGguf } from '../../src/builder/gguf.js'
import { SLOT_PROMPT_SIMILARITY, driveDirect, loadLlama, pickSequence, startLlamaCppPeer, type LlamaPeer } from '../../src/bench/peer/llama-cpp.js'
import { parseStepTotals } from '../../src/bench/engine-metrics.js'
import { createAgent } from '../../src/bench/client.js'
import { runLevel } from '../../src/bench/loadgen.js'

const available = await loadLlama(1).then(
  async (l) => (await l.dispose(), true),
  () => false,
)
const PROMPTS = [[5, 100, 200, 300], [1000, 1500, 7, 9, 11, 13]]

describe.skipIf(!available)('llama.cpp peer', () => {
  let root: string
  let file: string
  let peer: LlamaPeer
  let peer8: LlamaPeer | undefined
  let uncached: LlamaPeer | undefined
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'onnxd-llama-peer-'))
    const dir = (await buildModel({ preset: 'tiny', outDir: join(root, 'tiny') })).dir
    file = join(dir, 'model-f32.gguf')
    await writeGguf(file, { preset: PRESETS.tiny, name: 'onnxd-tiny', seed: 0, type: 'f32' })
    peer = await startLlamaCppPeer({ model: file, sequences: 2, threads: 1, contextPerSequence: 128 })
  })
  afterAll(async () => {
    await peer?.close()
    await peer8?.close()
    await uncached?.close()
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

  it('with the prompt cache, a second request sharing a long prefix evaluates only its own tokens and gets the tokens a peer without the cache gives', async () => {
    uncached = await startLlamaCppPeer({ model: file, sequences: 2, threads: 1, contextPerSequence: 128, promptCache: false })
    const h = (await (await fetch(`${uncached.url}/health`)).json()) as { prompt_cache: { enabled: boolean } }
    expect(h.prompt_cache.enabled).toBe(false)
    const prefix = Array.from({ length: 64 }, (_, j) => 40 + ((j * 97) % 1800))
    const a = [...prefix, 3, 5, 7, 9]
    const b = [...prefix, 4, 6, 8, 10, 12]
    type Answer = { output_ids: number[]; usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } } }
    const ask = async (p: LlamaPeer, input_ids: number[]): Promise<Answer> => (await (await post8(p, { input_ids, max_tokens: 10, temperature: 0, ignore_eos: true })).json()) as Answer
    const before = peer.promptTokens()
    const ra = await ask(peer, a)
    const mid = peer.promptTokens()
    const rb = await ask(peer, b)
    const after = peer.promptTokens()
    // The second request reuses the 64 shared tokens (the first has nothing to share with earlier prompts).
    expect(ra.usage.prompt_tokens_details.cached_tokens).toBe(0)
    expect(mid.evaluated - before.evaluated).toBe(a.length)
    expect(rb.usage.prompt_tokens_details.cached_tokens).toBe(prefix.length)
    expect(after.reused - mid.reused).toBe(prefix.length)
    expect(after.evaluated - mid.evaluated).toBe(b.length - prefix.length)
    // The same prompt again keeps all but its last token, which is evaluated for its logits.
    const rb2 = await ask(peer, b)
    expect(rb2.usage.prompt_tokens_details.cached_tokens).toBe(b.length - 1)
    // The same greedy tokens as with every prompt evaluated from scratch.
    const ua = await ask(uncached, a)
    const ub = await ask(uncached, b)
    expect(ub.usage.prompt_tokens_details.cached_tokens).toBe(0)
    expect(uncached.promptTokens()).toEqual({ reused: 0, evaluated: a.length + b.length })
    expect(ra.output_ids).toEqual(ua.output_ids)
    expect(rb.output_ids).toEqual(ub.output_ids)
    expect(rb2.output_ids).toEqual(ub.output_ids)
    expect(ra.output_ids).not.toEqual(rb.output_ids)
    // /metrics says the same.
    const text = await (await fetch(`${peer.url}/metrics`)).text()
    expect(text).toContain(`llama_prompt_tokens_total{source="cache"} ${peer.promptTokens().reused}`)
    expect(text).toContain(`llama_prompt_tokens_total{source="evaluated"} ${peer.promptTokens().evaluated}`)
  })

  it('with the prompt cache, concurrent requests with different prompts on a shared prefix each get their own tokens', async () => {
    const prefix = Array.from({ length: 48 }, (_, j) => 900 + ((j * 31) % 1000))
    const prompts = [[...prefix, 11, 12], [...prefix, 13, 14, 15], [21, 22, 23, 24], [...prefix.slice(0, 20), 30]]
    type Answer = { output_ids: number[] }
    const ask = async (p: LlamaPeer, input_ids: number[]): Promise<number[]> => ((await (await post8(p, { input_ids, max_tokens: 8, temperature: 0, ignore_eos: true })).json()) as Answer).output_ids
    const want: number[][] = []
    for (const ids of prompts) want.push(await ask(uncached!, ids))
    const r0 = peer.promptTokens().reused
    for (let round = 0; round < 2; round++) expect(await Promise.all(prompts.map((ids) => ask(peer, ids)))).toEqual(want)
    expect(peer.promptTokens().reused).toBeGreaterThan(r0)
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

  it('at 8 streams: one llama_decode per step carries all 8 sequences, as the second driver does, with the same tokens', async () => {
    const streams = 8
    const maxTokens = 48
    const prompts = Array.from({ length: streams }, (_, i) => Array.from({ length: 12 }, (_, j) => 16 + ((i * 131 + j * 37) % 1900)))
    peer8 = await startLlamaCppPeer({ model: file, sequences: streams, threads: 1, contextPerSequence: 128 })
    const agent = createAgent(streams)
    let run
    try {
      const items = prompts.map((input_ids) => ({ input: { input_ids }, maxTokens }))
      run = await runLevel(agent, { url: peer8.url, protocol: 'node', model: 'model-f32' }, items, { temperature: 0, ignoreEos: true }, { concurrency: streams, requestRate: Infinity, deadlineS: null, seed: 0 })
    } finally {
      await agent.close()
    }
    for (const r of run.records) {
      expect(r.ok, r.error).toBe(true)
      expect(r.outputTokens).toBe(maxTokens)
    }
    // /metrics in the node's step families: a decode call (next tokens only) carries one token per sequence, and once
    // all 8 are in, every step is one call with all 8.
    const text = await (await fetch(`${peer8.url}/metrics`)).text()
    const totals = parseStepTotals(text)
    expect(totals.decode.tokens).toBe(totals.decode.rows)
    const t = peer8.decodeTotals()
    const byRows = Object.entries(t.decode.byRows).map(([rows, n]) => [Number(rows), n])
    const [modeRows] = byRows.reduce((a, b) => (b[1] > a[1] ? b : a))
    expect(modeRows).toBe(streams)
    expect(Math.max(...byRows.map(([rows]) => rows))).toBe(streams)
    expect(t.decode.byRows[streams]).toBeGreaterThanOrEqual(maxTokens / 2)
    // Every step was one call: calls counted by the hook equal the steps taken.
    expect(t.decode.calls + t.prefill.calls).toBe(Object.values(t.decode.byRows).reduce((a, b) => a + b, 0) + Object.values(t.prefill.byRows).reduce((a, b) => a + b, 0))
    const peerTps = run.records.reduce((n, r) => n + r.outputTokens, 0) / run.durationS

    const direct = await driveDirect({ model: file, prompts, maxTokens, threads: 1 })
    expect(direct.tokensPerDecodeCall).toBe(streams)
    expect(direct.decodeCalls).toBe(maxTokens - 1)
    // Both drivers give every stream the same greedy tokens.
    const peerOut = await Promise.all(prompts.map(async (input_ids) => ((await (await post8(peer8!, { input_ids, max_tokens: maxTokens, temperature: 0, ignore_eos: true })).json()) as { output_ids: number[] }).output_ids))
    expect(peerOut).toEqual(direct.outputs)
    process.stderr.write(
      `llama.cpp tiny F32, 8 streams x ${maxTokens} tokens, 1 thread: peer ${peerTps.toFixed(0)} out tok/s over HTTP (${(t.decode.tokens / t.decode.calls).toFixed(2)} tokens per decode call, ${((t.decode.seconds / t.decode.calls) * 1000).toFixed(2)} ms per call); ` +
        `direct driver ${direct.outputTokensPerS.toFixed(0)} out tok/s (${direct.tokensPerDecodeCall} per call, ${direct.msPerDecodeCall.toFixed(2)} ms per call)\n`,
    )
  })
})

const post8 = (p: LlamaPeer, body: unknown): Promise<Response> =>
  fetch(`${p.url}/internal/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })

describe('pickSequence (llama-server slot selection)', () => {
  const slot = (cached: number[], lastUsed: number, busy = false): { cached: number[]; lastUsed: number; busy: boolean } => ({ cached, lastUsed, busy })
  const lcp = (prompt: number[]) => (s: { cached: number[] }): number => {
    let i = 0
    while (i < s.cached.length && i < prompt.length && s.cached[i] === prompt[i]) i++
    return i
  }
  const prompt = Array.from({ length: 20 }, (_, i) => i + 1)
  it('takes the free sequence with the longest common prefix, keeps it, and leaves at least one token to evaluate', () => {
    const slots = [slot(prompt.slice(0, 5), 1), slot(prompt.slice(0, 12), 2), slot([...prompt, 99], 0, true)]
    expect(pickSequence(slots, prompt, lcp(prompt), true)).toEqual({ slot: slots[1], keep: 12 })
    const same = [slot([...prompt, 7, 8], 5)]
    expect(pickSequence(same, prompt, lcp(prompt), true)).toEqual({ slot: same[0], keep: prompt.length - 1 })
  })
  it('falls back to the least recently used free sequence (keeping nothing) when no prefix is over the similarity threshold, or without the cache', () => {
    const short = Math.floor(prompt.length * SLOT_PROMPT_SIMILARITY)
    const slots = [slot(prompt.slice(0, short), 3), slot([50, 51], 1), slot([], 2)]
    expect(pickSequence(slots, prompt, lcp(prompt), true)).toEqual({ slot: slots[1], keep: 0 })
    const warm = [slot(prompt.slice(0, 12), 9), slot([], 4)]
    expect(pickSequence(warm, prompt, lcp(prompt), false)).toEqual({ slot: warm[1], keep: 0 })
  })
  it('on a tie takes the least recently used; none when every sequence is busy', () => {
    const slots = [slot(prompt.slice(0, 8), 7), slot(prompt.slice(0, 8), 2)]
    expect(pickSequence(slots, prompt, lcp(prompt), true)).toEqual({ slot: slots[1], keep: 8 })
    expect(pickSequence([slot([], 0, true)], prompt, lcp(prompt), true)).toBeNull()
  })
})
