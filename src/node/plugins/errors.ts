// The node's one error handler and not-found handler: every failure, from a route, the engine or fastify itself,
// leaves as the spec's error object with the status and type of src/shared/errors.ts. Imports: shared errors.
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { fromFastifyError } from '../../shared/http-errors.js'
import { clip, errorBody, errorStatus, isOnnxdError, OnnxdError, type ErrorBody, type ErrorCode } from '../../shared/errors.js'
import type { AppErrorHandler } from '../../shared/http-server.js'

export { ErrorBodySchema } from '../../shared/http-errors.js'

/**
 * What clients see of a 5xx: a fixed sentence per code. Engine messages can carry paths, stack fragments or worker
 * details, so they go to the log only.
 */
const GENERIC_5XX: Partial<Record<ErrorCode, string>> = {
  internal: 'Internal server error',
  worker_crashed: 'The inference worker failed while running the request; retry it',
  bad_bundle: 'Internal server error',
  config: 'Internal server error',
  queue_full: 'The node is at capacity; retry later',
  not_ready: 'The node is not ready to serve requests (loading, draining or unhealthy); retry later',
  no_healthy_node: 'No healthy inference workers available',
}

/** An error as the HTTP surface answers it: status, body and the Retry-After header value (seconds) when any. */
export interface HttpError {
  status: number
  body: ErrorBody
  retryAfterS?: number
}

/** Codes whose answers tell clients when to come back (DESIGN: a full queue answers 503 with Retry-After). */
const RETRY_AFTER: ReadonlySet<ErrorCode> = new Set<ErrorCode>(['queue_full', 'not_ready', 'no_healthy_node', 'rate_limited'])

export function toHttpError(err: OnnxdError): HttpError {
  const status = errorStatus(err.code)
  const message = status >= 500 ? (GENERIC_5XX[err.code] ?? 'Internal server error') : err.message
  const out: HttpError = { status, body: errorBody(err.code, message) }
  if (RETRY_AFTER.has(err.code)) {
    const s = err.details.retryAfterS
    out.retryAfterS = Math.max(1, Math.ceil(typeof s === 'number' && Number.isFinite(s) ? s : 1))
  }
  return out
}

export function sendError(reply: FastifyReply, http: HttpError): FastifyReply {
  if (http.retryAfterS !== undefined) reply.header('retry-after', String(http.retryAfterS))
  return reply.code(http.status).type('application/json; charset=utf-8').send(http.body)
}

/** Logs a failure at the level it deserves: 5xx with detail (the client saw a generic sentence), 4xx briefly. */
export function logFailure(request: FastifyRequest, err: unknown, status: number): void {
  if (status >= 500) request.log.error({ err }, 'request failed')
  else request.log.info({ code: isOnnxdError(err) ? err.code : undefined, status }, isOnnxdError(err) ? err.message : 'request rejected')
}

/**
 * The node's error handler: every failure (a route's, the engine's, fastify's own) as the error object; `onFailure`
 * hears each error code answered (for metrics).
 */
export function nodeErrorHandler(onFailure: (code: ErrorCode, request: FastifyRequest) => void = () => {}): AppErrorHandler {
  return (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const known = isOnnxdError(error) ? error : fromFastifyError(error, request.routeOptions.bodyLimit)
    const err = known ?? new OnnxdError('internal', 'unhandled error')
    const http = toHttpError(err)
    logFailure(request, known ?? error, http.status)
    onFailure(err.code, request)
    return sendError(reply, http)
  }
}

/** Installs `onError` (see nodeErrorHandler) and the not-found handler on `app`. */
export function registerErrorHandlers(app: FastifyInstance, onError: AppErrorHandler = nodeErrorHandler()): void {
  app.setErrorHandler(onError)
  app.setNotFoundHandler((request, reply) => {
    const err = new OnnxdError('not_found', `Unknown route: ${request.method} ${clip(request.url.split('?')[0]!)}`)
    return sendError(reply, toHttpError(err))
  })
}
