// The one error type of onnxd, its stable codes, and the spec's error object. Imports: nothing internal.

/** Stable error codes. Every HTTP surface maps them through `errorStatus` / `errorType` below, and nowhere else. */
export type ErrorCode =
  | 'invalid_request' // 400: unparseable JSON, missing required fields
  | 'invalid_value' // 422: well-formed but invalid values (unknown model, out-of-range sampling values)
  | 'context_length_exceeded' // 422: prompt plus max_tokens over the model's context
  | 'unauthorized' // 401
  | 'payment_required' // 402
  | 'not_found' // 404: unknown route or resource
  | 'payload_too_large' // 413
  | 'rate_limited' // 429
  | 'internal' // 500: transient backend failure
  | 'worker_crashed' // 500: the worker running the request died
  | 'queue_full' // 503: admission refused, retry later
  | 'not_ready' // 503: model loading, node draining or unhealthy
  | 'no_healthy_node' // 503: the facade has nowhere to send the request
  | 'bad_bundle' // not an HTTP error: a model bundle that cannot be loaded
  | 'config' // not an HTTP error: invalid configuration

/** The spec's error types (spec "Errors"). */
export type ErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'payment_required'
  | 'rate_limit_error'
  | 'server_error'
  | 'service_unavailable'

const TABLE: Record<ErrorCode, { status: number; type: ErrorType }> = {
  invalid_request: { status: 400, type: 'invalid_request_error' },
  invalid_value: { status: 422, type: 'invalid_request_error' },
  context_length_exceeded: { status: 422, type: 'invalid_request_error' },
  unauthorized: { status: 401, type: 'authentication_error' },
  payment_required: { status: 402, type: 'payment_required' },
  not_found: { status: 404, type: 'invalid_request_error' },
  payload_too_large: { status: 413, type: 'invalid_request_error' },
  rate_limited: { status: 429, type: 'rate_limit_error' },
  internal: { status: 500, type: 'server_error' },
  worker_crashed: { status: 500, type: 'server_error' },
  queue_full: { status: 503, type: 'service_unavailable' },
  not_ready: { status: 503, type: 'service_unavailable' },
  no_healthy_node: { status: 503, type: 'service_unavailable' },
  bad_bundle: { status: 500, type: 'server_error' },
  config: { status: 500, type: 'server_error' },
}

export const ERROR_CODES = Object.keys(TABLE) as ErrorCode[]

export interface ErrorDetails {
  /** Seconds a client should wait before retrying (429, 503). */
  retryAfterS?: number
  [k: string]: unknown
}

export class OnnxdError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details: ErrorDetails = {},
  ) {
    super(message)
    this.name = 'OnnxdError'
  }
}

export function isOnnxdError(e: unknown): e is OnnxdError {
  return e instanceof Error && e.name === 'OnnxdError' && typeof (e as OnnxdError).code === 'string'
}

export const errorStatus = (code: ErrorCode): number => TABLE[code].status
export const errorType = (code: ErrorCode): ErrorType => TABLE[code].type

/** The spec's error object: `{ error: { message, type, code } }`, `code` equal to the HTTP status. */
export interface ErrorBody {
  error: { message: string; type: ErrorType; code: number }
}

export function errorBody(code: ErrorCode, message: string): ErrorBody {
  return { error: { message, type: errorType(code), code: errorStatus(code) } }
}

/** Errors cross worker threads as data (structured clone drops classes): this is their wire form. */
export interface ErrorData {
  code: ErrorCode
  message: string
  details?: ErrorDetails
}

export function toErrorData(e: unknown): ErrorData {
  if (isOnnxdError(e)) return { code: e.code, message: e.message, details: e.details }
  return { code: 'internal', message: e instanceof Error ? e.message : String(e) }
}

export function fromErrorData(d: ErrorData): OnnxdError {
  return new OnnxdError(d.code, d.message, d.details ?? {})
}
