// The node's error handler and not-found handler: every failure, from a route, the engine or fastify itself,
// leaves by the one error-to-HTTP policy (src/shared/http-errors.ts); each answered code is counted for metrics
// and logged at the level it deserves. Imports: shared errors.
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { asOnnxdError, notFoundError, sendError } from '../../shared/http-errors.js'
import { errorStatus, isOnnxdError, type ErrorCode } from '../../shared/errors.js'
import type { AppErrorHandler } from '../../shared/http-server.js'

/**
 * Logs a failure at the level it deserves: 5xx with detail (the client saw a generic sentence), except 503s, which
 * are back-pressure the client retries on (a full queue, draining, loading): those as a warning without a stack, as
 * the facade logs them; 4xx briefly.
 */
export function logFailure(request: FastifyRequest, err: unknown, status: number): void {
  if (status === 503 && isOnnxdError(err)) request.log.warn({ code: err.code, status }, err.message)
  else if (status >= 500) request.log.error({ err }, 'request failed')
  else request.log.info({ code: isOnnxdError(err) ? err.code : undefined, status }, isOnnxdError(err) ? err.message : 'request rejected')
}

/**
 * The node's error handler: every failure (a route's, the engine's, fastify's own) as the error object; `onFailure`
 * hears each error code answered (for metrics).
 */
export function nodeErrorHandler(onFailure: (code: ErrorCode, request: FastifyRequest) => void = () => {}): AppErrorHandler {
  return (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const { err, known } = asOnnxdError(error, request)
    logFailure(request, known ? err : error, errorStatus(err.code))
    onFailure(err.code, request)
    return sendError(reply, err)
  }
}

/** Installs `onError` (see nodeErrorHandler) and the not-found handler on `app`. */
export function registerErrorHandlers(app: FastifyInstance, onError: AppErrorHandler = nodeErrorHandler()): void {
  app.setErrorHandler(onError)
  app.setNotFoundHandler((request, reply) => sendError(reply, notFoundError(request)))
}
