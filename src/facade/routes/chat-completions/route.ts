// POST /v1/chat/completions: values (422) → billing (402) → dispatch to a node → the OpenAI answer, JSON or SSE.
// A client that leaves cancels the node's work; usage and the debit are written once per completion, also for
// streams cut short. A stream's usage is kept durable as it is delivered (a billing Tab), so a crash loses at most
// one save interval. Imports: facade parts, contract, shared errors, store ids.
import type { OutgoingHttpHeaders } from 'node:http'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { StreamEvent, Usage } from '../../../contract/completions.js'
import { clip, errorBody, errorStatus, OnnxdError } from '../../../shared/errors.js'
import { randomBase62 } from '../../../store/ids.js'
import type { FacadeContext } from '../../context.js'
import { codeForStatus, ErrorBodySchema } from '../../../shared/http-errors.js'
import { keyPrincipal, type KeyPrincipal } from '../../request.js'
import type { Dispatched } from '../../router.js'
import { ChatCompletionBody, ChatCompletionSchema, KNOWN_FIELDS, parseChatParams, type ChatParams } from './schema.js'
import { ChunkWriter, toChatCompletion, toNodeRequest } from './translate.js'
import { SseWriter } from '../../../shared/sse.js'

export function chatCompletionsRoute(app: FastifyInstance, ctx: FacadeContext): void {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/chat/completions',
    {
      config: { auth: 'key' },
      schema: { body: ChatCompletionBody, response: { 200: ChatCompletionSchema, '4xx': ErrorBodySchema, '5xx': ErrorBodySchema } },
    },
    async (request, reply) => {
      const principal = keyPrincipal(request)
      const body = request.body as Record<string, unknown>
      const params = parseChatParams(body)
      if (request.log.level === 'debug' || request.log.level === 'trace') {
        const ignored = Object.keys(body).filter((k) => !KNOWN_FIELDS.has(k))
        if (ignored.length > 0) request.log.debug({ ignored }, 'ignoring unknown request fields')
      }
      if (ctx.router.knowsModel(params.model) === false) {
        throw new OnnxdError('invalid_value', `The model '${clip(params.model)}' does not exist`)
      }
      ctx.meter.checkCanSpend(principal.account)

      const id = `chatcmpl-${randomBase62(24)}`
      const created = Math.floor(ctx.now() / 1000)
      reply.header('x-request-id', id)
      // The client's disconnect, as a signal that reaches the node request.
      const gone = new AbortController()
      const onClose = (): void => {
        if (!reply.raw.writableFinished) gone.abort(new Error('client disconnected'))
      }
      reply.raw.on('close', onClose)
      if (request.raw.socket?.destroyed === true) gone.abort(new Error('client disconnected'))
      try {
        let d: Dispatched
        try {
          d = await ctx.router.dispatch(toNodeRequest(params, id), gone.signal)
        } catch (e) {
          if (!gone.signal.aborted) throw e
          request.log.info({ id }, 'client disconnected before the node answered')
          return reply.hijack()
        }
        if (d.reply.kind === 'stream') {
          await streamChat(request, reply, ctx, { d, id, created, params, principal, gone })
          return reply
        }
        try {
          const r = d.reply.body
          await ctx.meter.record(principal.account, principal.key, params.model, {
            promptTokens: r.usage.prompt_tokens,
            completionTokens: r.usage.completion_tokens,
          })
          return toChatCompletion(id, created, params.model, r)
        } finally {
          d.release()
        }
      } finally {
        reply.raw.off('close', onClose)
      }
    },
  )
}

interface StreamCtx {
  d: Dispatched
  id: string
  created: number
  params: ChatParams
  principal: KeyPrincipal
  gone: AbortController
}

type FinalEvent = Extract<StreamEvent, { finish_reason: unknown }>
type ErrorEvent = Extract<StreamEvent, { error: unknown }>

async function streamChat(request: FastifyRequest, reply: FastifyReply, ctx: FacadeContext, s: StreamCtx): Promise<void> {
  if (s.d.reply.kind !== 'stream') return
  const raw = reply.raw
  reply.hijack()
  const sse = new SseWriter(raw, reply.getHeaders() as OutgoingHttpHeaders, undefined, (err) => request.log.debug({ err }, 'stream write failed'))
  const out = new ChunkWriter(s.id, s.created, s.params.model, s.params.stream_options?.include_usage === true)
  const tab = ctx.meter.open(s.id, s.principal.account, s.principal.key, s.params.model)

  let deltas = 0
  let seen: Partial<Usage> | null = null
  let final: FinalEvent | null = null
  let failure: ErrorEvent['error'] | null = null
  try {
    await sse.write(out.role())
    for await (const ev of s.d.reply.events) {
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
      if (s.gone.signal.aborted) break
    }
  } catch (e) {
    if (!s.gone.signal.aborted) {
      request.log.warn({ id: s.id, node: s.d.node.url, err: e }, 'node stream broke')
      failure = errorBody('internal', 'The inference backend stream was interrupted; it is safe to retry').error
    }
  } finally {
    s.d.release()
  }

  // Bill what was produced: the node's final usage, else the last usage it reported, else what was streamed.
  const promptTokens = final?.usage.prompt_tokens ?? seen?.prompt_tokens ?? 0
  const completionTokens = final?.usage.completion_tokens ?? Math.max(seen?.completion_tokens ?? 0, deltas)
  try {
    await tab.settle({ promptTokens, completionTokens })
  } catch (e) {
    request.log.error({ id: s.id, err: e, promptTokens, completionTokens }, 'could not record usage of a stream')
  }

  if (s.gone.signal.aborted || raw.destroyed) {
    request.log.info({ id: s.id, promptTokens, completionTokens }, 'client left during the stream')
    return
  }
  if (final) {
    await sse.write(out.finish(final.finish_reason))
    if (s.params.stream_options?.include_usage === true) await sse.write(out.usage(final.usage))
  } else {
    const f = failure ?? errorBody('internal', 'The inference backend ended the stream early').error
    const code = codeForStatus(typeof f.code === 'number' ? f.code : 500)
    const message = errorStatus(code) >= 500 ? 'The inference backend failed during the stream; it is safe to retry' : f.message
    await sse.data(JSON.stringify(errorBody(code, message)))
  }
  sse.done()
}
