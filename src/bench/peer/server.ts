// The benchmark's peer: the same model bundle served by transformers.js (@huggingface/transformers
// `pipeline('text-generation', dir)`) behind a minimal node:http server, one request at a time, the way people
// run it. It speaks the subset of the node's internal contract the load generator uses (POST
// /internal/v1/completions with input_ids, prompt or messages, max_tokens, ignore_eos, temperature, stream;
// GET /health), so the same load drives it. Deltas are sent from TextStreamer's per-token callback, which
// generate() calls right after each token is chosen, so the client's TTFT and ITL are as real as the node's.
//
//   node dist/bench/peer/server.js --model DIR --port P
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { basename, dirname, resolve } from 'node:path'
import { parseArgs } from 'node:util'
import { bodyText, sendJson, sendJsonError } from './http.js'

/** The slice of transformers.js this server uses (typed here so the build never needs the optional package). */
interface Tf {
  env: { allowRemoteModels: boolean; allowLocalModels: boolean; localModelPath: string }
  pipeline(task: 'text-generation', model: string, opts: { dtype: string; device: string }): Promise<Generator>
  TextStreamer: new (tok: unknown, opts: { skip_prompt: boolean; skip_special_tokens: boolean; callback_function: (t: string) => void; token_callback_function: (ids: bigint[]) => void }) => unknown
  InterruptableStoppingCriteria: new () => { interrupt(): void }
  Tensor: new (type: 'int64', data: BigInt64Array, dims: number[]) => unknown
}
interface Generator {
  (input: string | { role: string; content: string }[], opts: Record<string, unknown>): Promise<unknown>
  tokenizer: { decode(ids: bigint[] | number[], o?: { skip_special_tokens?: boolean }): string; encode(text: string): number[] }
  model: { generate(opts: Record<string, unknown>): Promise<unknown> }
}

interface Body {
  model?: string
  input_ids?: number[]
  prompt?: string
  messages?: { role: string; content: string }[]
  max_tokens?: number
  temperature?: number
  ignore_eos?: boolean
  stream?: boolean
  request_id?: string
}

const { values } = parseArgs({ options: { model: { type: 'string' }, port: { type: 'string' }, host: { type: 'string', default: '127.0.0.1' } } })
if (!values.model || !values.port) {
  process.stderr.write('usage: peer/server --model DIR --port P\n')
  process.exit(2)
}
const dir = resolve(values.model)
const modelId = basename(dir)

let tf: Tf
try {
  tf = (await import('@huggingface/transformers' as string)) as Tf
} catch (e) {
  process.stderr.write(`transformers.js is not installed (npm install @huggingface/transformers): ${(e as Error).message}\n`)
  process.exit(3)
}
tf.env.allowRemoteModels = false
tf.env.allowLocalModels = true
tf.env.localModelPath = dirname(dir) + '/'
let ready = false
const generator = await tf.pipeline('text-generation', modelId, { dtype: 'fp32', device: 'cpu' })

let queue: Promise<void> = Promise.resolve()
let running = 0
let waiting = 0

function sse(res: ServerResponse, data: unknown): void {
  if (!res.destroyed) res.write(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`)
}

interface Generation {
  ids: number[]
  promptTokens: number
  /** performance.now() of the first token (0 if none) and of the end. */
  firstAt: number
  endAt: number
}

/** Runs one generation, calling `onToken` for each new token as generate() produces it. */
async function runGeneration(b: Body, onToken: (ids: number[]) => void, stop: { interrupt(): void }): Promise<Generation> {
  const maxNew = b.max_tokens ?? 16
  const ids: number[] = []
  let firstAt = 0
  const streamer = new tf.TextStreamer(generator.tokenizer, {
    skip_prompt: true,
    skip_special_tokens: true,
    callback_function: () => {},
    token_callback_function: (tokens: bigint[]) => {
      if (!firstAt) firstAt = performance.now()
      const delta = tokens.map(Number)
      ids.push(...delta)
      onToken(delta)
    },
  })
  const opts: Record<string, unknown> = {
    max_new_tokens: maxNew,
    ...(b.ignore_eos ? { min_new_tokens: maxNew } : {}),
    ...(b.temperature ? { do_sample: true, temperature: b.temperature } : { do_sample: false }),
    streamer,
    stopping_criteria: stop,
  }
  let promptTokens: number
  if (b.input_ids) {
    promptTokens = b.input_ids.length
    const data = BigInt64Array.from(b.input_ids, (x) => BigInt(x))
    const mask = new BigInt64Array(data.length).fill(1n)
    await generator.model.generate({ ...opts, inputs: new tf.Tensor('int64', data, [1, data.length]), attention_mask: new tf.Tensor('int64', mask, [1, data.length]) })
  } else {
    const input = b.messages ?? b.prompt ?? ''
    promptTokens = typeof input === 'string' ? generator.tokenizer.encode(input).length : 0
    await generator(input, { ...opts, return_full_text: false })
  }
  return { ids, promptTokens, firstAt, endAt: performance.now() }
}

/** Answers one request (SSE or JSON). Runs only when the previous one has finished. */
async function answer(b: Body, res: ServerResponse, queuedAt: number): Promise<void> {
  const id = b.request_id ?? `peer-${Date.now()}`
  const started = performance.now()
  const stop = new tf.InterruptableStoppingCriteria()
  res.once('close', () => {
    if (!res.writableFinished) stop.interrupt()
  })
  const g = await runGeneration(b, (delta) => {
    if (b.stream) sse(res, { id, text: generator.tokenizer.decode(delta, { skip_special_tokens: true }), ids: delta })
  }, stop)
  const usage = { prompt_tokens: g.promptTokens, completion_tokens: g.ids.length }
  const timings = { queue_ms: started - queuedAt, ttft_ms: (g.firstAt || g.endAt) - queuedAt, total_ms: g.endAt - queuedAt }
  const finish_reason = g.ids.length >= (b.max_tokens ?? 16) ? 'length' : 'stop'
  if (b.stream) {
    sse(res, { id, text: '', finish_reason, usage, timings })
    sse(res, '[DONE]')
    res.end()
  } else {
    const text = generator.tokenizer.decode(g.ids, { skip_special_tokens: true })
    sendJson(res, 200, { id, model: modelId, text, finish_reason, usage, timings, output_ids: g.ids })
  }
}

const readBody = async (req: IncomingMessage): Promise<Body> => JSON.parse(await bodyText(req)) as Body

const server = createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/health') {
    res.writeHead(ready ? 200 : 503, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ status: ready ? 'ready' : 'loading', models: [modelId], provider: 'cpu', workers: { total: 1, ready: ready ? 1 : 0 }, running, waiting, capacity: 1, peer: 'transformers.js' }))
    return
  }
  if (req.method !== 'POST' || req.url !== '/internal/v1/completions') return sendJsonError(res, 404, 'not found')
  readBody(req).then(
    (b) => {
      const queuedAt = performance.now()
      if (b.stream) res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
      waiting++
      queue = queue.then(async () => {
        waiting--
        if (res.destroyed) return // the client left while queued
        running++
        try {
          await answer(b, res, queuedAt)
        } catch (e) {
          if (b.stream) {
            sse(res, { error: { message: (e as Error).message, type: 'server_error', code: 500 } })
            res.end()
          } else sendJsonError(res, 500, (e as Error).message)
        } finally {
          running--
        }
      })
    },
    (e: Error) => sendJsonError(res, 400, `invalid JSON: ${e.message}`),
  )
})

// Warm up (first-run allocations) before saying ready, as the node does.
await runGeneration({ input_ids: [5, 6, 7, 8], max_tokens: 4, ignore_eos: true }, () => {}, new tf.InterruptableStoppingCriteria())
server.listen(Number(values.port), values.host, () => {
  ready = true
})
