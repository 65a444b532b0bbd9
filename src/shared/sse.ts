// One server-sent-events writer for the node's and the facade's streams: the headers (flushed at once, no
// Connection header of our own so a client's `Connection: close` is honoured), `data:` frames with backpressure,
// and the closing `data: [DONE]`. Imports: node:http types only.
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http'

export const SSE_DONE = 'data: [DONE]\n\n'

/** One `data:` frame of `payload` (already JSON). */
export const sseFrame = (payload: string): string => `data: ${payload}\n\n`

/** One frame of a named event (`event:` then `data:`), as typed streams (OpenAI Responses, Anthropic Messages) send them. */
export const sseEvent = (event: string, payload: string): string => `event: ${event}\ndata: ${payload}\n\n`

export class SseWriter {
  /**
   * Sends the 200 and the stream's headers now: the client learns of acceptance before the first token. A write
   * to a socket the client reset would otherwise raise an unhandled 'error' on the response: `onError` hears it.
   */
  constructor(
    private readonly res: ServerResponse,
    headers: OutgoingHttpHeaders,
    private readonly signal?: AbortSignal,
    onError: (err: Error) => void = () => {},
  ) {
    res.on('error', onError)
    // Keep swallowing late socket errors once the stream is over.
    res.once('close', () => {
      res.off('error', onError)
      res.on('error', () => {})
    })
    res.writeHead(200, {
      ...headers,
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      'x-accel-buffering': 'no', // proxies must not buffer the stream
    })
    res.flushHeaders()
  }

  /** Whether frames can still reach the client. */
  get open(): boolean {
    return !this.res.destroyed && !this.res.writableEnded
  }

  /**
   * Writes `text` (whole frames); on backpressure resolves on 'drain', the socket closing, or the signal aborting.
   * `onSent` runs once the text has left this process for the socket (Node's write callback without an error): until
   * then it may sit in the response's buffer, and a process killed meanwhile never sends it.
   */
  async write(text: string, onSent?: () => void): Promise<void> {
    if (!this.open) return
    if (this.res.write(text, onSent && ((err) => err || onSent())) || this.signal?.aborted) return
    await new Promise<void>((resolve) => {
      const done = (): void => {
        this.res.off('drain', done)
        this.res.off('close', done)
        this.signal?.removeEventListener('abort', done)
        resolve()
      }
      this.res.on('drain', done)
      this.res.on('close', done)
      this.signal?.addEventListener('abort', done)
    })
  }

  /** Writes one `data:` frame of `payload` (already JSON). */
  data(payload: string): Promise<void> {
    return this.write(sseFrame(payload))
  }

  /** `data: [DONE]`, then the end of the response. */
  done(): void {
    this.end(SSE_DONE)
  }

  /** `text` (the stream's closing frames), then the end of the response. */
  end(text: string): void {
    if (this.open) this.res.end(text)
  }
}
