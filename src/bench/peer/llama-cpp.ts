// The benchmark's second peer: a GGUF model (the builder's, src/builder/gguf.ts) served by llama.cpp through
// node-llama-cpp (a devDependency; this module is its one importer), behind a minimal node:http server speaking the
// same subset of the node's internal contract as the transformers.js peer (server.ts): POST /internal/v1/completions
// with input_ids or prompt, max_tokens, ignore_eos, temperature, stream; GET /health. One llama.cpp context with one
// sequence per stream (`--sequences`), stepped together as llama-server does: node-llama-cpp batches the pending
// evaluations of all sequences into one llama_decode per cycle. Greedy at temperature 0; every token is sent as it
// is chosen. `--threads N` is llama.cpp's compute threads (they spin-wait between steps, so N matters on a busy host).
// `--gpu vulkan` (or cuda) loads node-llama-cpp's prebuilt build for that backend (@node-llama-cpp/linux-x64-vulkan,
// ...) with every layer on the GPU; the default, none, is the CPU build. The prebuilt binary is used or nothing: never
// a build, never a download.
//
//   node dist/bench/peer/llama-cpp.js --model FILE.gguf --port P [--threads N] [--sequences S] [--context-per-sequence T]
//     [--gpu none|vulkan|cuda]
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { basename, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'
import { getLlama, LlamaLogLevel, type Llama, type LlamaContext, type LlamaModel, type Token } from 'node-llama-cpp'
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
}

export interface LlamaPeer {
  url: string
  model: LlamaModel
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

/** Starts the peer: loads the model, warms one generation up, then listens. */
export async function startLlamaCppPeer(opts: LlamaPeerOptions): Promise<LlamaPeer> {
  const threads = opts.threads ?? 1
  const sequences = opts.sequences ?? 1
  const perSeq = opts.contextPerSequence ?? 1024
  const modelPath = resolve(opts.model)
  const modelId = basename(modelPath).replace(/\.gguf$/, '')
  const gpu = opts.gpu ?? 'none'
  const llama = await loadLlama(threads, gpu)
  if (gpu !== 'none' && llama.gpu !== gpu) throw new Error(`llama.cpp loaded backend ${String(llama.gpu)}, not ${gpu}`)
  const gpuDevices = gpu === 'none' ? [] : await llama.getGpuDeviceNames()
  if (gpu !== 'none' && gpuDevices.length === 0) {
    await llama.dispose()
    throw new Error(`llama.cpp's ${gpu} build finds no GPU device here`)
  }
  const model = await llama.loadModel({ modelPath, gpuLayers: gpu === 'none' ? 0 : 'max' })
  const vocabSize = model.fileInfo.metadata.tokenizer.ggml.tokens.length
  // node-llama-cpp's contextSize is per sequence: it allocates contextSize x sequences cells.
  const ctx: LlamaContext = await model.createContext({ contextSize: perSeq, sequences, threads: { ideal: threads, min: threads }, batchSize: Math.max(512, sequences) })
  const waitingForSlot: (() => void)[] = []
  let running = 0
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

  async function answer(b: Body, res: ServerResponse, queuedAt: number): Promise<void> {
    const r = parse(b)
    const id = typeof b.request_id === 'string' ? b.request_id : `llama-${Date.now()}`
    if (r.stream) res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    while (ctx.sequencesLeft === 0) await new Promise<void>((go) => waitingForSlot.push(go))
    if (res.destroyed) return
    const seq = ctx.getSequence()
    running++
    const started = performance.now()
    const out: number[] = []
    let firstAt = 0
    let eos = false
    try {
      for await (const t of seq.evaluate(r.ids, { temperature: r.temperature, yieldEogToken: true })) {
        if (!r.ignoreEos && model.isEogToken(t)) {
          eos = true
          break
        }
        if (!firstAt) firstAt = performance.now()
        out.push(t)
        if (r.stream) sse(res, { id, text: model.detokenize([t]), ids: [t] })
        if (out.length >= r.maxTokens || res.destroyed) break
      }
    } finally {
      running--
      await seq.dispose()
      waitingForSlot.shift()?.()
    }
    const endAt = performance.now()
    const usage = { prompt_tokens: r.ids.length, completion_tokens: out.length }
    const timings = { queue_ms: started - queuedAt, ttft_ms: (firstAt || endAt) - queuedAt, total_ms: endAt - queuedAt }
    const finish_reason = eos ? 'stop' : 'length'
    if (r.stream) {
      sse(res, { id, text: '', finish_reason, usage, timings })
      sse(res, '[DONE]')
      res.end()
    } else {
      const text = model.detokenize(out as Token[])
      sendJson(res, 200, { id, model: modelId, text, finish_reason, usage, timings, output_ids: out })
    }
  }

  const server: Server = createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/health') {
      res.writeHead(ready ? 200 : 503, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ status: ready ? 'ready' : 'loading', models: [modelId], provider: gpu === 'none' ? 'cpu' : gpu, ...(gpu === 'none' ? {} : { gpu_devices: gpuDevices }), workers: { total: 1, ready: ready ? 1 : 0 }, running, waiting: waitingForSlot.length, capacity: sequences, peer: 'llama.cpp', threads }))
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

  // Warm up (first-run allocations) before saying ready, as the node does.
  const warm = ctx.getSequence()
  let n = 0
  for await (const _ of warm.evaluate([1, 2, 3, 4] as Token[], { temperature: 0, yieldEogToken: true })) if (++n >= 4) break
  await warm.dispose()
  await new Promise<void>((ok) => server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', ok))
  ready = true
  const { port } = server.address() as AddressInfo
  return {
    url: `http://${opts.host ?? '127.0.0.1'}:${port}`,
    model,
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
  const gpu = values.gpu as LlamaBackend
  if (!values.model || !values.port || !['none', 'vulkan', 'cuda'].includes(gpu)) {
    process.stderr.write('usage: peer/llama-cpp --model FILE.gguf --port P [--threads N] [--sequences S] [--context-per-sequence T] [--gpu none|vulkan|cuda]\n')
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
    })
  } catch (e) {
    process.stderr.write(`llama.cpp peer failed to start: ${(e as Error).message}\n`)
    process.exit(3)
  }
}
