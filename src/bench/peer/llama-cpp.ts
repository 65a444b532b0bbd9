// The benchmark's second peer: a GGUF model (the builder's, src/builder/gguf.ts) served by llama.cpp through
// node-llama-cpp (a devDependency; this module is its one importer), behind a minimal node:http server speaking the
// same subset of the node's internal contract as the transformers.js peer (server.ts): POST /internal/v1/completions
// with input_ids or prompt, max_tokens, ignore_eos, temperature, stream; GET /health; GET /metrics. Driven as
// llama-server drives llama.cpp: one context, one sequence per stream (`--sequences`), and a slot loop that advances
// every active sequence in one llama_decode per step (each generating sequence's next token, then prompt tokens while
// the batch has room), through node-llama-cpp's controlledEvaluate. The loop counts its llama_decode calls (the
// context's batch prioritization hook runs once per call) and times each step, and /metrics says so in the node's step
// families, so the bench's "where the time goes" shows tokens per decode call and its time. A step's tokens are
// written to their streams once the next step's call is on its way, not before it. Greedy at temperature 0.
// Each sequence keeps its tokens in the KV cache after its request ends, as llama-server's slots do with
// `cache_prompt` (its default): a new request takes the free sequence whose tokens share the longest prefix with its
// prompt (when that prefix is over 10 % of the prompt, llama-server's default `--slot-prompt-similarity` 0.1; else
// the least recently used sequence), keeps that prefix, erases the rest (llama_memory_seq_rm from the first differing
// position) and evaluates only the remaining prompt tokens, at least the last one (for its logits). The answer's
// usage.prompt_tokens_details.cached_tokens, /metrics (llama_prompt_tokens_total by source) and /health say how many
// prompt tokens were reused and how many evaluated. `--no-prompt-cache` clears a sequence before every request.
// llama-server's host-memory prompt cache (`--cache-ram`, states of evicted slots kept in RAM) is not modelled.
// `--threads N` is llama.cpp's compute threads (they spin-wait between steps, so N matters on a busy host). The CPU
// build is node-llama-cpp's prebuilt one, which carries ggml's CPU variants (haswell, skylakex, zen4, ...) and loads
// the best this CPU runs; /health's system_info says which features it uses. `--gpu vulkan` (or cuda) loads the
// prebuilt build for that backend (@node-llama-cpp/linux-x64-vulkan, ...) with every layer on the GPU. The prebuilt
// binary is used or nothing: never a build, never a download.
//
//   node dist/bench/peer/llama-cpp.js --model FILE.gguf --port P [--threads N] [--sequences S] [--context-per-sequence T]
//     [--gpu none|vulkan|cuda] [--no-prompt-cache]
//   node dist/bench/peer/llama-cpp.js --direct --model FILE.gguf [--threads N] [--streams S] [--prompt-len L] [--max-tokens M]
//     (the second driver, driveDirect, alone: one JSON line)
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { basename, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'
import { getLlama, LlamaLogLevel, type BatchItem, type Llama, type LlamaContext, type LlamaContextSequence, type LlamaModel, type Token } from 'node-llama-cpp'
import { bodyText, sendJson, sendJsonError } from './http.js'

/** llama.cpp's backends the peer loads: the CPU build, or a GPU build with every layer offloaded. */
export type LlamaBackend = 'none' | 'vulkan' | 'cuda'

/** llama.cpp from node-llama-cpp's prebuilt binary for this platform (and `gpu` backend); throws when there is none
 * that loads. */
export async function loadLlama(threads: number, gpu: LlamaBackend = 'none'): Promise<Llama> {
  return getLlama({ build: 'never', usePrebuiltBinaries: true, skipDownload: true, gpu: gpu === 'none' ? false : gpu, maxThreads: threads, logLevel: LlamaLogLevel.error, progressLogs: false })
}

export interface LlamaPeerOptions {
  model: string
  port?: number
  host?: string
  threads?: number
  /** Concurrent streams: sequences of the one context. Default 1. */
  sequences?: number
  /** KV slots per sequence (prompt + generated tokens). Default 1024. */
  contextPerSequence?: number
  /** Default none: the CPU build. */
  gpu?: LlamaBackend
  /** Keep each sequence's tokens between requests and reuse the longest common prefix (llama-server's
   * `cache_prompt`). Default true. */
  promptCache?: boolean
}

/** Prompt tokens the peer took from a sequence's cache and those it evaluated, over every request so far. */
export interface PromptTokenTotals {
  reused: number
  evaluated: number
}

export interface LlamaPeer {
  url: string
  model: LlamaModel
  /** The decode calls so far (also on GET /metrics). */
  decodeTotals(): Record<'prefill' | 'decode', DecodeTotals>
  /** Prompt tokens reused from the sequences' caches and evaluated (also on GET /metrics and /health). */
  promptTokens(): PromptTokenTotals
  close(): Promise<void>
}

interface Body {
  input_ids?: unknown
  prompt?: unknown
  messages?: unknown
  max_tokens?: unknown
  temperature?: unknown
  ignore_eos?: unknown
  stream?: unknown
  request_id?: unknown
}

class BadRequest extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message)
  }
}

const sendError = (res: ServerResponse, status: number, message: string): void => {
  if (res.headersSent) return void res.end()
  sendJsonError(res, status, message)
}

function sse(res: ServerResponse, data: unknown): void {
  if (!res.destroyed) res.write(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`)
}

async function readBody(req: IncomingMessage): Promise<Body> {
  const text = await bodyText(req)
  try {
    const b = JSON.parse(text) as unknown
    if (typeof b !== 'object' || b === null || Array.isArray(b)) throw new Error('not an object')
    return b as Body
  } catch (e) {
    throw new BadRequest(400, `invalid JSON body: ${(e as Error).message}`)
  }
}

/** What the peer's decode calls did: one llama_decode per step, as llama-server's slot loop. A call whose rows are all
 * one next token each is a decode call; one that carries prompt tokens (alone or beside next tokens) is a prefill call. */
export interface DecodeTotals {
  calls: number
  /** Sequences (rows) in the calls. */
  rows: number
  tokens: number
  /** Wall seconds from the call's dispatch to the last of its sequences' sampled tokens (decode and sampling). */
  seconds: number
  /** CPU seconds of this process over the same steps (llama.cpp's threads and the peer's own work beside them). */
  cpuSeconds: number
  /** Calls by rows, to tell a steady batch from a mean. */
  byRows: Record<number, number>
}

const emptyTotals = (): DecodeTotals => ({ calls: 0, rows: 0, tokens: 0, seconds: 0, cpuSeconds: 0, byRows: {} })

/** The totals in the node's /metrics step families (engine-metrics.ts reads them: step seconds and count, rows, tokens,
 * per phase), so the bench's "where the time goes" shows llama.cpp's decode calls beside onnxd's steps, plus calls by
 * rows. */
export function decodeMetricsText(t: Record<'prefill' | 'decode', DecodeTotals>, prompt: PromptTokenTotals = { reused: 0, evaluated: 0 }): string {
  const lines: string[] = []
  const fam = (name: string, help: string, get: (d: DecodeTotals) => number): void => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`)
    for (const phase of ['prefill', 'decode'] as const) lines.push(`${name}{phase="${phase}"} ${get(t[phase])}`)
  }
  fam('onnxd_batch_step_seconds_sum', 'llama.cpp: seconds in llama_decode calls and their sampling.', (d) => d.seconds)
  fam('onnxd_batch_step_seconds_count', 'llama.cpp: llama_decode calls.', (d) => d.calls)
  fam('onnxd_batch_size_sum', 'llama.cpp: sequences over the calls.', (d) => d.rows)
  fam('onnxd_iteration_tokens_sum', 'llama.cpp: tokens over the calls.', (d) => d.tokens)
  fam('llama_decode_cpu_seconds_total', 'llama.cpp: CPU seconds of the peer process over its steps.', (d) => d.cpuSeconds)
  lines.push('# HELP llama_decode_calls_by_rows_total llama.cpp decode calls by the sequences they carried.', '# TYPE llama_decode_calls_by_rows_total counter')
  for (const phase of ['prefill', 'decode'] as const)
    for (const [rows, n] of Object.entries(t[phase].byRows)) lines.push(`llama_decode_calls_by_rows_total{phase="${phase}",rows="${rows}"} ${n}`)
  lines.push(
    '# HELP llama_prompt_tokens_total llama.cpp: prompt tokens by source: reused from the sequence\'s cache (cache) or evaluated (evaluated).',
    '# TYPE llama_prompt_tokens_total counter',
    `llama_prompt_tokens_total{source="cache"} ${prompt.reused}`,
    `llama_prompt_tokens_total{source="evaluated"} ${prompt.evaluated}`,
  )
  // CPU seconds of this process (llama.cpp's threads included): on a shared host, a figure that load barely moves.
  const cpu = process.cpuUsage()
  lines.push('# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.', '# TYPE process_cpu_seconds_total counter', `process_cpu_seconds_total ${(cpu.user + cpu.system) / 1e6}`)
  return lines.join('\n') + '\n'
}

/** llama-server's default `--slot-prompt-similarity`: a free sequence is picked for its cached prefix only when that
 * prefix is more than this fraction of the new prompt. */
export const SLOT_PROMPT_SIMILARITY = 0.1

/** One sequence of the context (llama-server's slot): it keeps its tokens between requests. */
interface SeqSlot {
  seq: LlamaContextSequence
  busy: boolean
  /** When its last request ended (performance.now()), for least-recently-used selection. */
  lastUsed: number
  /** A failed step left its cache unknown: the next request clears it. */
  stale: boolean
}

/**
 * The free sequence a prompt goes to, as llama-server's get_available_slot picks it: with the prompt cache, the one
 * whose cached tokens share the longest prefix with the prompt, when that prefix is over SLOT_PROMPT_SIMILARITY of
 * the prompt (the least recently used on a tie); else (or without the cache) the least recently used. Returns the
 * sequence and the prefix it keeps: at most the prompt's length - 1, so at least one token is evaluated for logits.
 */
export function pickSequence<S extends { busy: boolean; lastUsed: number }>(slots: readonly S[], prompt: readonly number[], commonPrefix: (s: S) => number, promptCache: boolean): { slot: S; keep: number } | null {
  let best: S | null = null
  let bestLen = 0
  if (promptCache) {
    for (const s of slots) {
      if (s.busy) continue
      const n = commonPrefix(s)
      if (n / prompt.length <= SLOT_PROMPT_SIMILARITY) continue
      if (n > bestLen || (n === bestLen && best && s.lastUsed < best.lastUsed)) [best, bestLen] = [s, n]
    }
  }
  if (!best) {
    for (const s of slots) if (!s.busy && (!best || s.lastUsed < best.lastUsed)) best = s
    bestLen = 0
  }
  return best ? { slot: best, keep: Math.min(bestLen, prompt.length - 1) } : null
}

/** One request in a slot: its sequence, the prompt tokens still to feed, and what it has produced. */
interface Slot {
  seq: LlamaContextSequence
  slot: SeqSlot | null
  id: string
  prompt: Token[]
  promptTokens: number
  /** Prompt tokens taken from the sequence's cache. */
  cached: number
  left: Token[]
  next: Token | null
  out: number[]
  maxTokens: number
  temperature: number
  ignoreEos: boolean
  stream: boolean
  res: ServerResponse
  queuedAt: number
  started: number
  firstAt: number
  eos: boolean
  done: () => void
}

/** Starts the peer: loads the model, warms one generation up, then listens. */
export async function startLlamaCppPeer(opts: LlamaPeerOptions): Promise<LlamaPeer> {
  const threads = opts.threads ?? 1
  const sequences = opts.sequences ?? 1
  const perSeq = opts.contextPerSequence ?? 1024
  const modelPath = resolve(opts.model)
  const modelId = basename(modelPath).replace(/\.gguf$/, '')
  const gpu = opts.gpu ?? 'none'
  const promptCache = opts.promptCache ?? true
  const llama = await loadLlama(threads, gpu)
  if (gpu !== 'none' && llama.gpu !== gpu) throw new Error(`llama.cpp loaded backend ${String(llama.gpu)}, not ${gpu}`)
  const gpuDevices = gpu === 'none' ? [] : await llama.getGpuDeviceNames()
  if (gpu !== 'none' && gpuDevices.length === 0) {
    await llama.dispose()
    throw new Error(`llama.cpp's ${gpu} build finds no GPU device here`)
  }
  const model = await llama.loadModel({ modelPath, gpuLayers: gpu === 'none' ? 0 : 'max' })
  const vocabSize = model.fileInfo.metadata.tokenizer.ggml.tokens.length
  // One step is one llama_decode: every generating sequence's next token, then prompt tokens up to the batch (as
  // llama-server's n_batch). The prioritization hook is called once per llama_decode: it counts the calls and, once
  // the call is on its way, lets the previous step's tokens go out (so HTTP writes run beside the decode, not before it).
  const batchSize = Math.max(512, sequences)
  let callsSeen = 0
  let flush: (() => void) | null = null
  const ctx: LlamaContext = await model.createContext({
    contextSize: perSeq, // node-llama-cpp's contextSize is per sequence: it allocates contextSize x sequences cells
    sequences,
    threads: { ideal: threads, min: threads },
    batchSize,
    batching: {
      itemPrioritizationStrategy: ({ items, size }) => {
        callsSeen++
        if (flush) setImmediate(flush)
        flush = null
        const out: { item: BatchItem; processAmount: number }[] = []
        let room = size
        for (const item of items) {
          const n = Math.min(item.tokens.length, room)
          if (n <= 0) break
          room -= n
          out.push({ item, processAmount: n })
        }
        return out
      },
    },
  })
  const totals = { prefill: emptyTotals(), decode: emptyTotals() }
  const promptTotals: PromptTokenTotals = { reused: 0, evaluated: 0 }
  // The sequences, made once the warm-up has given its own back (below), and kept with their tokens.
  const seqs: SeqSlot[] = []
  const waiting: Slot[] = []
  const active: Slot[] = []
  let looping = false
  let ready = false

  function parse(b: Body): { ids: Token[]; maxTokens: number; temperature: number; ignoreEos: boolean; stream: boolean } {
    if (b.messages !== undefined) throw new BadRequest(422, 'messages: not supported by the llama.cpp peer (send input_ids or prompt)')
    let ids: Token[]
    if (b.input_ids !== undefined) {
      if (!Array.isArray(b.input_ids) || b.input_ids.length === 0 || !b.input_ids.every((t) => Number.isInteger(t) && (t as number) >= 0 && (t as number) < vocabSize))
        throw new BadRequest(400, `input_ids: must be a non-empty array of token ids below ${vocabSize}`)
      ids = b.input_ids as Token[]
    } else if (typeof b.prompt === 'string' && b.prompt.length > 0) {
      ids = model.tokenize(b.prompt, true)
    } else throw new BadRequest(400, 'one of input_ids or prompt (a non-empty string) is required')
    const maxTokens = b.max_tokens ?? 16
    if (!Number.isInteger(maxTokens) || (maxTokens as number) < 1) throw new BadRequest(400, 'max_tokens: must be a positive integer')
    if (ids.length + (maxTokens as number) > perSeq) throw new BadRequest(400, `input_ids + max_tokens: at most ${perSeq} tokens per sequence (--context-per-sequence)`)
    const temperature = b.temperature ?? 0
    if (typeof temperature !== 'number' || temperature < 0) throw new BadRequest(400, 'temperature: must be a number >= 0')
    return { ids, maxTokens: maxTokens as number, temperature, ignoreEos: b.ignore_eos === true, stream: b.stream === true }
  }

  /** Ends a slot's response and gives its sequence back. */
  function finish(s: Slot): void {
    const endAt = performance.now()
    const usage = { prompt_tokens: s.promptTokens, completion_tokens: s.out.length, prompt_tokens_details: { cached_tokens: s.cached } }
    const timings = { queue_ms: s.started - s.queuedAt, ttft_ms: (s.firstAt || endAt) - s.queuedAt, total_ms: endAt - s.queuedAt }
    const finish_reason = s.eos ? 'stop' : 'length'
    if (s.stream) {
      sse(s.res, { id: s.id, text: '', finish_reason, usage, timings })
      sse(s.res, '[DONE]')
      s.res.end()
    } else if (!s.res.destroyed) sendJson(s.res, 200, { id: s.id, model: modelId, text: model.detokenize(s.out as Token[]), finish_reason, usage, timings, output_ids: s.out })
    s.done()
  }

  /** The slot loop: one llama_decode per step over every active sequence, until none is left. */
  async function loop(): Promise<void> {
    looping = true
    let sends: (() => void)[] = []
    try {
      while (active.length > 0 || waiting.length > 0) {
        while (waiting.length > 0 && active.length < sequences) {
          const s = waiting.shift()!
          if (s.res.destroyed) {
            s.done()
            continue
          }
          // The slot: its cached prefix kept, the rest of its tokens erased, only the rest of the prompt to evaluate.
          const { slot, keep } = pickSequence(seqs, s.prompt, (q) => (q.stale ? 0 : q.seq.compareContextTokens(s.prompt).firstDifferentIndex), promptCache)!
          slot.busy = true
          slot.stale = false
          if (slot.seq.nextTokenIndex > keep) await slot.seq.eraseContextTokenRanges([{ start: keep, end: slot.seq.nextTokenIndex }])
          s.slot = slot
          s.seq = slot.seq
          s.cached = keep
          s.left = s.prompt.slice(keep)
          promptTotals.reused += keep
          promptTotals.evaluated += s.left.length
          s.started = performance.now()
          active.push(s)
        }
        if (active.length === 0) break
        // This step's rows: next tokens first, then prompt tokens while the batch has room.
        let room = batchSize
        const rows: { s: Slot; tokens: Token[]; sample: boolean }[] = []
        for (const s of active) {
          if (s.next === null) continue
          rows.push({ s, tokens: [s.next], sample: true })
          room--
        }
        let prompt = 0
        for (const s of active) {
          if (s.next !== null || room <= 0) continue
          const tokens = s.left.splice(0, room)
          room -= tokens.length
          prompt += tokens.length
          rows.push({ s, tokens, sample: s.left.length === 0 })
        }
        const pendingSends = sends
        sends = []
        flush = () => pendingSends.forEach((send) => send())
        const calls0 = callsSeen
        const cpu0 = process.cpuUsage()
        const t0 = performance.now()
        const results = await Promise.all(
          rows.map(({ s, tokens, sample }) =>
            s.seq.controlledEvaluate(tokens.map((t, i) => (sample && i === tokens.length - 1 ? [t, { generateNext: { token: true, options: { temperature: s.temperature } } }] : t))),
          ),
        )
        const seconds = (performance.now() - t0) / 1000
        const cpu = process.cpuUsage(cpu0)
        if (flush) (flush as () => void)()
        flush = null
        const t = totals[prompt > 0 ? 'prefill' : 'decode']
        const calls = callsSeen - calls0
        t.calls += calls
        t.rows += rows.length
        t.tokens += rows.reduce((n, r) => n + r.tokens.length, 0)
        t.seconds += seconds
        t.cpuSeconds += (cpu.user + cpu.system) / 1e6
        if (calls === 1) t.byRows[rows.length] = (t.byRows[rows.length] ?? 0) + 1
        const ended: Slot[] = []
        rows.forEach(({ s, sample }, i) => {
          if (!sample) return
          const tok = results[i].at(-1)?.next.token ?? null
          s.next = tok
          if (tok === null || (!s.ignoreEos && model.isEogToken(tok))) s.eos = true
          else {
            if (!s.firstAt) s.firstAt = performance.now()
            s.out.push(tok)
            if (s.stream) sends.push(() => sse(s.res, { id: s.id, text: model.detokenize([tok]), ids: [tok] }))
          }
          if (s.eos || s.out.length >= s.maxTokens || s.res.destroyed) ended.push(s)
        })
        for (const s of ended) {
          active.splice(active.indexOf(s), 1)
          release(s)
          sends.push(() => finish(s))
        }
      }
    } finally {
      sends.forEach((send) => send())
      looping = false
    }
  }

  function answer(b: Body, res: ServerResponse, queuedAt: number): Promise<void> {
    const r = parse(b)
    const id = typeof b.request_id === 'string' ? b.request_id : `llama-${Date.now()}`
    if (r.stream) res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    return new Promise<void>((done) => {
      waiting.push({ seq: null as unknown as LlamaContextSequence, slot: null, id, prompt: r.ids, promptTokens: r.ids.length, cached: 0, left: [], next: null, out: [], maxTokens: r.maxTokens, temperature: r.temperature, ignoreEos: r.ignoreEos, stream: r.stream, res, queuedAt, started: 0, firstAt: 0, eos: false, done })
      if (!looping) void loop().catch((e: unknown) => fail(e))
    })
  }

  /** Gives a request's sequence back, its tokens kept for the next request's prefix. */
  function release(s: Slot): void {
    if (!s.slot) return
    s.slot.busy = false
    s.slot.lastUsed = performance.now()
    s.slot = null
  }

  /** A failed step fails every request in flight (llama.cpp's state is unknown after it: every sequence is cleared). */
  function fail(e: unknown): void {
    for (const q of seqs) q.stale = true
    for (const s of [...active.splice(0), ...waiting.splice(0)]) {
      release(s)
      if (s.res.headersSent) {
        sse(s.res, { error: { message: (e as Error).message, type: 'server_error', code: 500 } })
        s.res.end()
      } else sendError(s.res, 500, (e as Error).message)
      s.done()
    }
  }

  const server: Server = createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/health') {
      res.writeHead(ready ? 200 : 503, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ status: ready ? 'ready' : 'loading', models: [modelId], provider: gpu === 'none' ? 'cpu' : gpu, ...(gpu === 'none' ? {} : { gpu_devices: gpuDevices }), workers: { total: 1, ready: ready ? 1 : 0 }, running: active.length, waiting: waiting.length, capacity: sequences, peer: 'llama.cpp', threads, prompt_cache: { enabled: promptCache, reused_tokens: promptTotals.reused, evaluated_tokens: promptTotals.evaluated }, system_info: llama.systemInfo.trim() }))
      return
    }
    if (req.method === 'GET' && req.url === '/metrics') {
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' })
      res.end(decodeMetricsText(totals, promptTotals))
      return
    }
    if (req.method !== 'POST' || req.url !== '/internal/v1/completions') return sendError(res, 404, 'not found')
    const queuedAt = performance.now()
    readBody(req)
      .then((b) => answer(b, res, queuedAt))
      .catch((e: unknown) => {
        const status = e instanceof BadRequest ? e.status : 500
        if (res.headersSent) {
          sse(res, { error: { message: (e as Error).message, type: 'server_error', code: status } })
          res.end()
        } else sendError(res, status, (e as Error).message)
      })
  })

  // Warm up (first-run allocations) before saying ready, as the node does; the counters start after it.
  const warm = ctx.getSequence()
  let n = 0
  for await (const _ of warm.evaluate([1, 2, 3, 4] as Token[], { temperature: 0, yieldEogToken: true })) if (++n >= 4) break
  await warm.dispose()
  for (let i = 0; i < sequences; i++) seqs.push({ seq: ctx.getSequence(), busy: false, lastUsed: 0, stale: false })
  await new Promise<void>((ok) => server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', ok))
  ready = true
  const { port } = server.address() as AddressInfo
  return {
    url: `http://${opts.host ?? '127.0.0.1'}:${port}`,
    model,
    decodeTotals: () => structuredClone(totals),
    promptTokens: () => ({ ...promptTotals }),
    async close() {
      ready = false
      server.closeAllConnections()
      await new Promise<void>((ok) => server.close(() => ok()))
      await ctx.dispose()
      await model.dispose()
      await llama.dispose()
    },
  }
}

export interface DirectRun {
  streams: number
  outputTokens: number
  seconds: number
  outputTokensPerS: number
  /** llama_decode calls after every prompt was in (next tokens only), their tokens and their mean wall time. */
  decodeCalls: number
  decodeTokens: number
  tokensPerDecodeCall: number
  msPerDecodeCall: number
  /** CPU seconds of this process over the run (prompts and decode). */
  cpuSeconds: number
  /** CPU milliseconds of this process per decode call (llama.cpp's threads included). */
  cpuMsPerDecodeCall: number
  /** Each stream's greedy tokens. */
  outputs: number[][]
}

/**
 * The second, independent way of driving the same weights, to check the peer against: in process, no HTTP, no slot
 * loop. One context, one sequence per prompt, each through node-llama-cpp's own generation loop (`evaluate`, its
 * sampler), the generators advanced in lockstep (every stream asks for its next token in the same tick, so
 * node-llama-cpp's batching puts them in one llama_decode). Counts llama_decode calls the same way (the prioritization
 * hook runs once per call). All streams start together and produce `maxTokens` each, EOS ignored, greedy.
 */
export async function driveDirect(o: { model: string; prompts: number[][]; maxTokens: number; threads?: number; contextPerSequence?: number }): Promise<DirectRun> {
  const threads = o.threads ?? 1
  const streams = o.prompts.length
  const llama = await loadLlama(threads)
  try {
    const model = await llama.loadModel({ modelPath: resolve(o.model), gpuLayers: 0 })
    let calls = 0
    let tokens = 0
    const ctx = await model.createContext({
      contextSize: o.contextPerSequence ?? Math.max(...o.prompts.map((p) => p.length)) + o.maxTokens + 16,
      sequences: streams,
      threads: { ideal: threads, min: threads },
      batchSize: Math.max(512, streams),
      batching: {
        itemPrioritizationStrategy: ({ items, size }) => {
          calls++
          const out: { item: BatchItem; processAmount: number }[] = []
          for (const item of items) {
            const n = Math.min(item.tokens.length, size)
            if (n <= 0) break
            size -= n
            tokens += n
            out.push({ item, processAmount: n })
          }
          return out
        },
      },
    })
    // One untimed token each, so first-run allocations are out of the timing.
    const warm = ctx.getSequence()
    for await (const _ of warm.evaluate([1, 2, 3, 4] as Token[], { temperature: 0, yieldEogToken: true })) break
    await warm.dispose()
    const seqs = o.prompts.map(() => ctx.getSequence())
    const gens = seqs.map((seq, i) => seq.evaluate(o.prompts[i] as Token[], { temperature: 0, yieldEogToken: true }))
    const outputs: number[][] = o.prompts.map(() => [])
    const t0 = performance.now()
    const cpuStart = process.cpuUsage()
    let first = await Promise.all(gens.map((g) => g.next()))
    const tDecode = performance.now()
    const cpu0 = process.cpuUsage()
    const [calls0, tokens0] = [calls, tokens]
    for (let k = 1; ; k++) {
      first.forEach((r, i) => r.done || outputs[i].push(r.value))
      if (k >= o.maxTokens) break
      first = await Promise.all(gens.map((g) => g.next()))
    }
    const t1 = performance.now()
    const cpu = process.cpuUsage(cpu0)
    const cpuAll = process.cpuUsage(cpuStart)
    await Promise.all(gens.map((g) => g.return()))
    const decodeCalls = calls - calls0
    const decodeTokens = tokens - tokens0
    const outputTokens = outputs.reduce((n, x) => n + x.length, 0)
    await ctx.dispose()
    await model.dispose()
    return {
      streams,
      outputTokens,
      seconds: (t1 - t0) / 1000,
      outputTokensPerS: outputTokens / ((t1 - t0) / 1000),
      decodeCalls,
      decodeTokens,
      tokensPerDecodeCall: decodeCalls ? decodeTokens / decodeCalls : 0,
      msPerDecodeCall: decodeCalls ? (t1 - tDecode) / decodeCalls : 0,
      cpuSeconds: (cpuAll.user + cpuAll.system) / 1e6,
      cpuMsPerDecodeCall: decodeCalls ? (cpu.user + cpu.system) / 1000 / decodeCalls : 0,
      outputs,
    }
  } finally {
    await llama.dispose()
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const { values } = parseArgs({
    options: {
      model: { type: 'string' },
      port: { type: 'string' },
      host: { type: 'string', default: '127.0.0.1' },
      threads: { type: 'string', default: '1' },
      sequences: { type: 'string', default: '1' },
      'context-per-sequence': { type: 'string', default: '1024' },
      gpu: { type: 'string', default: 'none' },
      'no-prompt-cache': { type: 'boolean', default: false },
      direct: { type: 'boolean', default: false },
      streams: { type: 'string', default: '1' },
      'prompt-len': { type: 'string', default: '128' },
      'max-tokens': { type: 'string', default: '128' },
    },
  })
  const int = (name: string, v: string | undefined): number => {
    const n = Number(v)
    if (!Number.isInteger(n) || n < 1) {
      process.stderr.write(`--${name} must be a positive integer\n`)
      process.exit(2)
    }
    return n
  }
  if (values.direct && values.model) {
    // The second driver alone: one JSON line of its figures (prompt ids spread over the first 2048 ids).
    const [streams, len, maxTokens] = [int('streams', values.streams), int('prompt-len', values['prompt-len']), int('max-tokens', values['max-tokens'])]
    const prompts = Array.from({ length: streams }, (_, i) => Array.from({ length: len }, (_, j) => 16 + ((i * 7919 + j * 104729) % 2000)))
    const r = await driveDirect({ model: values.model, prompts, maxTokens, threads: int('threads', values.threads) })
    process.stdout.write(JSON.stringify({ ...r, outputs: undefined }) + '\n')
    process.exit(0)
  }
  const gpu = values.gpu as LlamaBackend
  if (!values.model || !values.port || !['none', 'vulkan', 'cuda'].includes(gpu)) {
    process.stderr.write('usage: peer/llama-cpp --model FILE.gguf --port P [--threads N] [--sequences S] [--context-per-sequence T] [--gpu none|vulkan|cuda] [--no-prompt-cache]\n')
    process.exit(2)
  }
  try {
    await startLlamaCppPeer({
      model: values.model,
      port: Number(values.port),
      host: values.host,
      threads: int('threads', values.threads),
      sequences: int('sequences', values.sequences),
      contextPerSequence: int('context-per-sequence', values['context-per-sequence']),
      gpu,
      promptCache: !values['no-prompt-cache'],
    })
  } catch (e) {
    process.stderr.write(`llama.cpp peer failed to start: ${(e as Error).message}\n`)
    process.exit(3)
  }
}
