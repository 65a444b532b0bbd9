// The facade's one error handler and not-found handler: every failure leaves as the spec's error object, with the
// status and type from the shared table (src/shared/errors.ts). Imports: shared errors, fastify types.
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { Type } from '@sinclair/typebox'
import { errorBody, errorStatus, isOnnxdError, OnnxdError, type ErrorCode } from '../shared/errors.js'

/** The spec's error object as a response schema. */
export const ErrorBodySchema = Type.Object({
  error: Type.Object({ message: Type.String(), type: Type.String(), code: Type.Integer() }),
})

/** The error code for an HTTP status that came from elsewhere (a node, fastify itself). */
export function codeForStatus(status: number): ErrorCode {
  switch (status) {
    case 400:
      return 'invalid_request'
    case 401:
      return 'unauthorized'
    case 402:
      return 'payment_required'
    case 404:
      return 'not_found'
    case 413:
      return 'payload_too_large'
    case 422:
      return 'invalid_value'
    case 429:
      return 'rate_limited'
    case 503:
      return 'no_healthy_node'
    default:
      return status >= 500 ? 'internal' : 'invalid_request'
  }
}

/** Fastify's own client errors (body parsing, limits) in the spec's words. */
function fromFastify(e: FastifyError, request: FastifyRequest): OnnxdError | null {
  switch (e.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new OnnxdError('invalid_request', 'The request body is not valid JSON')
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new OnnxdError('invalid_request', 'The request body is empty; a JSON object is required')
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new OnnxdError('invalid_request', 'Content-Type must be application/json')
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new OnnxdError('payload_too_large', `The request body exceeds the limit of ${request.routeOptions.bodyLimit} bytes`)
    case 'FST_ERR_VALIDATION': {
      // The body's shape (required fields, their basic types) is a 400; query and path values are 422.
      const context = (e as FastifyError & { validationContext?: string }).validationContext
      const v = e.validation?.[0]
      const where = v?.instancePath ? `'${v.instancePath.slice(1).replace(/\//g, '.')}'` : context
      let msg = v ? `${where} ${v.message ?? 'is invalid'}` : e.message
      if (v?.keyword === 'required') msg = `Missing required field '${String((v.params as { missingProperty?: string }).missingProperty)}'${v.instancePath ? ` in ${where}` : ''}`
      return new OnnxdError(context === 'body' ? 'invalid_request' : 'invalid_value', msg)
    }
  }
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
    return new OnnxdError(codeForStatus(e.statusCode), e.message)
  }
  // SyntaxError from a JSON parser without a fastify code.
  if (e instanceof SyntaxError && (e as { statusCode?: number }).statusCode === 400) {
    return new OnnxdError('invalid_request', 'The request body is not valid JSON')
  }
  return null
}

export function sendError(reply: FastifyReply, err: OnnxdError): FastifyReply {
  const status = errorStatus(err.code)
  const retry = err.details.retryAfterS
  if (retry !== undefined) reply.header('retry-after', String(Math.max(1, Math.ceil(retry))))
  // A passed-through node error keeps the node's status (e.g. 422 with its own message).
  return reply.code(status).send(errorBody(err.code, err.message))
}

export function facadeErrorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const known = isOnnxdError(error) ? error : fromFastify(error, request)
  if (known) {
    if (errorStatus(known.code) >= 500) request.log.error({ err: known }, known.message)
    return sendError(reply, known)
  }
  // Unknown failure: a generic 500; the detail goes to the log only.
  request.log.error({ err: error }, 'unhandled error')
  return sendError(reply, new OnnxdError('internal', 'Internal server error'))
}

export function facadeNotFoundHandler(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  return sendError(reply, new OnnxdError('not_found', `Unknown route: ${request.method} ${request.url.split('?')[0]}`))
}
