// The one error-to-HTTP policy of the node and the facade: an OnnxdError as status, the spec's error object and
// Retry-After (toHttpError, sendError), with statuses and types from the table in ./errors.ts; the error object
// as a response schema; fastify's own client errors in the spec's words. Imports: shared errors, fastify types.
import type { FastifyError, FastifyReply, FastifyRequest, FastifySchemaValidationError } from 'fastify'
import { Type } from '@sinclair/typebox'
import { clip, codeForStatus, errorBody, errorStatus, isOnnxdError, OnnxdError, type ErrorBody, type ErrorCode } from './errors.js'

export { codeForStatus }

/**
 * What clients see of a 5xx whose message was not written for them (see ErrorDetails.expose): a fixed sentence
 * per code. Engine messages can carry paths, stack fragments or worker details, so they go to the log only.
 */
const SERVER_SENTENCE: Partial<Record<ErrorCode, string>> = {
  internal: 'Internal server error',
  worker_crashed: 'The inference worker failed while running the request; retry it',
  bad_bundle: 'Internal server error',
  config: 'Internal server error',
  queue_full: 'The node is at capacity; retry later',
  not_ready: 'The node is not ready to serve requests (loading, draining or unhealthy); retry later',
  no_healthy_node: 'No healthy inference workers available',
  store_unavailable: 'The service is briefly unavailable (its database cannot be reached); retry with backoff',
}

/** Codes whose answers tell clients when to come back (DESIGN: a full queue answers 503 with Retry-After). */
const RETRY_AFTER: ReadonlySet<ErrorCode> = new Set<ErrorCode>(['queue_full', 'not_ready', 'no_healthy_node', 'store_unavailable', 'rate_limited'])

/** An error as both HTTP surfaces answer it: status, body and the Retry-After header value (seconds) when any. */
export interface HttpError {
  status: number
  body: ErrorBody
  retryAfterS?: number
}

/**
 * The policy: status and type from the table; a 4xx shows its message, a 5xx its code's fixed sentence unless
 * `details.expose` says the message was written for clients; the codes of RETRY_AFTER carry Retry-After in whole
 * seconds, at least 1 (`details.retryAfterS`, else 1).
 */
export function toHttpError(err: OnnxdError): HttpError {
  const status = errorStatus(err.code)
  const message = status < 500 || err.details.expose === true ? err.message : (SERVER_SENTENCE[err.code] ?? 'Internal server error')
  const out: HttpError = { status, body: errorBody(err.code, message) }
  if (RETRY_AFTER.has(err.code)) {
    const s = err.details.retryAfterS
    out.retryAfterS = Math.max(1, Math.ceil(typeof s === 'number' && Number.isFinite(s) ? s : 1))
  }
  return out
}

/** Answers `err` by the policy (toHttpError). */
export function sendError(reply: FastifyReply, err: OnnxdError): FastifyReply {
  const http = toHttpError(err)
  if (http.retryAfterS !== undefined) reply.header('retry-after', String(http.retryAfterS))
  return reply.code(http.status).type('application/json; charset=utf-8').send(http.body)
}

/**
 * What an error handler was handed, as an OnnxdError: ours as they are, fastify's own client errors in the spec's
 * words, anything else a generic internal error with `known: false` (a failure nobody described: log it whole).
 */
export function asOnnxdError(error: FastifyError, request: FastifyRequest): { err: OnnxdError; known: boolean } {
  if (isOnnxdError(error)) return { err: error, known: true }
  const described = fromFastifyError(error, request.routeOptions.bodyLimit)
  return described ? { err: described, known: true } : { err: new OnnxdError('internal', 'unhandled error'), known: false }
}

/** The 404 of a route neither server has; the path is quoted cut short and without its query. */
export function notFoundError(request: FastifyRequest): OnnxdError {
  return new OnnxdError('not_found', `Unknown route: ${request.method} ${clip(request.url.split('?')[0]!)}`)
}

/** The spec's error object as a response schema. */
export const ErrorBodySchema = Type.Object({
  error: Type.Object({ message: Type.String(), type: Type.String(), code: Type.Integer() }),
})

/** Fastify's router refuses path parameters longer than this (414); key and model ids are far shorter. */
export const MAX_PARAM_LENGTH = 256

/** One sentence naming the field: "Missing required field 'model'", "Unknown field 'foo'", "'max_tokens' must be integer". */
function validationMessage(v: FastifySchemaValidationError | undefined, fallback: string): string {
  if (!v) return fallback
  // Paths and property names can be the client's own keys: quoted cut short, like any value of theirs.
  const path = v.instancePath ? clip(v.instancePath.slice(1).replace(/\//g, '.')) : ''
  const params = v.params as { missingProperty?: string; additionalProperty?: string }
  const message = clip(v.message ?? 'is invalid', 200)
  switch (v.keyword) {
    case 'required':
      return `Missing required field '${path ? `${path}.` : ''}${clip(String(params.missingProperty))}'`
    case 'additionalProperties':
      return `Unknown field '${path ? `${path}.` : ''}${clip(String(params.additionalProperty))}'`
  }
  if (!path) return `The request body ${message}`
  return `'${path}' ${message}`
}

/**
 * The `/v1` facade's schema failures, by the spec's two rules (Endpoints, 1 and 2): a body that is not an object or
 * lacks a required field is a 400; a field it has, holding a value of the wrong type, is a 422 (`{"model": 7}`).
 * The facade's route schemas hold only the required fields and their types; every other value is checked after them
 * (422). The node's internal contract keeps 400 for any shape error of its body (fromFastifyError; docs/errors.md).
 * Fastify's `schemaErrorFormatter`.
 */
export function specSchemaError(errors: FastifySchemaValidationError[], context: string): OnnxdError {
  const v = errors[0]
  const shape = context === 'body' && (v === undefined || v.keyword === 'required' || v.instancePath === '')
  return new OnnxdError(shape ? 'invalid_request' : 'invalid_value', validationMessage(v, 'The request is invalid'))
}

/**
 * Fastify's own client errors in the spec's words; null for anything else. A body's shape (required fields, their
 * basic types, unknown fields) is a 400, as the node's contract says (the facade formats its own: specSchemaError);
 * query and path values are 422. `bodyLimit` names the limit in 413s.
 * Messages never carry the client's value: fastify's own messages for these quote the whole URL or content type.
 */
export function fromFastifyError(e: FastifyError, bodyLimit?: number): OnnxdError | null {
  switch (e.code) {
    case 'FST_ERR_BAD_URL':
      return new OnnxdError('invalid_request', 'The request path is not valid percent-encoded UTF-8')
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return new OnnxdError('uri_too_long', `A path parameter is longer than ${MAX_PARAM_LENGTH} characters`)
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new OnnxdError('invalid_request', 'The request body is not valid JSON')
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new OnnxdError('invalid_request', 'The request body is empty; a JSON object is required')
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      // The spec has no 415: a body that is not JSON is a malformed request body.
      return new OnnxdError('invalid_request', 'The request body must be JSON (Content-Type: application/json)')
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new OnnxdError('payload_too_large', `The request body exceeds the limit${bodyLimit ? ` of ${bodyLimit} bytes` : ''}`)
    case 'FST_ERR_VALIDATION': {
      const context = (e as FastifyError & { validationContext?: string }).validationContext
      return new OnnxdError(context === undefined || context === 'body' ? 'invalid_request' : 'invalid_value', validationMessage(e.validation?.[0], e.message))
    }
  }
  if (e instanceof SyntaxError) return new OnnxdError('invalid_request', 'The request body is not valid JSON')
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) return new OnnxdError(codeForStatus(e.statusCode), clip(e.message, 200))
  return null
}
