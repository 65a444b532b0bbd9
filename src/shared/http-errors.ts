// The HTTP side of the error table shared by the node and the facade: the error object as a response schema, and
// fastify's own client errors (body parsing, limits, validation) in the spec's words. Imports: shared errors.
import type { FastifyError } from 'fastify'
import { Type } from '@sinclair/typebox'
import { OnnxdError, type ErrorCode } from './errors.js'

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

/**
 * Fastify's own client errors in the spec's words; null for anything else. A body's shape (required fields, their
 * basic types, unknown fields) is a 400; query and path values are 422. `bodyLimit` names the limit in 413s.
 */
export function fromFastifyError(e: FastifyError, bodyLimit?: number): OnnxdError | null {
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
      return new OnnxdError('payload_too_large', `The request body exceeds the limit${bodyLimit ? ` of ${bodyLimit} bytes` : ''}`)
    case 'FST_ERR_VALIDATION': {
      const context = (e as FastifyError & { validationContext?: string }).validationContext
      return new OnnxdError(context === undefined || context === 'body' ? 'invalid_request' : 'invalid_value', validationMessage(e))
    }
  }
  if (e instanceof SyntaxError) return new OnnxdError('invalid_request', 'The request body is not valid JSON')
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) return new OnnxdError(codeForStatus(e.statusCode), e.message)
  return null
}
