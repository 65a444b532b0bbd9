// HTTP/1.1 over a bare TCP socket, for what fetch refuses to send or hides: malformed request lines, conflicting
// framing headers, oversized headers, pipelined requests, bodies still being uploaded when the answer comes.
import { connect, type Socket } from 'node:net'

export interface RawResponse {
  status: number
  /** Header names in lower case. */
  headers: Record<string, string>
  body: string
}

/** A connection that parses the responses it receives, in order. Call `close()` when done. */
export class RawConnection {
  readonly socket: Socket
  /** Resolves when the socket has closed (by either side), with the error that closed it, if any. */
  readonly closed: Promise<NodeJS.ErrnoException | null>
  #buf = Buffer.alloc(0)
  #wake: (() => void) | null = null
  #ended = false

  constructor(base: string) {
    const url = new URL(base)
    this.socket = connect(Number(url.port), url.hostname)
    let error: NodeJS.ErrnoException | null = null
    this.socket.on('error', (e: NodeJS.ErrnoException) => (error = e))
    this.closed = new Promise((resolve) => this.socket.once('close', () => resolve(error)))
    this.socket.on('data', (d: Buffer) => {
      this.#buf = Buffer.concat([this.#buf, d])
      this.#wake?.()
    })
    const end = (): void => {
      this.#ended = true
      this.#wake?.()
    }
    this.socket.once('end', end)
    this.socket.once('close', end)
  }

  /** Writes bytes; resolves once they are handed to the kernel (rejects if the socket failed). */
  write(data: string | Buffer): Promise<void> {
    return new Promise((resolve, reject) => this.socket.write(data, (e) => (e ? reject(e) : resolve())))
  }

  /** The next complete response (interim 1xx responses included); rejects if the socket ends before one arrives. */
  async next(): Promise<RawResponse> {
    for (;;) {
      const r = this.#parse()
      if (r) return r
      if (this.#ended) throw new Error(`connection ended before a full response; got ${JSON.stringify(this.#buf.toString('latin1').slice(0, 200))}`)
      await new Promise<void>((resolve) => (this.#wake = resolve))
      this.#wake = null
    }
  }

  close(): void {
    this.socket.destroy()
  }

  #parse(): RawResponse | null {
    const head = this.#buf.indexOf('\r\n\r\n')
    if (head < 0) return null
    const [statusLine, ...lines] = this.#buf.subarray(0, head).toString('latin1').split('\r\n')
    const status = Number(statusLine!.split(' ')[1])
    const headers: Record<string, string> = {}
    for (const l of lines) {
      const i = l.indexOf(':')
      headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim()
    }
    const length = status < 200 ? 0 : Number(headers['content-length'] ?? NaN)
    if (Number.isNaN(length)) {
      // No length: the body runs to the end of the connection.
      if (!this.#ended) return null
      const body = this.#buf.subarray(head + 4).toString('utf8')
      this.#buf = Buffer.alloc(0)
      return { status, headers, body }
    }
    if (this.#buf.length < head + 4 + length) return null
    const body = this.#buf.subarray(head + 4, head + 4 + length).toString('utf8')
    this.#buf = this.#buf.subarray(head + 4 + length)
    return { status, headers, body }
  }
}

/** Sends `request` on a fresh connection and returns the first response; the connection is then closed. */
export async function rawRequest(base: string, request: string | Buffer): Promise<RawResponse> {
  const c = new RawConnection(base)
  try {
    await c.write(request)
    return await c.next()
  } finally {
    c.close()
  }
}

/** Asserts the spec's error object with `code` equal to the status; returns the error for further checks. */
export function errorOf(r: RawResponse): { message: string; type: string; code: number } {
  const parsed = JSON.parse(r.body) as { error?: { message: string; type: string; code: number } }
  const e = parsed.error
  if (!e || typeof e.message !== 'string' || typeof e.type !== 'string' || e.code !== r.status || Object.keys(parsed).length !== 1) {
    throw new Error(`not the error object of a ${r.status}: ${r.body.slice(0, 300)}`)
  }
  return e
}
