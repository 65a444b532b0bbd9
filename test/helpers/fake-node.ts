// A fake worker node: a tiny fastify app speaking the internal contract (GET /health, POST
// /internal/v1/completions, JSON and SSE) with canned tokens. Used by the facade tests and bench/facade.bench.ts.
// Tests steer it explicitly (failures, held streams, mid-stream faults); it waits on a timer only when given an answer time.
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { CompletionRequest, type Usage } from '../../src/contract/completions.js'
import type { HealthBody } from '../../src/contract/health.js'
import { errorBody, type ErrorCode } from '../../src/shared/errors.js'
import { deferred } from './deferred.js'

export interface FakeNodeOptions {
  models?: string[]
  /** The tokens every completion produces, in order (a completion stops at max_tokens). */
  tokens?: string[]
  capacity?: number
  status?: HealthBody['status']
  /** Listen on this port (default 0: any free port). */
  port?: number
  /**
   * Streams one delta every `paceMs` (default: all at once), each carrying the running usage as the real node's do:
   * a stream that runs while a test acts on it.
   */
  paceMs?: number
}

export interface Fault {
  status: number
  message?: string
  retryAfterS?: number
}

export interface Hold {
  /** Resolves once the held stream has sent its first `after` deltas. */
  reached: Promise<void>
  /** Lets the stream go on. */
  release(): void
  /** Resolves if the facade closes the connection while the stream is held or running. */
  cancelled: Promise<void>
}

export interface FakeNode {
  url: string
  app: FastifyInstance
  /** Completion bodies received, in order. */
  requests: CompletionRequest[]
  /** The /health body; mutate freely. */
  health: HealthBody
  /** Answers the next completion requests with these errors, one each. */
  failNext(...faults: Fault[]): void
  /** The next completion pauses (a stream after `after` deltas, a JSON answer before answering) until released. */
  holdNext(after: number): Hold
  /** The next stream sends `after` deltas, then an error event ('error') or drops the connection ('drop'). */
  breakNext(after: number, how: 'error' | 'drop'): void
  /** How many completions were cut off by the client (the facade) closing the connection. */
  readonly cancellations: number
  /**
   * How long a completion takes before its answer starts, ms (default 0; mutable): a timer, no CPU, like a node on
   * another host doing the work. bench/facade.bench.ts sets it to measure the facade in front of a node as slow as a
   * real completion.
   */
  answerMs: number
  close(): Promise<void>
}

export const DEFAULT_TOKENS = ['Hello', ',', ' world', '!', ' How', ' are', ' you', '?']

/** Prompt tokens of the fake: words of each message plus 2 per message, deterministic. */
export function fakePromptTokens(req: CompletionRequest): number {
  if (req.input_ids) return req.input_ids.length
  if (req.prompt !== undefined) return req.prompt.split(/\s+/).filter(Boolean).length
  return (req.messages ?? []).reduce((n, m) => n + m.content.split(/\s+/).filter(Boolean).length + 2, 0)
}

const check = TypeCompiler.Compile(CompletionRequest)

const codeOf = (status: number): ErrorCode =>
  status === 400 ? 'invalid_request' : status === 422 ? 'invalid_value' : status === 503 ? 'queue_full' : 'internal'

export async function startFakeNode(opts: FakeNodeOptions = {}): Promise<FakeNode> {
  const tokens = opts.tokens ?? DEFAULT_TOKENS
  const app = Fastify({ logger: false })
  const faults: Fault[] = []
  const holds: { after: number; hold: Hold; gate: Promise<void>; reached: () => void; cancelled: () => void }[] = []
  const breaks: { after: number; how: 'error' | 'drop' }[] = []
  let cancellations = 0
  const requests: CompletionRequest[] = []
  const health: HealthBody = {
    status: opts.status ?? 'ready',
    models: opts.models ?? ['tiny-llm'],
    provider: 'cpu',
    workers: { total: 1, ready: 1 },
    running: 0,
    waiting: 0,
    capacity: opts.capacity ?? 64,
  }

  app.get('/health', async (_req, reply) => reply.code(health.status === 'ready' ? 200 : 503).send(health))

  const sendError = (reply: FastifyReply, f: Fault): FastifyReply => {
    if (f.retryAfterS !== undefined) reply.header('retry-after', String(f.retryAfterS))
    return reply.code(f.status).send(errorBody(codeOf(f.status), f.message ?? `fake node error ${f.status}`))
  }

  app.post('/internal/v1/completions', async (request, reply) => {
    const body = request.body
    if (!check.Check(body)) {
      const e = check.Errors(body).First()
      return sendError(reply, { status: 400, message: `invalid request: ${e?.path} ${e?.message}` })
    }
    requests.push(body)
    const fault = faults.shift()
    if (fault) return sendError(reply, fault)
    if (!health.models.includes(body.model)) return sendError(reply, { status: 422, message: `model '${body.model}' is not loaded` })
    if (body.messages && body.messages.some((m) => m.content.includes('CONTEXT-TOO-LONG'))) {
      return sendError(reply, { status: 422, message: 'prompt tokens + max_tokens must be <= 2048. Given: 4000 + 16' })
    }

    const id = body.request_id ?? 'cmpl-fake'
    const n = Math.min(body.max_tokens ?? tokens.length, tokens.length)
    const out = tokens.slice(0, n)
    const usage: Usage = { prompt_tokens: fakePromptTokens(body), completion_tokens: n }
    const finish_reason = n === tokens.length ? 'stop' : 'length'
    const timings = { queue_ms: 0, ttft_ms: 1, total_ms: 2 }

    const raw = reply.raw
    let open = true
    const closed = deferred()
    raw.on('close', () => {
      if (!raw.writableFinished) {
        open = false
        cancellations++
        closed.resolve()
      }
    })
    const hold = holds.shift()
    if (hold) void closed.promise.then(hold.cancelled)
    if (node.answerMs > 0) {
      await new Promise((resolve) => setTimeout(resolve, node.answerMs))
      if (!open) return reply.hijack()
    }

    if (!body.stream) {
      if (hold) {
        hold.reached()
        await Promise.race([hold.gate, closed.promise])
        if (!open) return reply.hijack()
      }
      return { id, model: body.model, text: out.join(''), finish_reason, usage, timings }
    }

    reply.hijack()
    const fail = breaks.shift()
    raw.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    const send = (data: unknown): void => {
      if (open) raw.write(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`)
    }
    for (let i = 0; i < out.length && open; i++) {
      if (hold && i === hold.after) {
        hold.reached()
        await Promise.race([hold.gate, closed.promise])
        if (!open) return reply
      }
      if (fail && i === fail.after) {
        if (fail.how === 'drop') {
          // Let what was sent reach the socket first (an SSE comment line, flushed), then cut the connection.
          await new Promise<void>((resolve) => raw.write(':\n\n', () => resolve()))
          raw.destroy()
          return reply
        }
        // Like the real node: the error event carries the usage produced so far.
        send({ ...errorBody('worker_crashed', 'worker crashed'), usage: { prompt_tokens: usage.prompt_tokens, completion_tokens: i } })
        send('[DONE]')
        raw.end()
        return reply
      }
      if (opts.paceMs === undefined) {
        send({ id, text: out[i], ids: [i] })
        continue
      }
      send({ id, text: out[i], ids: [i], usage: { prompt_tokens: usage.prompt_tokens, completion_tokens: i + 1 } })
      await new Promise((resolve) => setTimeout(resolve, opts.paceMs))
    }
    if (!open) return reply
    send({ id, text: '', finish_reason, usage, timings })
    send('[DONE]')
    raw.end()
    return reply
  })

  const url = await app.listen({ port: opts.port ?? 0, host: '127.0.0.1' })
  const node: FakeNode = {
    url,
    answerMs: 0,
    app,
    requests,
    health,
    failNext: (...f) => void faults.push(...f),
    holdNext(after) {
      const reached = deferred()
      const gate = deferred()
      const cancelled = deferred()
      const hold: Hold = { reached: reached.promise, release: () => gate.resolve(), cancelled: cancelled.promise }
      holds.push({ after, hold, gate: gate.promise, reached: () => reached.resolve(), cancelled: () => cancelled.resolve() })
      return hold
    },
    breakNext: (after, how) => void breaks.push({ after, how }),
    get cancellations() {
      return cancellations
    },
    close: () => app.close(),
  }
  return node
}
