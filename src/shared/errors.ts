// The one error type of onnxd, its stable codes, and the spec's error object. Imports: nothing internal.

/**
 * Stable error codes. Their statuses and types are this table's (errorStatus, errorType, codeForStatus); how an
 * error is answered over HTTP (which message a 5xx shows, Retry-After) is the one policy of ./http-errors.ts.
 */
export type ErrorCode =
  | 'invalid_request' // 400: unparseable JSON, missing required fields
  | 'invalid_value' // 422: well-formed but invalid values (unknown model, out-of-range sampling values)
  | 'context_length_exceeded' // 422: prompt plus max_tokens over the model's context
  | 'unauthorized' // 401
  | 'payment_required' // 402
  | 'not_found' // 404: unknown route or resource
  | 'request_timeout' // 408: the request's headers did not arrive in time
  | 'payload_too_large' // 413: a body (or a chunk extension) over its limit
  | 'uri_too_long' // 414: a path segment over the router's parameter limit
  | 'headers_too_large' // 431: request headers over Node's header size limit
  | 'rate_limited' // 429
  | 'internal' // 500: transient backend failure
  | 'worker_crashed' // 500: the worker running the request died
  | 'queue_full' // 503: admission refused, retry later
  | 'not_ready' // 503: model loading, node draining or unhealthy
  | 'no_healthy_node' // 503: the facade has nowhere to send the request
  | 'store_unavailable' // 503: the facade's store (its database) cannot be reached; retry later
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

/**
 * One row per code. Statuses the spec's table does not list (404, 408, 413, 414, 431) are client errors of the
 * request itself, so they take the type of 400.
 */
const TABLE: Record<ErrorCode, { status: number; type: ErrorType }> = {
  invalid_request: { status: 400, type: 'invalid_request_error' },
  invalid_value: { status: 422, type: 'invalid_request_error' },
  context_length_exceeded: { status: 422, type: 'invalid_request_error' },
  unauthorized: { status: 401, type: 'authentication_error' },
  payment_required: { status: 402, type: 'payment_required' },
  not_found: { status: 404, type: 'invalid_request_error' },
  request_timeout: { status: 408, type: 'invalid_request_error' },
  payload_too_large: { status: 413, type: 'invalid_request_error' },
  uri_too_long: { status: 414, type: 'invalid_request_error' },
  headers_too_large: { status: 431, type: 'invalid_request_error' },
  rate_limited: { status: 429, type: 'rate_limit_error' },
  internal: { status: 500, type: 'server_error' },
  worker_crashed: { status: 500, type: 'server_error' },
  queue_full: { status: 503, type: 'service_unavailable' },
  not_ready: { status: 503, type: 'service_unavailable' },
  no_healthy_node: { status: 503, type: 'service_unavailable' },
  store_unavailable: { status: 503, type: 'service_unavailable' },
  bad_bundle: { status: 500, type: 'server_error' },
  config: { status: 500, type: 'server_error' },
}

export const ERROR_CODES = Object.keys(TABLE) as ErrorCode[]

export interface ErrorDetails {
  /** Seconds a client should wait before retrying (429, 503). */
  retryAfterS?: number
  /** The message was written for clients: a 5xx shows it rather than its code's fixed sentence (see http-errors.ts). */
  expose?: boolean
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

/** The first code of the table with each status: how a status that came from elsewhere (a node) is answered. */
const BY_STATUS = new Map<number, ErrorCode>()
for (const code of ERROR_CODES) if (!BY_STATUS.has(TABLE[code].status)) BY_STATUS.set(TABLE[code].status, code)

/** The error code for an HTTP status that came from elsewhere (a node, fastify itself). */
export function codeForStatus(status: number): ErrorCode {
  return BY_STATUS.get(status) ?? (status >= 500 ? 'internal' : 'invalid_request')
}

/** How much of a user's value a message may quote, in characters. */
export const QUOTE_CHARS = 40
/** The longest `error.message` any answer carries, in characters; longer ones are cut (a last line of defence). */
export const MESSAGE_CHARS = 500

/** `s` cut to `max` characters, with an ellipsis when cut: for names and paths a message quotes. */
export function clip(s: string, max = QUOTE_CHARS): string {
  return s.length <= max ? s : `${s.slice(0, max)}…`
}

/**
 * A user's value as a message may show it, never whole: strings as JSON cut to QUOTE_CHARS characters (with the
 * full length when cut), numbers and literals as written, arrays and objects only described. Never recurses, so a
 * deeply nested value cannot overflow the stack while a 4xx message is built.
 */
export function quote(v: unknown): string {
  if (typeof v === 'string') return v.length <= QUOTE_CHARS ? JSON.stringify(v) : `${JSON.stringify(v.slice(0, QUOTE_CHARS))}… (${v.length} characters)`
  if (v === undefined) return 'nothing'
  if (v === null || typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint') return String(v)
  return Array.isArray(v) ? `an array of ${v.length} items` : 'an object'
}

/** The spec's error object: `{ error: { message, type, code } }`, `code` equal to the HTTP status. */
export interface ErrorBody {
  error: { message: string; type: ErrorType; code: number }
}

/** The error object of `code`; the message is cut to MESSAGE_CHARS characters. */
export function errorBody(code: ErrorCode, message: string): ErrorBody {
  return { error: { message: clip(message, MESSAGE_CHARS), type: errorType(code), code: errorStatus(code) } }
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
