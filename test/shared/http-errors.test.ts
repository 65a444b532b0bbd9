// The one error-to-HTTP policy both servers answer by (src/shared/http-errors.ts).
import { describe, expect, it } from 'vitest'
import { toHttpError } from '../../src/shared/http-errors.js'
import { OnnxdError } from '../../src/shared/errors.js'

describe('toHttpError', () => {
  it('shows a 4xx message, and hides a 5xx one behind its code\'s sentence unless it was written for clients', () => {
    expect(toHttpError(new OnnxdError('invalid_value', "'top_p' must be <= 1. Given: 2"))).toEqual({
      status: 422,
      body: { error: { message: "'top_p' must be <= 1. Given: 2", type: 'invalid_request_error', code: 422 } },
    })
    expect(toHttpError(new OnnxdError('internal', 'ENOENT /srv/models/x/onnx/model.onnx')).body.error.message).toBe('Internal server error')
    expect(toHttpError(new OnnxdError('worker_crashed', 'thread 7 exited')).body.error).toEqual({
      message: 'The inference worker failed while running the request; retry it',
      type: 'server_error',
      code: 500,
    })
    expect(toHttpError(new OnnxdError('internal', 'The backend failed; it is safe to retry', { expose: true })).body.error.message).toBe(
      'The backend failed; it is safe to retry',
    )
  })

  it('gives the retry codes Retry-After in whole seconds, at least 1, and no other code', () => {
    expect(toHttpError(new OnnxdError('queue_full', 'full')).retryAfterS).toBe(1)
    expect(toHttpError(new OnnxdError('rate_limited', 'slow down', { retryAfterS: 12.2 })).retryAfterS).toBe(13)
    expect(toHttpError(new OnnxdError('no_healthy_node', 'none', { retryAfterS: 0 })).retryAfterS).toBe(1)
    expect(toHttpError(new OnnxdError('invalid_value', 'bad', { retryAfterS: 5 })).retryAfterS).toBeUndefined()
  })
})
