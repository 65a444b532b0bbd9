// The one completion flow under every /v1 surface (chat, completions, responses, messages), once a request's values
// are checked and translated to node requests: the model check (422, and its chat template for message surfaces),
// billing (402), dispatch to a node, the disconnect that cancels the node's work, usage and the debit written once
// per request (also for streams cut short: a billing Tab keeps a stream's usage durable as it is delivered), and
// the SSE loop; with tracing, the request span's attributes (model, tokens, finish reasons, a stream's failure) and the
// node calls made under it. A surface differs only in its schema, its translation and its StreamFormat (the frames
// of a stream, its end marker and its failure frames included). Imports: facade parts, contract, shared
// errors, @opentelemetry/api (types).
import type { OutgoingHttpHeaders } from 'node:http'
import { Type, type Static } from '@sinclair/typebox'
import type { Span } from '@opentelemetry/api'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { CompletionRequest, CompletionResponse, FinishReason, StreamEvent, TokenLogprob, Usage } from '../../contract/completions.js'
import { clip, errorBody, errorStatus, OnnxdError, type ErrorCode } from '../../shared/errors.js'
import { codeForStatus } from '../../shared/http-errors.js'
import { SSE_DONE, sseFrame, SseWriter } from '../../shared/sse.js'
import type { FacadeContext } from '../context.js'
import { streamFailed } from '../metrics.js'
import type { KeyPrincipal } from '../request.js'
import type { Dispatched } from '../router.js'
import { requestUsage } from './request-usage.js'

/** OpenAI's usage object; `cached_tokens`: prompt tokens the node's prefix cache gave instead of computing them. */
export const OpenAiUsage = Type.Object({
  prompt_tokens: Type.Integer(),
  completion_tokens: Type.Integer(),
  total_tokens: Type.Integer(),
  prompt_tokens_details: Type.Object({ cached_tokens: Type.Integer() }),
})
export type OpenAiUsage = Static<typeof OpenAiUsage>

export const openAiUsage = (u: Usage): OpenAiUsage => ({
  prompt_tokens: u.prompt_tokens,
  completion_tokens: u.completion_tokens,
  total_tokens: u.prompt_tokens + u.completion_tokens,
  prompt_tokens_details: { cached_tokens: u.prompt_tokens_details?.cached_tokens ?? 0 },
})

/** How an OpenAI stream (chat, legacy completions) ends after a failure: the error object, then `[DONE]`. */
export const openAiStreamFailed = (code: ErrorCode, message: string): string => sseFrame(JSON.stringify(errorBody(code, message))) + SSE_DONE


/**
 * A surface's stream framing: the SSE frames of one streamed answer in its shape, from the first delta to the end
 * marker (chat's `[DONE]`, Responses' `response.completed`, Messages' `message_stop`) or the failure frames. The flow
 * calls start, content and finish per choice (`index`), then either `end` or `failed`, once.
 */
export interface StreamFormat {
  /** Frames before the choice's first delta (chat: the role; completions: the echoed prompt). */
  start(index: number): string[]
  /** A delta: its text, and with logprobs one entry per token it carries. */
  content(index: number, text: string, logprobs?: TokenLogprob[]): string
  /** `fingerprint`: the node's system_fingerprint, and `stopSequence` the stop string that ended it, from its final event. */
  finish(index: number, reason: FinishReason, fingerprint?: string, stopSequence?: string): string
  /**
   * The frames closing a stream whose every choice finished, given its usage (chat: the usage chunk when asked for,
   * then `[DONE]`). May wait (a stored answer is saved before the client hears it is complete).
   */
  end(u: Usage): string | Promise<string>
  /** The frames closing a stream that failed, given the error (its code is one of the spec's) and what was produced. */
  failed(code: ErrorCode, message: string, u: Usage): string
}

export interface CompletionJob<A> {
  /** The answer's id (also the `x-request-id` header). */
  id: string
  model: string
  /** The surface's name when its requests carry messages (chat, responses, messages): the model needs a chat template (422). */
  chat?: string
  principal: KeyPrincipal
  /** One node request per choice (request ids are set here); a stream interleaves their deltas. */
  requests: CompletionRequest[]
  /**
   * Each prompt's choices (n, default 1): `requests` are its prompts × choices in a row, as withChoices lays them.
   * A prompt counts once in the usage and the bill, however many choices it has (request-usage.ts).
   */
  choices?: number
  /** Streams with these frames; JSON without. */
  chunks?: StreamFormat
  /**
   * The JSON answer from the node's answers, in request order, and the request's usage (each prompt once, every
   * choice's completion) (may wait: a stored answer is saved first).
   */
  answer(results: CompletionResponse[], usage: Usage): A | Promise<A>
}

/** 422 unless a node serves `model` and, for a message surface (`chat` names it), the model has a chat template. */
export function checkModel(ctx: FacadeContext, model: string, chat?: string): void {
  if (ctx.router.knowsModel(model) === false) {
    throw new OnnxdError('invalid_value', `The model '${clip(model)}' does not exist`)
  }
  if (chat !== undefined && ctx.router.servesChat(model) === false) {
    throw new OnnxdError('invalid_value', `The model '${clip(model)}' has no chat template, so it cannot serve ${chat}; use /v1/completions with a prompt`)
  }
}

/** Checks the model, the account and the key's concurrent sequences (422, 402, 429), then runs the job and answers (JSON or SSE). */
export async function runCompletion<A>(
  request: FastifyRequest,
  reply: FastifyReply,
  ctx: FacadeContext,
  job: CompletionJob<A>,
): Promise<A | FastifyReply> {
  checkModel(ctx, job.model, job.chat)
  ctx.meter.checkCanSpend(job.principal.account)
  // The key's share of the nodes (429 over its bound): one sequence per node request, until the answer or stream ends.
  const releaseSequences = ctx.sequences.acquire(job.principal.key.id, job.requests.length)
  job.requests.forEach((r, i) => {
    r.request_id = job.requests.length === 1 ? job.id : `${job.id}-${i}`
    // The node takes waiting requests key by key in turn: one key's burst waits behind its own requests.
    r.tenant = job.principal.key.id
    // Choices of one prompt: the node counts the prompt in its metrics with the first only.
    if ((job.choices ?? 1) > 1) r.choice = i % job.choices!
  })

  reply.header('x-request-id', job.id)
  const span = ctx.traces?.of(request)?.span
  span?.setAttributes({ 'gen_ai.request.model': job.model, 'onnxd.request_id': job.id, 'onnxd.stream': job.chunks !== undefined, 'onnxd.choices': job.requests.length })
  // The client's disconnect, as a signal that reaches the node requests.
  const gone = new AbortController()
  const onClose = (): void => {
    if (!reply.raw.writableFinished) gone.abort(new Error('client disconnected'))
  }
  reply.raw.on('close', onClose)
  if (request.raw.socket?.destroyed === true) gone.abort(new Error('client disconnected'))
  try {
    // The first choice to fail ends the others' node requests at once (the client leaving ends them all). One choice
    // has no others: its requests follow the client alone (AbortSignal.any costs about 16 µs a request on Node 20).
    const cancel = new AbortController()
    const signal = job.requests.length === 1 ? gone.signal : AbortSignal.any([gone.signal, cancel.signal])
    const first: { failed: boolean; reason?: unknown } = { failed: false }
    const settled = await Promise.allSettled(
      job.requests.map((r) =>
        // Under the request's span, so that each call to a node (a retry too) is a child of it.
        (ctx.traces ? ctx.traces.run(request, () => ctx.router.dispatch(r, signal)) : ctx.router.dispatch(r, signal)).catch((e: unknown) => {
          if (!first.failed && !gone.signal.aborted) {
            first.failed = true
            first.reason = e
            cancel.abort(new Error('another choice of the request failed'))
          }
          throw e
        }),
      ),
    )
    const ok = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []))
    if (ok.length < settled.length && gone.signal.aborted) {
      for (const d of ok) d.release()
      request.log.info({ id: job.id }, 'client disconnected before the node answered')
      return reply.hijack()
    }
    if (job.chunks && !first.failed) {
      await streamCompletion(request, reply, ctx, job, job.chunks, ok, { gone, cancel })
      return reply
    }
    try {
      // What the nodes answered in full is billed, even when another choice of the request failed.
      const bodies = ok.flatMap((d) => (d.reply.kind === 'json' ? [d.reply.body] : []))
      // Each node request's answer in request order (null where it failed), so that choices of one prompt group.
      const answered = settled.map((r) => (r.status === 'fulfilled' && r.value.reply.kind === 'json' ? r.value.reply.body.usage : null))
      const usage = requestUsage(answered, job.choices)
      if (span && bodies.length > 0) setUsage(span, usage, bodies.map((b) => b.finish_reason))
      if (bodies.length > 0) {
        // Under the answer's id: the store bills it once, however often it is sent (a spooled record is sent again).
        const counts = { promptTokens: usage.prompt_tokens, completionTokens: usage.completion_tokens }
        await ctx.meter.record(job.principal.account, job.principal.key, job.model, counts, job.id)
      }
      if (first.failed) throw first.reason
      if (bodies.length !== job.requests.length) throw new OnnxdError('internal', 'a node answered a JSON request with a stream')
      return await job.answer(bodies, usage)
    } finally {
      for (const d of ok) d.release()
    }
  } finally {
    reply.raw.off('close', onClose)
    releaseSequences()
  }
}

/** Token counts and finish reasons on the request's span (the semantic conventions' gen_ai attributes). */
function setUsage(span: Span, u: Usage, reasons: FinishReason[]): void {
  span.setAttributes({
    'gen_ai.usage.input_tokens': u.prompt_tokens,
    'gen_ai.usage.output_tokens': u.completion_tokens,
    'gen_ai.usage.cache_read.input_tokens': u.prompt_tokens_details?.cached_tokens ?? 0,
    ...(reasons.length > 0 ? { 'gen_ai.response.finish_reasons': reasons } : {}),
  })
}

type FinalEvent = Extract<StreamEvent, { finish_reason: unknown }>
type ErrorEvent = Extract<StreamEvent, { error: unknown }>

/** What one choice's node stream delivered. */
interface ChoiceState {
  deltas: number
  seen: Partial<Usage> | null
  final: FinalEvent | null
  /** `deltas` and `seen` as of the last frame that has left this process (what a crash-safe save may bill). */
  sent: { deltas: number; seen: Partial<Usage> | null }
}

/** What a choice's node stream delivered, as usage: its final usage, else the last it reported, else its deltas. */
const usageOf = (c: ChoiceState): Partial<Usage> => ({
  prompt_tokens: c.final?.usage.prompt_tokens ?? c.seen?.prompt_tokens ?? 0,
  completion_tokens: c.final?.usage.completion_tokens ?? Math.max(c.seen?.completion_tokens ?? 0, c.deltas),
  prompt_tokens_details: { cached_tokens: c.final?.usage.prompt_tokens_details?.cached_tokens ?? 0 },
})

/**
 * The node streams of one request as one SSE answer: each choice's deltas as they come, billed as they are
 * delivered (one Tab for the request); then, once every choice has finished, their finish frames and the usage. An
 * error in any choice ends the answer with the error object (the others are cancelled); what was produced is billed.
 */
async function streamCompletion(
  request: FastifyRequest,
  reply: FastifyReply,
  ctx: FacadeContext,
  job: CompletionJob<unknown>,
  out: StreamFormat,
  ds: Dispatched[],
  { gone, cancel }: { gone: AbortController; cancel: AbortController },
): Promise<void> {
  const raw = reply.raw
  reply.hijack()
  const sse = new SseWriter(raw, reply.getHeaders() as OutgoingHttpHeaders, undefined, (err) => request.log.debug({ err }, 'stream write failed'))
  const tab = ctx.meter.open(job.id, job.principal.account, job.principal.key, job.model)
  const choices: ChoiceState[] = ds.map(() => ({ deltas: 0, seen: null, final: null, sent: { deltas: 0, seen: null } }))
  let failure: ErrorEvent['error'] | null = null
  // The tab hears what has left this process for the client's socket: a frame still in the response's buffer when a
  // SIGKILL lands never reaches the client, and must not be in a crash-safe save. (A delta without a frame counts
  // with the next frame.)
  const progress = (): void => {
    const u = requestUsage(choices.map(({ sent }) => ({ prompt_tokens: sent.seen?.prompt_tokens ?? 0, completion_tokens: Math.max(sent.seen?.completion_tokens ?? 0, sent.deltas) })), job.choices)
    tab.progress({ promptTokens: u.prompt_tokens, completionTokens: u.completion_tokens })
  }

  const run = async (d: Dispatched, index: number): Promise<void> => {
    const c = choices[index]!
    try {
      if (d.reply.kind !== 'stream') throw new Error('a node answered a streamed request with JSON')
      for (const frame of out.start(index)) await sse.write(frame)
      for await (const ev of d.reply.events) {
        // Usage the node reports before its final event (with an error event, or running on deltas) wins over counting.
        const u = (ev as { usage?: Partial<Usage> }).usage
        if (u) c.seen = u
        if ('error' in ev) {
          failure ??= ev.error
          break
        }
        if ('finish_reason' in ev && ev.finish_reason) {
          c.final = ev
          continue
        }
        // Deltas carry their token ids; a delta without ids counts as one token.
        c.deltas += Array.isArray((ev as { ids?: unknown }).ids) ? (ev as { ids: unknown[] }).ids.length : ev.text ? 1 : 0
        const lp = (ev as { logprobs?: TokenLogprob[] }).logprobs
        if (ev.text || lp?.length) {
          const sent = { deltas: c.deltas, seen: c.seen }
          await sse.write(out.content(index, ev.text, lp), () => {
            c.sent = sent
            progress()
          })
        }
        if (gone.signal.aborted || failure !== null) break
      }
    } catch (e) {
      if (!gone.signal.aborted && !cancel.signal.aborted) {
        request.log.warn({ id: job.id, node: d.node.url, err: e }, 'node stream broke')
        failure ??= errorBody('internal', 'The inference backend stream was interrupted; it is safe to retry').error
      }
    } finally {
      d.release()
      // One choice failed: the others' node requests end now rather than at their next delta.
      if (failure !== null && ds.length > 1) cancel.abort(new Error('another choice of the request failed'))
    }
  }
  await Promise.all(ds.map(run))

  // Bill what was produced: each node's final usage, else the last usage it reported, else what was streamed.
  const usage = requestUsage(choices.map(usageOf), job.choices)
  const { prompt_tokens: promptTokens, completion_tokens: completionTokens } = usage
  const traced = ctx.traces?.of(request)
  if (traced) setUsage(traced.span, usage, choices.flatMap((c) => (c.final ? [c.final.finish_reason] : [])))
  try {
    // A store that does not accept it (an outage) does not fail this: the record is kept in the spool and sent again.
    await tab.settle({ promptTokens, completionTokens })
  } catch (e) {
    request.log.error({ id: job.id, err: e, promptTokens, completionTokens }, 'could not record usage of a stream')
  }

  if (gone.signal.aborted || raw.destroyed) {
    request.log.info({ id: job.id, promptTokens, completionTokens }, 'client left during the stream')
    return
  }
  if (failure === null && choices.every((c) => c.final !== null)) {
    for (const [i, c] of choices.entries()) await sse.write(out.finish(i, c.final!.finish_reason, c.final!.system_fingerprint, c.final!.stop_sequence))
    sse.end(await out.end(usage))
  } else {
    const f: ErrorEvent['error'] = failure ?? errorBody('internal', 'The inference backend ended the stream early').error
    const code = codeForStatus(typeof f.code === 'number' ? f.code : 500)
    traced?.fail(code)
    streamFailed(raw, errorStatus(code))
    const message = errorStatus(code) >= 500 ? 'The inference backend failed during the stream; it is safe to retry' : f.message
    sse.end(out.failed(code, message, usage))
  }
}
