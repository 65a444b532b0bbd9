// POST /internal/v1/completions: admits a request into the engine, answers JSON or an SSE stream, cancels the
// sequence the moment its client disconnects; with tracing, the request span's attributes and engine phases.
// Imports: engine types, contract, shared errors and tracing, node internals.
import { createHash, randomUUID } from 'node:crypto'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { COMPLETIONS_PATH, CompletionRequest, REQUEST_ID_PATTERN, CompletionResponse, type StreamEvent, type TokenLogprob, type Usage } from '../../contract/completions.js'
import type { EngineClient, EngineRequest } from '../../engine/index.js'
import { fromErrorData, OnnxdError, toErrorData } from '../../shared/errors.js'
import { checkOnePrompt } from '../../shared/prompt-input.js'
import { checkModel } from '../../shared/model.js'
import type { AdmissionState } from '../admission.js'
import type { NodeMetrics } from '../plugins/metrics.js'
import { ErrorBodySchema, toHttpError } from '../../shared/http-errors.js'
import { logFailure } from '../plugins/errors.js'
import { SseWriter } from '../../shared/sse.js'
import { SeqChannel, type ChannelEvent } from '../seq-channel.js'
import type { RequestSpan, RequestTracing } from '../../shared/tracing.js'
import { PhaseTrace } from '../tracing.js'

export interface CompletionRouteDeps {
  engine: EngineClient
  state: AdmissionState
  metrics: NodeMetrics
  /** The app's SERVER spans, when tracing is on: each completion adds its attributes and engine phases to its own. */
  traces?: RequestTracing | null
}

/**
 * An unknown model is answered here (422), before the request reaches a worker; while the pool cannot yet say which
 * model it serves, the engine answers with the same check.
 */
export function checkServedModel(engine: EngineClient, model: string): void {
  let served: string
  try {
    served = engine.health().model
  } catch {
    return // the engine will answer for itself
  }
  if (served) checkModel(model, served)
}

/**
 * The prompt rules the schema cannot say cheaply, as 400s like a missing field: exactly one prompt field, and `tools`
 * only with `messages` (the chat template renders them; with a raw prompt they would be silently dropped).
 */
export function checkPromptFields(body: { messages?: unknown; prompt?: unknown; input_ids?: unknown; tools?: readonly unknown[] }): void {
  checkOnePrompt(body)
  if (body.tools?.length && !body.messages) throw new OnnxdError('invalid_value', '`tools` need `messages`: the chat template renders them', { param: 'tools' })
}

/** Refuses (503, so that a router goes elsewhere) a request that reaches a draining node. */
export function refuseWhileDraining(state: AdmissionState): void {
  if (state.draining) throw new OnnxdError('not_ready', 'The node is draining', { retryAfterS: 1 })
}

/**
 * The node's system_fingerprint (OpenAI's field): a hash of what its tokens depend on besides the request (the model
 * served, the step runtime, the provider). The same fingerprint and seed give the same tokens.
 */
function fingerprintOf(engine: EngineClient): string {
  const h = engine.health()
  const key = JSON.stringify([h.model, h.runtime, h.provider])
  // What it hashes changes only when a worker reloads: hash it once per value, not once per request.
  if (key !== lastFingerprint.key) lastFingerprint = { key, fp: `fp_${createHash('sha256').update(key).digest('hex').slice(0, 10)}` }
  return lastFingerprint.fp
}
let lastFingerprint = { key: '', fp: '' }

export function registerCompletionRoutes(app: FastifyInstance, deps: CompletionRouteDeps): void {
  const { engine, state, metrics, traces } = deps
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    COMPLETIONS_PATH,
    {
      schema: {
        body: CompletionRequest,
        response: { 200: CompletionResponse, '4xx': ErrorBodySchema, '5xx': ErrorBodySchema },
      },
      // A draining node refuses before reading the body: the 503 tells the router to go elsewhere, whatever the body.
      onRequest: async () => refuseWhileDraining(state),
    },
    async (request, reply) => {
      const body = request.body
      // Draining may have begun while the body was being read.
      refuseWhileDraining(state)
      checkPromptFields(body)
      checkServedModel(engine, body.model)

      const requestId = body.request_id ?? request.id
      const log = request.log.child({ request_id: requestId })
      // The contract body onto the engine's own request: everything but how the answer is sent.
      const { stream: _stream, request_id: _given, ...fields } = body
      const req: EngineRequest = { ...fields, request_id: requestId }
      // Never the prompt text (STYLE 13): sizes only.
      log.info(
        { stream: body.stream === true, max_tokens: body.max_tokens, messages: body.messages?.length, prompt_chars: body.prompt?.length, input_ids: body.input_ids?.length },
        'completion submitted',
      )

      const span = traces?.of(request)
      span?.span.setAttributes({ 'gen_ai.request.model': body.model, 'onnxd.request_id': requestId, 'onnxd.stream': body.stream === true })
      const phases = span ? new PhaseTrace(traces!.tracing.tracer, span) : null
      const seq = new SeqChannel(engine, req, phases ? (e) => phases.event(e) : undefined)
      const stop = new AbortController() // ends waits on a slow client when the request is aborted
      const release = state.track((err) => {
        seq.abort(toErrorData(err))
        stop.abort()
      })
      // The response's 'close' before it finished means the client went away (the request's own 'close' fires
      // as soon as its body has been read, so it cannot tell).
      const onClose = (): void => {
        if (!reply.raw.writableFinished) seq.clientGone()
      }
      reply.raw.once('close', onClose)
      if (request.raw.socket?.destroyed === true) seq.clientGone()
      try {
        const first = await seq.next()
        if (first.type === 'gone') return abandon(reply, log, metrics)
        if (first.type === 'error') throw fromErrorData(first.error)
        const pending = first.type === 'accepted' ? null : first // the pool sends `accepted` first; tolerate it not
        const promptTokens = first.type === 'accepted' ? first.promptTokens : 0
        if (body.stream === true) {
          return await streamSse(reply, seq, pending, { requestId, promptTokens, log, metrics, signal: stop.signal, fingerprint: fingerprintOf(engine), span })
        }
        // Token events are deltas, and so is `done`: it carries what was not yet sent (the last sampled token,
        // text the detokenizer or the stop matcher held back). The answer is their concatenation.
        const text: string[] = []
        const ids: number[] = []
        const logprobs: TokenLogprob[] = []
        let e = pending ?? (await seq.next())
        for (; e.type === 'accepted' || e.type === 'token'; e = await seq.next()) {
          if (e.type === 'token') {
            text.push(e.text)
            ids.push(...e.ids)
            if (e.logprobs) logprobs.push(...e.logprobs)
          }
        }
        if (e.type === 'gone') return abandon(reply, log, metrics)
        if (e.type === 'error') throw fromErrorData(e.error)
        text.push(e.text)
        ids.push(...e.ids)
        if (e.logprobs) logprobs.push(...e.logprobs)
        log.info({ prompt_tokens: e.usage.prompt_tokens, completion_tokens: e.usage.completion_tokens, finish_reason: e.finishReason }, 'completion finished')
        const res: CompletionResponse = {
          id: requestId,
          model: body.model,
          text: text.join(''),
          finish_reason: e.finishReason,
          ...(e.stopSequence !== undefined ? { stop_sequence: e.stopSequence } : {}),
          usage: e.usage,
          timings: e.timings,
          output_ids: ids,
          ...(body.logprobs === true ? { logprobs } : {}),
          system_fingerprint: fingerprintOf(engine),
        }
        return reply.code(200).send(res)
      } finally {
        release()
        reply.raw.off('close', onClose)
      }
    },
  )
}

/** The client is gone and its sequence cancelled: nothing can be sent, so take the reply out of fastify's hands. */
function abandon(reply: FastifyReply, log: FastifyRequest['log'], metrics: NodeMetrics): FastifyReply {
  log.info('client disconnected; sequence cancelled')
  metrics.requestFailed('client_gone')
  reply.hijack()
  if (!reply.raw.destroyed) reply.raw.destroy()
  return reply
}

interface StreamCtx {
  fingerprint: string
  requestId: string
  promptTokens: number
  log: FastifyRequest['log']
  metrics: NodeMetrics
  signal: AbortSignal
  /** The request's span: an error after the 200 fails it. */
  span: RequestSpan | undefined
}

/**
 * The accepted sequence as `text/event-stream`: a `data:` frame per delta with text or ids, a final frame with
 * finish reason, usage and timings, then `data: [DONE]`. An error after acceptance is a `data: {"error":…}` frame
 * (with the usage so far, for billing) before [DONE]: the 200 status has already gone out.
 */
async function streamSse(
  reply: FastifyReply,
  seq: SeqChannel,
  pending: ChannelEvent | null,
  ctx: StreamCtx,
): Promise<FastifyReply> {
  const { requestId: id, log, metrics, signal } = ctx
  reply.hijack()
  const sse = new SseWriter(reply.raw, { 'x-request-id': id }, signal, (err) => log.debug({ err }, 'stream write failed'))
  let completionTokens = 0
  let e = pending ?? (await seq.next())
  for (;;) {
    if (e.type === 'token') {
      completionTokens += e.tokens
      if (e.text !== '' || e.ids.length > 0) {
        const ev: StreamEvent = { id, text: e.text, ids: e.ids, ...(e.logprobs ? { logprobs: e.logprobs } : {}), usage: { prompt_tokens: ctx.promptTokens, completion_tokens: completionTokens } }
        await sse.data(JSON.stringify(ev))
      }
    } else if (e.type === 'done') {
      // `done` is the last delta: the last sampled token, and text the detokenizer or stop matcher held back.
      if (e.text !== '' || e.ids.length > 0) await sse.data(JSON.stringify({ id, text: e.text, ids: e.ids, ...(e.logprobs ? { logprobs: e.logprobs } : {}), usage: e.usage } satisfies StreamEvent))
      const last: StreamEvent = { id, text: '', finish_reason: e.finishReason, ...(e.stopSequence !== undefined ? { stop_sequence: e.stopSequence } : {}), usage: e.usage, timings: e.timings, system_fingerprint: ctx.fingerprint }
      void sse.data(JSON.stringify(last))
      log.info({ prompt_tokens: e.usage.prompt_tokens, completion_tokens: e.usage.completion_tokens, finish_reason: e.finishReason }, 'completion finished')
      break
    } else if (e.type === 'error') {
      const err = fromErrorData(e.error)
      const http = toHttpError(err)
      logFailure(reply.request, err, http.status)
      metrics.requestFailed(err.code)
      ctx.span?.fail(err.code)
      const usage: Usage = { prompt_tokens: ctx.promptTokens, completion_tokens: completionTokens }
      const ev: StreamEvent = { error: http.body.error, usage }
      void sse.data(JSON.stringify(ev))
      break
    } else if (e.type === 'gone') {
      abandon(reply, log, metrics)
      return reply
    }
    // `accepted` repeated or unknown events carry nothing for the client.
    e = await seq.next()
  }
  sse.done()
  return reply
}

const REQUEST_ID = new RegExp(REQUEST_ID_PATTERN)

/** A request id for requests that bring none: the `x-request-id` header when sane, else a fresh one. */
export function requestIdFor(header: string | string[] | undefined): string {
  const h = Array.isArray(header) ? header[0] : header
  return h !== undefined && REQUEST_ID.test(h) ? h : `cmpl-${randomUUID()}`
}
