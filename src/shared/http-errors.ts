// The HTTP side of the error table shared by the node and the facade: the error object as a response schema, and
// fastify's own client errors (body parsing, limits, validation) in the spec's words. Imports: shared errors.
import type { FastifyError } from 'fastify'
import { Type } from '@sinclair/typebox'
import { clip, codeForStatus, OnnxdError } from './errors.js'

export { codeForStatus }

/** The spec's error object as a response schema. */
export const ErrorBodySchema = Type.Object({
  error: Type.Object({ message: Type.String(), type: Type.String(), code: Type.Integer() }),
})

/** Fastify's router refuses path parameters longer than this (414); key and model ids are far shorter. */
export const MAX_PARAM_LENGTH = 256

/** One sentence naming the field: "Missing required field 'model'", "Unknown field 'foo'", "'max_tokens' must be integer". */
function validationMessage(e: FastifyError): string {
  const v = e.validation?.[0]
  if (!v) return e.message
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
 * Fastify's own client errors in the spec's words; null for anything else. A body's shape (required fields, their
 * basic types, unknown fields) is a 400; query and path values are 422. `bodyLimit` names the limit in 413s.
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
      return new OnnxdError(context === undefined || context === 'body' ? 'invalid_request' : 'invalid_value', validationMessage(e))
    }
  }
  if (e instanceof SyntaxError) return new OnnxdError('invalid_request', 'The request body is not valid JSON')
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) return new OnnxdError(codeForStatus(e.statusCode), clip(e.message, 200))
  return null
}
