// The node's one error handler and not-found handler: every failure, from a route, the engine or fastify itself,
// leaves as the spec's error object with the status and type of src/shared/errors.ts. Imports: shared errors.
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { Type } from '@sinclair/typebox'
import { errorBody, errorStatus, isOnnxdError, OnnxdError, type ErrorBody, type ErrorCode } from '../../shared/errors.js'

/** The spec's error object as a response schema. */
export const ErrorBodySchema = Type.Object({
  error: Type.Object({ message: Type.String(), type: Type.String(), code: Type.Integer() }),
})

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

/** Fastify's own client errors (body parsing, limits, validation) in the spec's words; null for anything else. */
export function fromFastifyError(e: FastifyError): OnnxdError | null {
  switch (e.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new OnnxdError('invalid_request', 'The request body is not valid JSON')
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new OnnxdError('invalid_request', 'The request body is empty; a JSON object is required')
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      // The spec has no 415: a body that is not JSON is a malformed request body.
      return new OnnxdError('invalid_request', 'The request body must be JSON (Content-Type: application/json)')
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new OnnxdError('payload_too_large', 'The request body is larger than this node accepts')
    case 'FST_ERR_VALIDATION':
      return new OnnxdError('invalid_request', validationMessage(e))
  }
  if (e instanceof SyntaxError) return new OnnxdError('invalid_request', 'The request body is not valid JSON')
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
    return new OnnxdError(e.statusCode === 413 ? 'payload_too_large' : e.statusCode === 404 ? 'not_found' : 'invalid_request', e.message)
  }
  return null
}

/** One sentence naming the field: "Missing required field 'model'", "Unknown field 'foo'", "'max_tokens' must be integer". */
function validationMessage(e: FastifyError): string {
  const v = e.validation?.[0]
  if (!v) return e.message
  const path = v.instancePath ? v.instancePath.slice(1).replace(/\//g, '.') : ''
  const params = v.params as { missingProperty?: string; additionalProperty?: string }
  switch (v.keyword) {
    case 'required':
      return `Missing required field '${path ? `${path}.` : ''}${String(params.missingProperty)}'`
    case 'additionalProperties':
      return `Unknown field '${path ? `${path}.` : ''}${String(params.additionalProperty)}'`
  }
  if (!path) return `The request body ${v.message ?? 'is invalid'}`
  return `'${path}' ${v.message ?? 'is invalid'}`
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

/** Installs the error and not-found handlers on `app`; `onFailure` hears each error code answered (for metrics). */
export function registerErrorHandlers(app: FastifyInstance, onFailure: (code: ErrorCode, request: FastifyRequest) => void = () => {}): void {
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const known = isOnnxdError(error) ? error : fromFastifyError(error)
    const err = known ?? new OnnxdError('internal', 'unhandled error')
    const http = toHttpError(err)
    logFailure(request, known ?? error, http.status)
    onFailure(err.code, request)
    return sendError(reply, http)
  })
  app.setNotFoundHandler((request, reply) => {
    const err = new OnnxdError('not_found', `Unknown route: ${request.method} ${request.url.split('?')[0]}`)
    return sendError(reply, toHttpError(err))
  })
}
