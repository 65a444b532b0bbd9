// What the node and the facade share beneath their routes, so that every answer keeps the spec's error object:
// failures of Node's HTTP parser (clientError), fastify's own URL and path-parameter failures (frameworkErrors),
// the JSON body parser with its nesting bound, `Expect: 100-continue`, the 503 for requests that arrive while the
// server closes, and what becomes of a request body that an early answer (401, 413, …) left unread.
// Imports: shared errors, fastify types, node:http.
import { maxHeaderSize, STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify'
import { clip, errorBody, errorStatus, OnnxdError, type ErrorCode } from './errors.js'
import { MAX_PARAM_LENGTH } from './http-errors.js'

/**
 * pino's redaction for both servers: credential and cookie headers are never logged, whatever a serializer or a
 * careless log call (`log.info({ headers })`) adds.
 */
export const LOG_REDACT = {
  paths: ['req.headers.authorization', 'req.headers["x-api-key"]', 'req.headers.cookie', 'headers.authorization', 'headers["x-api-key"]', 'headers.cookie'],
  censor: '[redacted]',
}

/** Arrays and objects nested deeper than this in a request body are refused (400) before any code walks them. */
export const MAX_JSON_DEPTH = 64

/**
 * After an answer that went out before the body was read, at most this many more body bytes are read (and
 * dropped) so that the client, still sending, can read the answer; past it the connection is closed.
 */
export const DISCARD_LIMIT_BYTES = 64 * 1024 * 1024

/** After a malformed request is answered, the connection stays open this long for the client to read it. */
const CLIENT_ERROR_LINGER_MS = 2000

/** An app's error handler: what fastify's own failures outside any route are handed to. */
export type AppErrorHandler = (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => unknown

/** The fastify server options both servers take; `onError` is the app's own error handler. */
export function httpServerOptions(onError: AppErrorHandler): FastifyServerOptions {
  return {
    clientErrorHandler: onClientError,
    // A path that is not valid percent-encoding (FST_ERR_BAD_URL, 400) or a parameter over the limit
    // (FST_ERR_MAX_PARAM_LENGTH, 414): fastify answers these itself, in its own shape, unless handed over.
    frameworkErrors: (error, request, reply) => void onError(error, request as FastifyRequest, reply as FastifyReply),
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    // Fastify's own 503 while closing has its own shape; `refuseWhileClosing` (or the node's drain) answers instead.
    return503OnClosing: false,
  }
}

/** The code and message of a failure of Node's HTTP parser; the reason is llhttp's fixed text, never client bytes. */
function clientErrorOf(err: NodeJS.ErrnoException & { reason?: unknown }): { code: ErrorCode; message: string } {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return { code: 'headers_too_large', message: `The request line and headers exceed ${maxHeaderSize} bytes` }
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return { code: 'payload_too_large', message: 'The chunk extensions of the request body are too large' }
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return { code: 'request_timeout', message: 'The request headers did not arrive in time' }
  }
  const reason = typeof err.reason === 'string' ? `: ${clip(err.reason, 100)}` : ''
  return { code: 'invalid_request', message: `The request is not valid HTTP/1.1${reason}` }
}

/**
 * Node's `clientError`: the request could not be parsed, so no route or hook runs. Answers once, in the error
 * object, then half-closes and lets the client read the answer before the socket goes (closing at once, with the
 * client's bytes unread, would reset the connection and lose the answer).
 */
function onClientError(this: FastifyInstance, err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return
  const inFlight = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage
  // A response already begun on this socket (a pipelined request before it): nothing can be added cleanly.
  if (!socket.writable || socket.writableEnded || (inFlight && inFlight.headersSent)) {
    socket.destroy()
    return
  }
  const { code, message } = clientErrorOf(err)
  const status = errorStatus(code)
  const body = JSON.stringify(errorBody(code, message))
  this.log.debug({ code: err.code, status }, 'malformed request refused')
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  )
  socket.setTimeout(CLIENT_ERROR_LINGER_MS, () => socket.destroy())
  socket.once('end', () => socket.destroy())
}

/** True when arrays and objects in `value` nest deeper than `max` levels (the top level is 1). Iterative. */
export function nestsDeeperThan(value: unknown, max: number): boolean {
  const values: unknown[] = [value]
  const depths: number[] = [1]
  while (values.length > 0) {
    const v = values.pop()
    const depth = depths.pop()!
    if (v === null || typeof v !== 'object') continue
    if (depth > max) return true
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      if (child !== null && typeof child === 'object') {
        values.push(child)
        depths.push(depth + 1)
      }
    }
  }
  return false
}

/** Reads and drops what is left of a request body, closing the connection past DISCARD_LIMIT_BYTES. */
function discardBody(raw: IncomingMessage): void {
  let left = DISCARD_LIMIT_BYTES
  const onData = (chunk: Buffer): void => {
    left -= chunk.length
    if (left >= 0) return
    stop()
    raw.socket?.destroy()
  }
  const stop = (): void => {
    raw.off('data', onData)
    raw.off('end', stop)
    raw.off('close', stop)
  }
  // A 'data' listener also keeps Node from dumping the body itself once the answer is sent.
  raw.on('data', onData)
  raw.once('end', stop)
  raw.once('close', stop)
}

/**
 * Closes `socket` only once its client has stopped sending, when the server would otherwise close it (Node's
 * `destroySoon()`, after the last answer on a connection that does not stay open) while the client is still
 * uploading a body that was answered early (413 to `Connection: close`). A socket closed with unread bytes makes the
 * kernel reset the connection: the client's upload fails with EPIPE and the answer, already sent, can be dropped
 * before the client reads it. Instead the answer is sent and the connection half-closed, what the client still sends
 * is read and dropped (discardBody's bound applies), and the socket closes once the client ends too, or after it has
 * sent nothing for CLIENT_ERROR_LINGER_MS.
 */
function lingerOnClose(socket: Socket): void {
  socket.destroySoon = function lingeringClose(this: Socket): void {
    const close = (): void => {
      this.destroy()
    }
    this.end()
    this.setTimeout(CLIENT_ERROR_LINGER_MS, close)
    // Closed after the answer has gone to the kernel, and only when nothing is left unread.
    const whenSent = (): void => {
      if (this.readableEnded) close()
      else this.once('end', close)
    }
    if (this.writableFinished) whenSent()
    else this.once('finish', whenSent)
  }
}

/** fastify's default JSON parser: synchronous, answers through `done`. */
type JsonParser = (request: FastifyRequest, body: string, done: (err: Error | null, value?: unknown) => void) => void

export interface HardenOptions {
  /** The server's body limit, bytes: `Expect: 100-continue` above it is refused without reading the body. */
  bodyLimit: number
  /** Answer every request that arrives while the app closes with 503 and `Retry-After` (the facade). */
  refuseWhileClosing?: boolean
}

/**
 * Installs, on a fresh app: the JSON parser with its nesting bound, the `Expect: 100-continue` answer, the bound on
 * bodies discarded after an early answer, and (optionally) the 503 while closing. Call before any route.
 */
export function hardenHttp(app: FastifyInstance, opts: HardenOptions): void {
  // fastify's JSON parser (prototype-poisoning checks included), then the depth bound: JSON.parse itself does not
  // recurse, but JSON.stringify, schema checkers and message builders that later walk the value do.
  const parseJson = app.getDefaultJsonParser('error', 'error') as JsonParser
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    parseJson(request, body as string, (err, value) => {
      if (err) return done(err, undefined)
      if (nestsDeeperThan(value, MAX_JSON_DEPTH)) {
        return done(new OnnxdError('invalid_request', `The request body nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels`), undefined)
      }
      done(null, value)
    })
  })

  // Without a listener Node answers `100 Continue` to everything; a body declared over the limit is refused
  // instead, before the client sends it: the route's parser answers 413 from the Content-Length alone.
  const refusedContinue = (raw: IncomingMessage): boolean =>
    /100-continue/i.test(raw.headers.expect ?? '') && Number(raw.headers['content-length']) > opts.bodyLimit
  app.server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    if (!refusedContinue(req)) res.writeContinue()
    app.server.emit('request', req, res)
  })

  // An answer that goes out before its request's body was read (401 from a hook, 413, …). A client refused its
  // `100 Continue` sends no body: close the connection, as RFC 9110 asks of a server that will not read it.
  // Otherwise the body is on its way. fastify closes the connection after a body parser fails, and after a 413
  // that resets the connection under the client's upload, which then never reads the answer: keep the connection
  // (unless the client asked to close it), and read and drop the rest of the body here, up to DISCARD_LIMIT_BYTES
  // (Node would drop it unbounded). A connection that closes after the answer closes only once the client has
  // stopped sending (lingerOnClose), with or without `Connection: close` from the client.
  app.addHook('onSend', async (request, reply) => {
    const raw = request.raw
    if (raw.complete || raw.destroyed) return
    if (refusedContinue(raw)) reply.header('connection', 'close')
    else if (reply.statusCode === 413 && reply.raw.shouldKeepAlive) reply.removeHeader('connection')
    discardBody(raw)
    const closes = !reply.raw.shouldKeepAlive || /\bclose\b/i.test(String(reply.getHeader('connection') ?? ''))
    if (closes && raw.socket) lingerOnClose(raw.socket)
  })

  // Once the app closes, a keep-alive connection is closed as soon as its last answer is sent: Node's server.close()
  // closes only the connections idle at that moment, and one that a client keeps open (a stream that ends during
  // the close) would hold the process until the keep-alive timeout, past any supervisor's stop timeout.
  // A connection that has not carried a request yet is not "idle" to Node 20's server.close() (nodejs/node#63452),
  // and one that a client's pool holds open in reserve would hold the close forever: those are destroyed at close.
  let closed = false
  const fresh = new Set<Socket>()
  app.server.on('connection', (socket: Socket) => {
    fresh.add(socket)
    socket.once('close', () => fresh.delete(socket))
  })
  app.addHook('preClose', async () => {
    closed = true
    for (const socket of fresh) socket.destroy()
  })
  app.server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    fresh.delete(req.socket)
    res.once('finish', () => {
      if (closed) setImmediate(() => app.server.closeIdleConnections())
    })
  })

  if (opts.refuseWhileClosing) {
    let closing = false
    app.addHook('preClose', async () => {
      closing = true
      app.log.info('closing: new requests are answered 503 with Retry-After')
    })
    app.addHook('onRequest', async () => {
      if (closing) throw new OnnxdError('not_ready', 'The server is shutting down; retry with backoff', { retryAfterS: 1, expose: true })
    })
  }
}
