// The facade's only way to a worker node: the internal HTTP contract (GET /health, POST /internal/v1/completions,
// JSON or SSE), spoken with undici over keep-alive connections. Imports: contract, shared errors.
import { StringDecoder } from 'node:string_decoder'
import { Agent, request } from 'undici'
import { COMPLETIONS_PATH, type CompletionRequest, type CompletionResponse, type StreamEvent } from '../contract/completions.js'
import { HEALTH_PATH, type HealthBody } from '../contract/health.js'

/** How a node answered a completion request. Transport failures before an answer are `unreachable`. */
export type NodeReply =
  | { kind: 'json'; body: CompletionResponse }
  /** Iterating yields the node's events up to `[DONE]`; it throws if the connection breaks; `return()` cancels. */
  | { kind: 'stream'; events: AsyncIterable<StreamEvent> }
  | { kind: 'error'; status: number; message: string; retryAfterS?: number }
  | { kind: 'unreachable'; message: string }

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
  close(): Promise<void>
}

export interface HttpNodeClientOptions {
  /** Longest wait for response headers and between two chunks of a body. */
  timeoutMs: number
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

export class HttpNodeClient implements NodeClient {
  private readonly agent: Agent

  constructor(opts: HttpNodeClientOptions) {
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
    let res: Awaited<ReturnType<typeof request>>
    try {
      res = await request(baseUrl + COMPLETIONS_PATH, {
        dispatcher: this.agent,
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: body.stream ? 'text/event-stream' : 'application/json' },
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

    if (res.statusCode === 200) {
      if (body.stream) return { kind: 'stream', events: streamEvents(res.body) }
      try {
        return { kind: 'json', body: (await res.body.json()) as CompletionResponse }
      } catch (e) {
        if (signal.aborted) throw e
        return { kind: 'error', status: 500, message: `unreadable response from the node: ${describe(e)}` }
      }
    }

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
