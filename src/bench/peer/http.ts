// What the benchmark's minimal node:http servers share (the transformers.js and llama.cpp peers, the facade bench's
// bare proxy): a request body read whole, a JSON answer, and an error in the node's error object. Imports: node:http
// types only.
import type { IncomingMessage, ServerResponse } from 'node:http'

/** The request's body, read whole, as UTF-8 text. */
export async function bodyText(req: IncomingMessage): Promise<string> {
  const parts: Buffer[] = []
  for await (const c of req) parts.push(c as Buffer)
  return Buffer.concat(parts).toString('utf8')
}

/** Answers `status` with `body` as JSON. */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body))
}

/** Answers `status` with `{ error: { message, type, code } }` (type: invalid_request_error below 500, else server_error). */
export function sendJsonError(res: ServerResponse, status: number, message: string): void {
  sendJson(res, status, { error: { message, type: status < 500 ? 'invalid_request_error' : 'server_error', code: status } })
}
