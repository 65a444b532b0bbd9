// Issue #10, seeded fuzz: the real facade in front of the real node (engine pool, tiny default model), both on real
// sockets, take ~2,000 hostile requests on every route: malformed HTTP, random bytes, truncated and deeply nested
// JSON, wrong types, huge values, oversized bodies, bad and missing credentials. No answer is a 5xx; every error
// is the spec's error object with `code` equal to the status; every success is well-formed; both servers are
// ready afterwards. A failure prints the seed (replay: ONNXD_FUZZ_SEED=<seed>) and the requests that failed.
import { createHmac, randomInt } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { request as undiciRequest } from 'undici'
import type { FastifyInstance } from 'fastify'
import { createEnginePool } from '../src/engine/pool/pool.js'
import type { EngineClient } from '../src/engine/index.js'
import { Rng } from '../src/shared/prng.js'
import { createApiKey } from '../src/facade/accounts.js'
import { buildNode } from '../src/node/app.js'
import { createMetrics, createRegistry } from '../src/node/plugins/metrics.js'
import { tinyPlainModelDir } from './helpers/fixtures.js'
import { facadeFixture, TEST_SECRET, type FacadeFixture } from './helpers/facade.js'
import { RawConnection, type RawResponse } from './helpers/raw-http.js'
import { listen, testOptions } from './node/helpers.js'

const REQUESTS = 2000
const CONCURRENCY = 8
const MODEL = 'onnxd-tiny'
const FACADE_LIMIT = 1024 * 1024 // the defaults of both servers
const NODE_LIMIT = 4 * 1024 * 1024

// ---- seeded choices ----

class Fuzz {
  constructor(private readonly rng: Rng) {}
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.rng.next() * (hi - lo + 1))
  }
  chance(p: number): boolean {
    return this.rng.next() < p
  }
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(0, xs.length - 1)]!
  }
  bytes(n: number): Buffer {
    const b = Buffer.alloc(n)
    for (let i = 0; i < n; i++) b[i] = this.int(0, 255)
    return b
  }
  printable(n: number): string {
    let s = ''
    for (let i = 0; i < n; i++) s += String.fromCharCode(this.int(0x21, 0x7e))
    return s
  }
  /** Any JSON value, at most `depth` levels deep. */
  value(depth = 2): unknown {
    const kind = this.int(0, depth > 0 ? 9 : 6)
    switch (kind) {
      case 0: return null
      case 1: return this.chance(0.5)
      case 2: return this.pick([0, -1, 1, 2, 1.5, -0.5, 1e308, -1e308, 2 ** 53, 2 ** 63, 1e-300])
      case 3: return this.printable(this.int(0, 20))
      case 4: return this.pick(['', ' ', 'user', 'assistant', MODEL, '\u0000', '\ud800', '😀', '<|endoftext|>', '{{ raise }}'])
      case 5: return 'x'.repeat(this.pick([1000, 100_000, 300_000]))
      case 6: return this.int(-10, 10)
      case 7: return Array.from({ length: this.int(0, 4) }, () => this.value(depth - 1))
      case 8: return Object.fromEntries(Array.from({ length: this.int(0, 3) }, () => [this.printable(this.int(1, 8)), this.value(depth - 1)]))
      default: return { role: this.value(0), content: this.value(0) }
    }
  }
}

/** `value` wrapped in `depth` arrays or objects, as JSON text (never built as an object: it would be too deep to stringify). */
function nested(f: Fuzz, depth: number, inner = '"x"'): string {
  const arrays = f.chance(0.5)
  return arrays ? `${'['.repeat(depth)}${inner}${']'.repeat(depth)}` : `${'{"a":'.repeat(depth)}${inner}${'}'.repeat(depth)}`
}

// ---- credentials ----

const b64url = (x: unknown): string => Buffer.from(typeof x === 'string' ? x : JSON.stringify(x)).toString('base64url')
function jwt(header: Record<string, unknown>, payload: Record<string, unknown>, secret = TEST_SECRET): string {
  const data = `${b64url(header)}.${b64url(payload)}`
  return `${data}.${createHmac('sha256', secret).update(data).digest('base64url')}`
}

interface Creds {
  key: string
  token: string
  limitedKey: string
  revokedKey: string
  /** A key of an account with no credit (402). */
  brokeKey: string
  otherAccountToken: string
  accountId: string
  throwawayKeyIds: string[]
}

function authHeader(f: Fuzz, c: Creds, want: 'key' | 'session' | 'any'): string | undefined {
  const now = Math.floor(Date.now() / 1000)
  const good = want === 'key' ? c.key : want === 'session' ? c.token : f.pick([c.key, c.token])
  // Mostly the right credential, so that bodies get checked too.
  if (f.chance(0.6)) return `Bearer ${good}`
  return f.pick<() => string | undefined>([
    () => undefined,
    () => `Bearer ${want === 'key' ? c.token : c.key}`, // the wrong kind
    () => `Bearer sk-svc-${f.printable(30).replace(/[^\w]/g, 'a')}`,
    () => 'Bearer sk-svc-short',
    () => `Bearer ${c.limitedKey}`,
    () => `Bearer ${c.revokedKey}`,
    () => `Bearer ${c.brokeKey}`,
    () => `Bearer ${c.otherAccountToken}`,
    () => 'Basic dXNlcjpwYXNz',
    () => 'Bearer',
    () => 'Bearer ',
    () => `Bearer ${f.printable(f.int(1, 8000))}`,
    () => `bearer ${good}`,
    () => `Bearer ${good}x`,
    () => `Bearer ${jwt({ alg: 'none', typ: 'JWT' }, { sub: c.accountId, exp: now + 600 }).split('.').slice(0, 2).join('.')}.`,
    () => `Bearer ${jwt({ alg: 'HS256', typ: 'JWT' }, { sub: c.accountId, exp: now - 600 })}`,
    () => `Bearer ${jwt({ alg: 'HS256', typ: 'JWT' }, { sub: c.accountId, exp: 1e300 })}`,
    () => `Bearer ${jwt({ alg: 'HS256', typ: 'JWT' }, { sub: c.accountId, exp: now + 600, iat: now + 86_400 })}`,
    () => `Bearer ${jwt({ alg: 'HS256', typ: 'JWT' }, { sub: c.accountId })}`,
    () => `Bearer ${jwt({ alg: 'HS256', typ: 'JWT' }, { sub: 'acct_nobody', exp: now + 600 })}`,
    () => `Bearer ${jwt({ alg: 'HS256', typ: 'JWT' }, { sub: c.accountId, exp: now + 600 }, 'wrong-secret-wrong-secret-wrong-secret')}`,
    () => `Bearer ${jwt({ alg: 'RS256', typ: 'JWT' }, { sub: c.accountId, exp: now + 600 })}`,
    () => `Bearer ${jwt({ alg: 'HS256', typ: 'JWT' }, { sub: 'x'.repeat(5000), exp: now + 600 })}`,
    () => `Bearer ${b64url(f.printable(50))}.${b64url(f.printable(50))}.${b64url(f.printable(10))}`,
  ])()
}

// ---- requests ----

interface Case {
  i: number
  target: 'facade' | 'node'
  /** A well-formed HTTP request (undici), or raw bytes on a socket. */
  kind: 'http' | 'raw'
  method: string
  path: string
  headers: Record<string, string>
  body?: string | Buffer
  raw?: Buffer
  /** Runs inference: counted, and kept to 1-2 tokens. */
  inference: boolean
}

function describeCase(c: Case): string {
  const show = (b: string | Buffer | undefined): string =>
    b === undefined ? '' : ` body(${b.length} B)=${JSON.stringify((typeof b === 'string' ? b : b.toString('latin1')).slice(0, 160))}`
  if (c.kind === 'raw') return `#${c.i} ${c.target} raw${show(c.raw)}`
  const headers = Object.entries(c.headers).map(([k, v]) => `${k}: ${v.length > 60 ? `${v.slice(0, 60)}…(${v.length})` : v}`)
  return `#${c.i} ${c.target} ${c.method} ${c.path.slice(0, 120)}${c.path.length > 120 ? '…' : ''} [${headers.join('; ')}]${show(c.body)}`
}

const chatBase = (f: Fuzz): Record<string, unknown> => ({
  model: MODEL,
  messages: [{ role: 'user', content: f.pick(['hi', 'Say hello', 'x', '1 2 3']) }],
  max_tokens: f.int(1, 2),
  ...(f.chance(0.3) ? { stream: true } : {}),
  ...(f.chance(0.2) ? { temperature: 0 } : {}),
})

const nodeBase = (f: Fuzz): Record<string, unknown> => {
  const input = f.pick<Record<string, unknown>>([
    { messages: [{ role: 'user', content: 'hi' }] },
    { prompt: f.pick(['hello', 'x', '']) },
    { input_ids: [1, 2, 3] },
  ])
  return { model: MODEL, ...input, max_tokens: f.int(1, 2), ...(f.chance(0.3) ? { stream: true } : {}) }
}

/** Fields whose values are never prompt text, so a huge or odd value there cannot make the engine work hard. */
const CHAT_FIELDS = ['model', 'messages', 'max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'top_k', 'min_p', 'seed', 'stop', 'presence_penalty', 'frequency_penalty', 'repetition_penalty', 'ignore_eos', 'min_tokens', 'n', 'logprobs', 'stream', 'stream_options', 'user', 'tools']
const NODE_FIELDS = ['model', 'messages', 'prompt', 'input_ids', 'max_tokens', 'temperature', 'top_p', 'top_k', 'min_p', 'seed', 'stop', 'ignore_eos', 'min_tokens', 'stream', 'request_id', 'repetition_penalty']
/** Values that would pass validation and make a prompt large, or generate many tokens: replaced before sending. */
function tame(body: Record<string, unknown>, node: boolean): void {
  for (const k of ['max_tokens', 'max_completion_tokens']) {
    const v = body[k]
    if (typeof v === 'number' && Number.isInteger(v) && v > 2 && v <= 100_000) body[k] = 2
  }
  if (typeof body.min_tokens === 'number' && body.min_tokens > 2 && body.min_tokens <= 100_000) body.min_tokens = 2
  if (typeof body.prompt === 'string' && body.prompt.length > 100) body.prompt = 'x'
  if (node && Array.isArray(body.input_ids) && body.input_ids.length > 64) body.input_ids = [1]
  const messages = body.messages
  if (Array.isArray(messages)) {
    if (messages.length > 16) body.messages = messages.slice(0, 16)
    // Message text of every shape stays short; wrong types stay wrong.
    body.messages = (body.messages as unknown[]).map((m) =>
      m && typeof m === 'object' && !Array.isArray(m)
        ? Object.fromEntries(Object.entries(m).map(([k, v]) => [k, typeof v === 'string' && v.length > 100 ? 'x' : v]))
        : m,
    )
  }
  if (Array.isArray(body.stop)) body.stop = (body.stop as unknown[]).map((s) => (typeof s === 'string' && s.length > 100 ? 'x' : s))
}

/** A JSON body for a chat or node completion: valid, mutated, truncated, nested, random, or oversized. */
function completionBody(f: Fuzz, node: boolean): { body: string | Buffer; inference: boolean } {
  const limit = node ? NODE_LIMIT : FACADE_LIMIT
  const base = node ? nodeBase(f) : chatBase(f)
  const fields = node ? NODE_FIELDS : CHAT_FIELDS
  const shape = f.int(0, 99)
  if (shape < 12) return { body: JSON.stringify(base), inference: true }
  if (shape < 50) {
    const b = { ...base }
    for (let n = f.int(1, 3); n > 0; n--) {
      const k = f.chance(0.9) ? f.pick(fields) : f.printable(f.int(1, f.pick([8, 3000])))
      if (f.chance(0.15)) delete b[k]
      else b[k] = f.value()
    }
    tame(b, node)
    return { body: JSON.stringify(b), inference: true }
  }
  if (shape < 60) {
    const s = JSON.stringify(base)
    return { body: s.slice(0, f.int(0, s.length - 1)), inference: false }
  }
  if (shape < 72) {
    const depth = f.pick([63, 64, 65, 100, 1000, 10_000, 100_000])
    const inner = nested(f, depth)
    const where = f.int(0, 3)
    const s =
      where === 0 ? JSON.stringify({ ...base, messages: [{ role: 'user', content: 'DEEP' }] }).replace('"DEEP"', inner)
      : where === 1 ? JSON.stringify({ ...base, model: 'DEEP' }).replace('"DEEP"', inner)
      : where === 2 ? JSON.stringify({ ...base, temperature: 'DEEP' }).replace('"DEEP"', inner)
      : inner
    return { body: s, inference: false }
  }
  if (shape < 80) return { body: f.bytes(f.int(0, 2000)), inference: false }
  if (shape < 85) return { body: f.pick(['', 'null', '[]', '"x"', '1', 'true', '{}', '{"model":null}', '{"__proto__":{"x":1}}', '{"constructor":{"prototype":{"x":1}}}']), inference: false }
  if (shape < 93) {
    // Huge values where they are refused before inference: the model name, unknown fields, wrong types.
    const size = f.pick([10_000, 200_000, limit - 4096])
    const b: Record<string, unknown> = { ...base }
    const where = f.int(0, 2)
    if (where === 0) b.model = 'm'.repeat(size)
    else if (where === 1) b[`k${'k'.repeat(f.pick([100, 10_000]))}`] = 'v'.repeat(size)
    else b.temperature = 't'.repeat(size)
    return { body: JSON.stringify(b), inference: false }
  }
  // Over the body limit.
  return { body: JSON.stringify({ ...base, pad: 'p'.repeat(limit + f.int(1, 100_000)) }), inference: false }
}

function otherBody(f: Fuzz): string | Buffer | undefined {
  const shape = f.int(0, 9)
  if (shape < 3) return undefined
  if (shape < 6) return JSON.stringify(f.value(3))
  if (shape < 7) return f.bytes(f.int(1, 500))
  if (shape < 8) return nested(f, f.pick([65, 5000, 50_000]))
  if (shape < 9) return JSON.stringify({ name: 'n'.repeat(f.pick([200, 201, 500_000])), email: f.pick(['a@b.co', 'bad', 'e'.repeat(1000)]) })
  return JSON.stringify({ name: f.value(1), rpm_limit: f.value(1), email: f.value(1) })
}

const CONTENT_TYPES = ['application/json', 'application/json; charset=utf-8', 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/json; charset=latin1', 'garbage', 'application/vnd.api+json']

function httpCase(f: Fuzz, i: number, c: Creds): Case {
  const target = f.chance(0.7) ? 'facade' : 'node'
  const headers: Record<string, string> = {}
  let method: string
  let path: string
  let body: string | Buffer | undefined
  let inference = false
  if (target === 'node') {
    const r = f.int(0, 9)
    if (r < 7) {
      method = f.chance(0.9) ? 'POST' : f.pick(['GET', 'PUT', 'DELETE'])
      path = '/internal/v1/completions'
      ;({ body, inference } = completionBody(f, true))
    } else {
      method = f.pick(['GET', 'GET', 'POST', 'DELETE', 'OPTIONS'])
      path = f.pick(['/health', '/health/live', '/metrics', '/internal/v1', '/v1/models', `/${f.printable(f.int(1, 200)).replace(/[?#%]/g, 'x')}`])
      body = f.chance(0.2) ? otherBody(f) : undefined
    }
  } else {
    const r = f.int(0, 99)
    let want: 'key' | 'session' | 'any' = 'key'
    if (r < 45) {
      method = f.chance(0.92) ? 'POST' : f.pick(['GET', 'PUT', 'PATCH', 'DELETE'])
      path = f.pick(['/v1/chat/completions', '/v1/chat/completions', '/v1/chat/completions?x=1', '/v1/chat/completions/'])
      ;({ body, inference } = completionBody(f, false))
    } else if (r < 55) {
      method = f.pick(['GET', 'GET', 'POST', 'DELETE'])
      path = f.pick(['/v1/models', `/v1/models/${MODEL}`, `/v1/models/${encodeURIComponent(f.printable(f.int(1, 300)))}`, '/v1/models/'])
    } else if (r < 63) {
      method = 'GET'
      path = f.pick(['/v1/usage', '/v1/usage?start_date=2024-01-01&end_date=2024-12-31', `/v1/usage?start_date=${encodeURIComponent(f.printable(f.int(1, 3000)))}`, '/v1/usage?start_date=2024-13-45', '/v1/usage?end_date[]=1'])
    } else if (r < 93) {
      want = 'session'
      const route = f.int(0, 6)
      if (route === 0) [method, path] = [f.pick(['GET', 'PATCH', 'PATCH', 'POST']), '/v1/account/profile']
      else if (route === 1) [method, path] = [f.pick(['GET', 'POST', 'POST', 'PUT']), '/v1/account/keys']
      else if (route === 2) {
        method = 'DELETE'
        path = `/v1/account/keys/${f.pick([...c.throwawayKeyIds, 'key_nope', encodeURIComponent(f.printable(f.int(1, 400))), ''])}`
      } else if (route === 3) [method, path] = ['GET', '/v1/account/billing']
      else if (route === 4) [method, path] = ['GET', f.pick(['/v1/account/usage', '/v1/account/usage?start_date=2024-01-01', `/v1/account/usage?end_date=${f.printable(40).replace(/[&#]/g, 'x')}`])]
      else if (route === 5) [method, path] = [f.pick(['GET', 'POST']), f.pick(['/v1/account', '/v1/account/', '/v1/account/keys/a/b'])]
      else [method, path] = ['PATCH', '/v1/account/profile']
      if (method !== 'GET' && method !== 'DELETE') body = otherBody(f)
      else if (f.chance(0.1)) body = otherBody(f)
    } else {
      want = 'any'
      method = f.pick(['GET', 'POST', 'TRACE', 'OPTIONS'])
      path = f.pick(['/health', '/', '/v1', '/v2/chat/completions', '/v1/completions', `/${f.printable(f.int(1, 300)).replace(/[?#%]/g, 'x')}`])
      if (f.chance(0.2)) body = otherBody(f)
    }
    const auth = authHeader(f, c, want)
    if (auth !== undefined) headers.authorization = auth
  }
  if (body !== undefined || f.chance(0.2)) {
    const ct = f.chance(0.8) ? 'application/json' : f.pick(CONTENT_TYPES)
    if (!f.chance(0.05)) headers['content-type'] = ct
  }
  if (f.chance(0.1)) headers['x-request-id'] = f.pick(['abc', 'x'.repeat(200), f.printable(30)])
  if (f.chance(0.05)) headers.accept = f.pick(['text/event-stream', '*/*', 'application/xml'])
  if (f.chance(0.03)) headers['accept-encoding'] = 'gzip, br'
  if (f.chance(0.03)) headers['x-filler'] = 'f'.repeat(f.int(1000, 12_000))
  // TRACE with a body and GET/HEAD bodies are still sent: servers must cope.
  return { i, target, kind: 'http', method, path, headers, body, inference: inference && method === 'POST' }
}

/** A request that is not valid HTTP, or that hits the parser's and router's own limits. */
function rawCase(f: Fuzz, i: number, c: Creds): Case {
  const target = f.chance(0.6) ? 'facade' : 'node'
  const host = 'Host: 127.0.0.1'
  const auth = `Authorization: Bearer ${target === 'facade' ? c.token : 'x'}`
  const lines = f.pick<() => string>([
    () => 'GARBAGE\r\n\r\n',
    () => `${f.printable(f.int(1, 200))}\r\n\r\n`,
    () => `\x01${f.bytes(f.int(1, 300)).toString('latin1')}\r\n\r\n`,
    () => `GET / HTTP/9.9\r\n${host}\r\n\r\n`,
    () => `GET /health HTTP/1.1\r\n${host}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
    () => `POST /v1/chat/completions HTTP/1.1\r\n${host}\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello`,
    () => `POST /v1/chat/completions HTTP/1.1\r\n${host}\r\nContent-Length: -1\r\n\r\n`,
    () => `POST /internal/v1/completions HTTP/1.1\r\n${host}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n`,
    () => `GET /health HTTP/1.1\r\n${host}\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
    () => `GET /health HTTP/1.1\r\n${host}\r\n${Array.from({ length: 2000 }, (_, n) => `X-H${n}: v`).join('\r\n')}\r\n\r\n`,
    () => `GET /${'p'.repeat(17_000)} HTTP/1.1\r\n${host}\r\n\r\n`,
    () => `GET /v1/${f.pick(['%ff', '%', '%zz', '%c3%28', '%ff%fe'])} HTTP/1.1\r\n${host}\r\n\r\n`,
    () => `GET /v1/models/${f.pick(['%ff', '%e0%80'])} HTTP/1.1\r\n${host}\r\n${auth}\r\n\r\n`,
    () => `DELETE /v1/account/keys/${'k'.repeat(f.int(257, 5000))} HTTP/1.1\r\n${host}\r\n${auth}\r\n\r\n`,
    () => `GET /v1/models/${'m'.repeat(f.int(257, 5000))} HTTP/1.1\r\n${host}\r\n${auth}\r\n\r\n`,
    () => `GET /health HTTP/1.1\r\n${host}\r\nBad Header: x\r\n\r\n`,
    () => `GET /health HTTP/1.1\r\n${host}\r\nX-Nul: a\x00b\r\n\r\n`,
    () => `GET /health HTTP/1.1\r\n${host}\r\n : empty name\r\n\r\n`,
    () => `GET http://127.0.0.1/health HTTP/1.1\r\n${host}\r\n\r\n`,
    () => `POST /v1/chat/completions HTTP/1.1\r\n${host}\r\n${auth}\r\nExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: ${FACADE_LIMIT * 10}\r\n\r\n`,
  ])()
  return { i, target, kind: 'raw', method: '', path: '', headers: {}, raw: Buffer.from(lines, 'latin1'), inference: false }
}

// ---- sending and checking ----

interface Answer {
  status: number
  contentType: string
  body: string
}

async function sendHttp(base: string, c: Case): Promise<Answer> {
  const res = await undiciRequest(`${base}${c.path}`, {
    method: c.method as 'GET',
    headers: c.headers,
    body: c.body,
    signal: AbortSignal.timeout(30_000),
  })
  return { status: res.statusCode, contentType: String(res.headers['content-type'] ?? ''), body: await res.body.text() }
}

async function sendRaw(base: string, c: Case): Promise<Answer> {
  const conn = new RawConnection(base)
  conn.socket.setTimeout(30_000, () => conn.close())
  try {
    await conn.write(c.raw!)
    let r: RawResponse = await conn.next()
    if (r.status === 100) r = await conn.next()
    return { status: r.status, contentType: r.headers['content-type'] ?? '', body: r.body }
  } finally {
    conn.close()
  }
}

/** What is wrong with an answer, or null. */
function problemOf(c: Case, a: Answer): string | null {
  if (a.status >= 500) return `status ${a.status}: ${a.body.slice(0, 300)}`
  if (a.status >= 400) {
    let parsed: unknown
    try {
      parsed = JSON.parse(a.body)
    } catch {
      return `status ${a.status} with a body that is not JSON: ${JSON.stringify(a.body.slice(0, 200))}`
    }
    const e = (parsed as { error?: Record<string, unknown> }).error
    const keys = Object.keys(parsed as object)
    if (!e || keys.length !== 1 || typeof e.message !== 'string' || typeof e.type !== 'string' || e.code !== a.status) {
      return `status ${a.status} not in the error object with code ${a.status}: ${a.body.slice(0, 300)}`
    }
    if (!['invalid_request_error', 'authentication_error', 'payment_required', 'rate_limit_error'].includes(e.type)) return `unexpected type ${e.type}`
    // Far below the cap errorBody applies (MESSAGE_CHARS): a message this long quotes a value whole somewhere.
    if (e.message.length > 300) return `message of ${e.message.length} characters: ${e.message.slice(0, 100)}…`
    return null
  }
  if (a.status < 200) return `status ${a.status}`
  // A success: an SSE stream that ends with [DONE] and carries no error, JSON without `error`, or metrics text.
  if (a.contentType.startsWith('text/event-stream')) {
    const frames = a.body.split('\n\n').filter((x) => x !== '')
    if (frames.at(-1) !== 'data: [DONE]') return `stream does not end with [DONE]: ${JSON.stringify(a.body.slice(-200))}`
    for (const fr of frames.slice(0, -1)) {
      if (!fr.startsWith('data: ')) return `not an SSE data frame: ${JSON.stringify(fr.slice(0, 100))}`
      const ev = JSON.parse(fr.slice(6)) as Record<string, unknown>
      if ('error' in ev) return `error event in a stream: ${fr.slice(0, 300)}`
    }
    return null
  }
  if (a.contentType.startsWith('text/plain')) return c.path.startsWith('/metrics') || c.kind === 'raw' ? null : `text answer: ${a.body.slice(0, 100)}`
  if (c.method === 'HEAD' || a.status === 204) return null
  try {
    const v = JSON.parse(a.body) as unknown
    if (v === null || typeof v !== 'object' || 'error' in v) return `success body is not a result: ${a.body.slice(0, 200)}`
  } catch {
    return `success body is not JSON: ${JSON.stringify(a.body.slice(0, 200))}`
  }
  return null
}

async function runAll<T>(items: T[], concurrency: number, fn: (t: T) => Promise<void>): Promise<void> {
  let next = 0
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < items.length) await fn(items[next++]!)
    }),
  )
}

describe('fuzz: the facade and the node under hostile input (issue #10)', () => {
  let engine: EngineClient
  let node: FastifyInstance
  let nodeUrl: string
  let f: FacadeFixture
  let facadeUrl: string
  let creds: Creds

  beforeAll(async () => {
    const metrics = createMetrics(createRegistry(), MODEL, 'cpu')
    engine = createEnginePool({ modelDir: tinyPlainModelDir(), modelId: MODEL, workers: 1, intraOpThreads: 1 }, metrics.observer)
    node = buildNode(testOptions({ logLevel: 'silent' }), { engine, metrics })
    nodeUrl = await listen(node)
    await engine.ready()
    // Rate limits off for the main key (one key with a limit of 1 covers 429).
    f = await facadeFixture({ nodeUrls: [nodeUrl], options: { keyRpm: 0, fleetRpm: 0 } })
    facadeUrl = await f.app.listen({ port: 0, host: '127.0.0.1' })
    const other = await f.newAccount()
    const revoked = await createApiKey(f.store, f.account.id)
    await f.store.revokeKey(f.account.id, revoked.id)
    const throwaway = [await createApiKey(f.store, f.account.id), await createApiKey(f.store, f.account.id)]
    creds = {
      key: f.key,
      token: await f.token(),
      limitedKey: await f.newKey(f.account.id, 1),
      revokedKey: revoked.key!,
      brokeKey: await f.newKey((await f.newAccount(0)).id),
      otherAccountToken: await f.token(other.id),
      accountId: f.account.id,
      throwawayKeyIds: throwaway.map((k) => k.id),
    }
  })
  afterAll(async () => {
    await f?.close()
    await node?.close()
    await engine?.close()
  })

  it(`answers ${REQUESTS} hostile requests without a 5xx, each in the error object or a well-formed success`, async () => {
    const seed = process.env.ONNXD_FUZZ_SEED !== undefined ? Number(process.env.ONNXD_FUZZ_SEED) : randomInt(0, 2 ** 31)
    console.log(`fuzz seed ${seed} (replay with ONNXD_FUZZ_SEED=${seed})`)
    const fz = new Fuzz(new Rng(seed))
    const cases = Array.from({ length: REQUESTS }, (_, i) => (fz.chance(0.12) ? rawCase(fz, i, creds) : httpCase(fz, i, creds)))
    const failures: string[] = []
    const statuses = new Map<number, number>()
    let inference = 0
    await runAll(cases, CONCURRENCY, async (c) => {
      const base = c.target === 'facade' ? facadeUrl : nodeUrl
      let a: Answer
      try {
        a = c.kind === 'raw' ? await sendRaw(base, c) : await sendHttp(base, c)
      } catch (e) {
        failures.push(`${describeCase(c)}\n  -> no answer: ${(e as Error).message}`)
        return
      }
      statuses.set(a.status, (statuses.get(a.status) ?? 0) + 1)
      if (c.inference && a.status === 200) inference++
      const problem = problemOf(c, a)
      if (problem) failures.push(`${describeCase(c)}\n  -> ${problem}`)
    })
    console.log(`fuzz statuses ${JSON.stringify(Object.fromEntries([...statuses].sort((x, y) => x[0] - y[0])))}; ${inference} ran inference`)
    expect(failures, `seed ${seed}: ${failures.length} bad answers\n${failures.slice(0, 20).join('\n')}`).toEqual([])
    // Both servers serve on: the node's model is ready, and a real completion goes through the facade.
    const health = await undiciRequest(`${nodeUrl}/health`)
    expect(health.statusCode).toBe(200)
    expect(((await health.body.json()) as { status: string }).status).toBe('ready')
    const ok = await undiciRequest(`${facadeUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${creds.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
    })
    expect(ok.statusCode).toBe(200)
    await ok.body.dump()
    // Some of each kind actually ran: the fuzz reached the engine and the account routes.
    expect(inference).toBeGreaterThan(20)
    expect(statuses.get(200)).toBeGreaterThan(100)
  })
})
