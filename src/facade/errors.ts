// The facade's one error handler and not-found handler: every failure leaves as the spec's error object, with the
// status and type from the shared table (src/shared/errors.ts). Imports: shared errors, fastify types.
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { fromFastifyError } from '../shared/http-errors.js'
import { clip, errorBody, errorStatus, isOnnxdError, OnnxdError } from '../shared/errors.js'

export { codeForStatus, ErrorBodySchema } from '../shared/http-errors.js'

export function sendError(reply: FastifyReply, err: OnnxdError): FastifyReply {
  const status = errorStatus(err.code)
  const retry = err.details.retryAfterS
  if (retry !== undefined) reply.header('retry-after', String(Math.max(1, Math.ceil(retry))))
  // A passed-through node error keeps the node's status (e.g. 422 with its own message).
  return reply.code(status).send(errorBody(err.code, err.message))
}

export function facadeErrorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const known = isOnnxdError(error) ? error : fromFastifyError(error, request.routeOptions.bodyLimit)
  if (known) {
    if (errorStatus(known.code) >= 500) request.log.error({ err: known }, known.message)
    return sendError(reply, known)
  }
  // Unknown failure: a generic 500; the detail goes to the log only.
  request.log.error({ err: error }, 'unhandled error')
  return sendError(reply, new OnnxdError('internal', 'Internal server error'))
}

export function facadeNotFoundHandler(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  return sendError(reply, new OnnxdError('not_found', `Unknown route: ${request.method} ${clip(request.url.split('?')[0]!)}`))
}
