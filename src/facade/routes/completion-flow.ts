// What /v1/chat/completions and /v1/completions share once a request's values are checked: the model check (422),
// billing (402), dispatch to a node, the disconnect that cancels the node's work, usage and the debit written once
// per request (also for streams cut short: a billing Tab keeps a stream's usage durable as it is delivered), and
// the SSE loop. Each route gives its own answer and chunk shapes. Imports: facade parts, contract, shared errors.
import type { OutgoingHttpHeaders } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { CompletionRequest, CompletionResponse, FinishReason, StreamEvent, Usage } from '../../contract/completions.js'
import { clip, errorBody, errorStatus, OnnxdError } from '../../shared/errors.js'
import { codeForStatus } from '../../shared/http-errors.js'
import { SseWriter } from '../../shared/sse.js'
import type { FacadeContext } from '../context.js'
import type { KeyPrincipal } from '../request.js'
import type { Dispatched } from '../router.js'

/** OpenAI's usage object. */
export interface OpenAiUsage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
}

export const openAiUsage = (u: Usage): OpenAiUsage => ({
  prompt_tokens: u.prompt_tokens,
  completion_tokens: u.completion_tokens,
  total_tokens: u.prompt_tokens + u.completion_tokens,
})

/** The SSE frames of one streamed answer, in the route's shape. */
export interface ChunkFormat {
  /** Frames before the first delta (chat: the role; completions: the echoed prompt). */
  start(): string[]
  content(text: string): string
  finish(reason: FinishReason): string
  /** The usage frame (with `stream_options.include_usage`), else null. */
  usage(u: Usage): string | null
}

export interface CompletionJob<A> {
  /** The answer's id (also the `x-request-id` header). */
  id: string
  model: string
  principal: KeyPrincipal
  /** One node request per choice (request ids are set here). A stream has exactly one. */
  requests: CompletionRequest[]
  /** Streams with these frames; JSON without. */
  chunks?: ChunkFormat
  /** The JSON answer from the node's answers, in request order. */
  answer(results: CompletionResponse[]): A
}

/** Checks the model and the account (422, 402), then runs the job and answers (JSON or SSE). */
export async function runCompletion<A>(
  request: FastifyRequest,
  reply: FastifyReply,
  ctx: FacadeContext,
  job: CompletionJob<A>,
): Promise<A | FastifyReply> {
  if (ctx.router.knowsModel(job.model) === false) {
    throw new OnnxdError('invalid_value', `The model '${clip(job.model)}' does not exist`)
  }
  ctx.meter.checkCanSpend(job.principal.account)
  job.requests.forEach((r, i) => (r.request_id = job.requests.length === 1 ? job.id : `${job.id}-${i}`))

  reply.header('x-request-id', job.id)
  // The client's disconnect, as a signal that reaches the node requests.
  const gone = new AbortController()
  const onClose = (): void => {
    if (!reply.raw.writableFinished) gone.abort(new Error('client disconnected'))
  }
  reply.raw.on('close', onClose)
  if (request.raw.socket?.destroyed === true) gone.abort(new Error('client disconnected'))
  try {
    const settled = await Promise.allSettled(job.requests.map((r) => ctx.router.dispatch(r, gone.signal)))
    const ok = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []))
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected')
    if (failed && gone.signal.aborted) {
      for (const d of ok) d.release()
      request.log.info({ id: job.id }, 'client disconnected before the node answered')
      return reply.hijack()
    }
    if (job.chunks && ok.length === 1 && ok[0]!.reply.kind === 'stream') {
      await streamCompletion(request, reply, ctx, job, job.chunks, ok[0]!, gone)
      return reply
    }
    try {
      // What the nodes answered is billed, even when another choice of the request failed.
      const bodies = ok.flatMap((d) => (d.reply.kind === 'json' ? [d.reply.body] : []))
      if (bodies.length > 0) {
        await ctx.meter.record(job.principal.account, job.principal.key, job.model, {
          promptTokens: bodies.reduce((n, b) => n + b.usage.prompt_tokens, 0),
          completionTokens: bodies.reduce((n, b) => n + b.usage.completion_tokens, 0),
        })
      }
      if (failed) throw failed.reason
      if (bodies.length !== job.requests.length) throw new OnnxdError('internal', 'a node answered a JSON request with a stream')
      return job.answer(bodies)
    } finally {
      for (const d of ok) d.release()
    }
  } finally {
    reply.raw.off('close', onClose)
  }
}

type FinalEvent = Extract<StreamEvent, { finish_reason: unknown }>
type ErrorEvent = Extract<StreamEvent, { error: unknown }>

async function streamCompletion(
  request: FastifyRequest,
  reply: FastifyReply,
  ctx: FacadeContext,
  job: CompletionJob<unknown>,
  out: ChunkFormat,
  d: Dispatched,
  gone: AbortController,
): Promise<void> {
  if (d.reply.kind !== 'stream') return
  const raw = reply.raw
  reply.hijack()
  const sse = new SseWriter(raw, reply.getHeaders() as OutgoingHttpHeaders, undefined, (err) => request.log.debug({ err }, 'stream write failed'))
  const tab = ctx.meter.open(job.id, job.principal.account, job.principal.key, job.model)

  let deltas = 0
  let seen: Partial<Usage> | null = null
  let final: FinalEvent | null = null
  let failure: ErrorEvent['error'] | null = null
  try {
    for (const frame of out.start()) await sse.write(frame)
    for await (const ev of d.reply.events) {
      // Usage the node reports before its final event (with an error event, or running on deltas) wins over counting.
      const u = (ev as { usage?: Partial<Usage> }).usage
      if (u) seen = u
      if ('error' in ev) {
        failure = ev.error
        break
      }
      if ('finish_reason' in ev && ev.finish_reason) {
        final = ev
        continue
      }
      // Deltas carry their token ids; a delta without ids counts as one token.
      deltas += Array.isArray((ev as { ids?: unknown }).ids) ? (ev as { ids: unknown[] }).ids.length : ev.text ? 1 : 0
      if (ev.text) await sse.write(out.content(ev.text))
      tab.progress({ promptTokens: seen?.prompt_tokens ?? 0, completionTokens: Math.max(seen?.completion_tokens ?? 0, deltas) })
      if (gone.signal.aborted) break
    }
  } catch (e) {
    if (!gone.signal.aborted) {
      request.log.warn({ id: job.id, node: d.node.url, err: e }, 'node stream broke')
      failure = errorBody('internal', 'The inference backend stream was interrupted; it is safe to retry').error
    }
  } finally {
    d.release()
  }

  // Bill what was produced: the node's final usage, else the last usage it reported, else what was streamed.
  const promptTokens = final?.usage.prompt_tokens ?? seen?.prompt_tokens ?? 0
  const completionTokens = final?.usage.completion_tokens ?? Math.max(seen?.completion_tokens ?? 0, deltas)
  try {
    await tab.settle({ promptTokens, completionTokens })
  } catch (e) {
    request.log.error({ id: job.id, err: e, promptTokens, completionTokens }, 'could not record usage of a stream')
  }

  if (gone.signal.aborted || raw.destroyed) {
    request.log.info({ id: job.id, promptTokens, completionTokens }, 'client left during the stream')
    return
  }
  if (final) {
    await sse.write(out.finish(final.finish_reason))
    const usage = out.usage(final.usage)
    if (usage !== null) await sse.write(usage)
  } else {
    const f = failure ?? errorBody('internal', 'The inference backend ended the stream early').error
    const code = codeForStatus(typeof f.code === 'number' ? f.code : 500)
    const message = errorStatus(code) >= 500 ? 'The inference backend failed during the stream; it is safe to retry' : f.message
    await sse.data(JSON.stringify(errorBody(code, message)))
  }
  sse.done()
}
