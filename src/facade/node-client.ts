// The facade's only way to a worker node: the internal HTTP contract (GET /health, POST /internal/v1/completions,
// JSON or SSE, POST /internal/v1/tokenize), spoken with undici over keep-alive connections. With tracing, each completion call is a CLIENT span,
// child of the request span active where it is made, whose `traceparent` the node receives; it ends with the
// answer (a stream's last event). Imports: contract, shared tracing, @opentelemetry/api.
import { StringDecoder } from 'node:string_decoder'
import { SpanKind, SpanStatusCode, trace, type Span } from '@opentelemetry/api'
import { Agent, request, type Dispatcher } from 'undici'
import { epochNow, type Tracing } from '../shared/tracing.js'
import { COMPLETIONS_PATH, type CompletionRequest, type CompletionResponse, type StreamEvent, type Usage } from '../contract/completions.js'
import { HEALTH_PATH, type HealthBody } from '../contract/health.js'
import { TOKENIZE_PATH, type TokenizeRequest, type TokenizeResponse } from '../contract/tokenize.js'

/** How a node answered a completion request. Transport failures before an answer are `unreachable`. */
export type NodeReply =
  | { kind: 'json'; body: CompletionResponse }
  /** Iterating yields the node's events up to `[DONE]`; it throws if the connection breaks; `return()` cancels. */
  | { kind: 'stream'; events: AsyncIterable<StreamEvent> }
  | NodeFailure

/** A node's answer that is not one: its error (status, message, Retry-After), or no connection at all. */
export type NodeFailure = { kind: 'error'; status: number; message: string; retryAfterS?: number } | { kind: 'unreachable'; message: string }

/** How a node answered a tokenize request. */
export type TokenizeReply = { kind: 'json'; body: TokenizeResponse } | NodeFailure

export interface NodeHealth {
  /** HTTP status, or 0 when the node could not be reached. */
  status: number
  body: HealthBody | null
  error?: string
}

export interface NodeClient {
  health(baseUrl: string, signal: AbortSignal): Promise<NodeHealth>
  /** Aborting `signal` cancels the node's work: the connection is closed, and the node drops the sequence. */
  complete(baseUrl: string, body: CompletionRequest, signal: AbortSignal): Promise<NodeReply>
  /** A prompt's token count (POST /internal/v1/tokenize): the model does not run. */
  tokenize(baseUrl: string, body: TokenizeRequest, signal: AbortSignal): Promise<TokenizeReply>
  close(): Promise<void>
}

export interface HttpNodeClientOptions {
  /** Longest wait for response headers and between two chunks of a body. */
  timeoutMs: number
  /** Traces (off without): see the header. */
  tracing?: Tracing | null
}

/** Transport errors that mean no connection was made. */
const NOT_CONNECTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT'])

const describe = (e: unknown): string => {
  const err = e as { code?: string; message?: string; cause?: { code?: string; message?: string } }
  return err.cause?.code ?? err.code ?? err.cause?.message ?? err.message ?? String(e)
}

/** Splits an SSE body into the `data:` payloads of its events. */
export async function* sseData(body: AsyncIterable<Buffer | string>): AsyncGenerator<string> {
  const decoder = new StringDecoder('utf8')
  let buf = ''
  for await (const chunk of body) {
    buf += typeof chunk === 'string' ? chunk : decoder.write(chunk)
    if (buf.includes('\r')) buf = buf.replace(/\r\n?/g, '\n')
    let end: number
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end)
      buf = buf.slice(end + 2)
      const data: string[] = []
      for (const line of block.split('\n')) {
        if (line.startsWith('data:')) data.push(line.slice(line.charAt(5) === ' ' ? 6 : 5))
      }
      if (data.length > 0) yield data.join('\n')
    }
  }
}

async function* streamEvents(body: AsyncIterable<Buffer | string> & { destroy(): unknown }): AsyncGenerator<StreamEvent> {
  let done = false
  try {
    for await (const data of sseData(body)) {
      if (data === '[DONE]') {
        done = true
        return
      }
      yield JSON.parse(data) as StreamEvent
    }
    throw new Error('the node closed the stream before [DONE]')
  } finally {
    // Stopped early (client gone, error): closing the connection tells the node to cancel the sequence.
    if (!done) body.destroy()
  }
}

/** Ends a completion call's CLIENT span once: with the node's status, and as an error for `failure`. */
function endCall(span: Span, status: number | null, failure: string | null, usage?: Usage): void {
  if (status !== null) span.setAttribute('http.response.status_code', status)
  if (usage) span.setAttributes({ 'gen_ai.usage.input_tokens': usage.prompt_tokens, 'gen_ai.usage.output_tokens': usage.completion_tokens })
  if (failure !== null) {
    span.setAttribute('error.type', failure)
    span.setStatus({ code: SpanStatusCode.ERROR, message: failure })
  }
  span.end(epochNow())
}

/** A node stream whose span ends with it: at its last event, when it breaks, or when the caller stops reading. */
async function* tracedEvents(
  events: AsyncIterable<StreamEvent>,
  signal: AbortSignal,
  finish: (status: number, failure: string | null, usage?: Usage) => void,
): AsyncGenerator<StreamEvent> {
  let usage: Usage | undefined
  let failure: string | null = 'cancelled'
  try {
    for await (const ev of events) {
      if ('usage' in ev && ev.usage) usage = ev.usage
      if ('error' in ev) failure = String(ev.error.code)
      else if ('finish_reason' in ev && ev.finish_reason) failure = null
      yield ev
    }
  } catch (e) {
    failure = signal.aborted ? 'cancelled' : 'stream_broken'
    throw e
  } finally {
    finish(200, failure, usage)
  }
}

export class HttpNodeClient implements NodeClient {
  private readonly agent: Agent
  private readonly tracing: Tracing | null

  constructor(opts: HttpNodeClientOptions) {
    this.tracing = opts.tracing ?? null
    this.agent = new Agent({
      keepAliveTimeout: 30_000,
      headersTimeout: opts.timeoutMs,
      bodyTimeout: opts.timeoutMs,
      connections: null,
      pipelining: 1,
    })
  }

  async health(baseUrl: string, signal: AbortSignal): Promise<NodeHealth> {
    try {
      const res = await request(baseUrl + HEALTH_PATH, { dispatcher: this.agent, signal })
      const text = await res.body.text()
      let body: HealthBody | null = null
      try {
        const parsed = JSON.parse(text) as HealthBody
        if (parsed && typeof parsed === 'object' && typeof parsed.status === 'string') body = parsed
      } catch {
        // Not JSON: the node is not answering as a node.
      }
      return { status: res.statusCode, body }
    } catch (e) {
      return { status: 0, body: null, error: describe(e) }
    }
  }

  async complete(baseUrl: string, body: CompletionRequest, signal: AbortSignal): Promise<NodeReply> {
    const t = this.tracing
    if (t === null) return this.call(baseUrl, body, signal, {})
    // One span per call: a retry on another node is a second one.
    const parent = t.active()
    const url = new URL(baseUrl + COMPLETIONS_PATH)
    const span = t.tracer.startSpan(
      `POST ${COMPLETIONS_PATH}`,
      {
        kind: SpanKind.CLIENT,
        startTime: epochNow(),
        attributes: {
          'http.request.method': 'POST',
          'url.full': url.href,
          'server.address': url.hostname,
          'server.port': Number(url.port || (url.protocol === 'https:' ? 443 : 80)),
          'gen_ai.request.model': body.model,
          ...(body.request_id !== undefined ? { 'onnxd.request_id': body.request_id } : {}),
          'onnxd.stream': body.stream === true,
        },
      },
      parent,
    )
    const headers: Record<string, string> = {}
    t.inject(trace.setSpan(parent, span), headers)
    // A stream the caller never reads (another choice failed first) still ends its span, when the call is aborted.
    let ended = false
    const onAbort = (): void => {
      if (ended) return
      ended = true
      endCall(span, null, 'cancelled')
    }
    signal.addEventListener('abort', onAbort, { once: true })
    const off = (): void => signal.removeEventListener('abort', onAbort)
    const finish = (status: number | null, failure: string | null, usage?: Usage): void => {
      off()
      if (ended) return
      ended = true
      endCall(span, status, failure, usage)
    }
    let reply: NodeReply
    try {
      reply = await this.call(baseUrl, body, signal, headers)
    } catch (e) {
      finish(null, 'cancelled')
      throw e
    }
    switch (reply.kind) {
      case 'json':
        finish(200, null, reply.body.usage)
        return reply
      case 'stream':
        return { kind: 'stream', events: tracedEvents(reply.events, signal, finish) }
      case 'error':
        finish(reply.status, String(reply.status))
        return reply
      case 'unreachable':
        finish(null, reply.message)
        return reply
    }
  }

  async tokenize(baseUrl: string, body: TokenizeRequest, signal: AbortSignal): Promise<TokenizeReply> {
    const res = await this.post(baseUrl + TOKENIZE_PATH, body, 'application/json', signal, {})
    if ('kind' in res) return res
    if (res.statusCode !== 200) return this.failure(res, signal)
    return this.json<TokenizeResponse>(res, signal)
  }

  private async call(baseUrl: string, body: CompletionRequest, signal: AbortSignal, traceHeaders: Record<string, string>): Promise<NodeReply> {
    const res = await this.post(baseUrl + COMPLETIONS_PATH, body, body.stream ? 'text/event-stream' : 'application/json', signal, traceHeaders)
    if ('kind' in res) return res
    if (res.statusCode !== 200) return this.failure(res, signal)
    if (body.stream) return { kind: 'stream', events: streamEvents(res.body) }
    return this.json<CompletionResponse>(res, signal)
  }

  /** POSTs `body` as JSON; a transport failure comes back as the reply it means (throws only when `signal` aborted). */
  private async post(url: string, body: object, accept: string, signal: AbortSignal, headers: Record<string, string>): Promise<Dispatcher.ResponseData | NodeFailure> {
    try {
      return await request(url, {
        dispatcher: this.agent,
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json', accept },
        body: JSON.stringify(body),
        signal,
      })
    } catch (e) {
      if (signal.aborted) throw e
      const why = describe(e)
      // Never connected: the node is down. Connected, then lost: a transient failure of the node (retried once).
      if (NOT_CONNECTED.has(why)) return { kind: 'unreachable', message: why }
      return { kind: 'error', status: 500, message: `connection to the node failed: ${why}` }
    }
  }

  /** A 200's JSON body; one that cannot be read is the node's failure (500). */
  private async json<T>(res: Dispatcher.ResponseData, signal: AbortSignal): Promise<{ kind: 'json'; body: T } | NodeFailure> {
    try {
      return { kind: 'json', body: (await res.body.json()) as T }
    } catch (e) {
      if (signal.aborted) throw e
      return { kind: 'error', status: 500, message: `unreadable response from the node: ${describe(e)}` }
    }
  }

  /** A node's error answer: its status, the message of its error object, and its Retry-After. */
  private async failure(res: Dispatcher.ResponseData, signal: AbortSignal): Promise<NodeFailure> {
    let message = `the node answered ${res.statusCode}`
    try {
      const j = (await res.body.json()) as { error?: { message?: unknown } }
      if (typeof j?.error?.message === 'string') message = j.error.message
    } catch (e) {
      if (signal.aborted) throw e
    }
    const retryAfter = Number(res.headers['retry-after'])
    return {
      kind: 'error',
      status: res.statusCode,
      message,
      ...(Number.isFinite(retryAfter) && retryAfter > 0 ? { retryAfterS: retryAfter } : {}),
    }
  }

  async close(): Promise<void> {
    await this.agent.close()
  }
}
