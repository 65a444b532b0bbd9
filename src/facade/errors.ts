// The facade's error handler and not-found handler: every failure leaves by the one error-to-HTTP policy
// (src/shared/http-errors.ts). A node's client error reaches here as the code of its status (codeForStatus, in the
// router), so it is answered with that code's status: the node's own where the table has it, else 400 or 500.
// Imports: shared errors, fastify types.
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { asOnnxdError, notFoundError, sendError } from '../shared/http-errors.js'
import { errorStatus } from '../shared/errors.js'

export function facadeErrorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const { err, known } = asOnnxdError(error, request)
  // 4xx are in the one log line per request; a 5xx's detail goes to the log only.
  if (!known) request.log.error({ err: error }, 'unhandled error')
  // A store outage is logged once, as it begins and ends (StoreHealth), not once per request it refuses.
  else if (err.code === 'store_unavailable') request.log.debug({ code: err.code }, err.message)
  // 503s are back-pressure the client retries on (no healthy node yet, a full queue, closing): a warning, without a stack.
  else if (errorStatus(err.code) === 503) request.log.warn({ code: err.code }, err.message)
  else if (errorStatus(err.code) >= 500) request.log.error({ err }, err.message)
  return sendError(reply, err)
}

export function facadeNotFoundHandler(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  return sendError(reply, notFoundError(request))
}
