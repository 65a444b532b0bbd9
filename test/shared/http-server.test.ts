// Issue #10: what both servers answer beneath their routes, over real sockets. Node's HTTP parser failures, bad
// URLs, over-long path parameters, oversized and deeply nested bodies, 503 while closing: every answer is the
// spec's error object with `code` equal to the status, and its message is bounded.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DISCARD_LIMIT_BYTES, MAX_JSON_DEPTH, nestsDeeperThan } from '../../src/shared/http-server.js'
import { clip, codeForStatus, errorBody, errorStatus, MESSAGE_CHARS, quote } from '../../src/shared/errors.js'
import { errorOf, RawConnection, rawRequest } from '../helpers/raw-http.js'
import { bearer, chatBody, deferred, facadeFixture, type FacadeFixture } from '../helpers/facade.js'
import { completionBody, listen, testNode, type TestNode } from '../node/helpers.js'

/** Body limit of both servers here: room for a body nested 20,000 levels deep. */
const LIMIT = 64 * 1024

interface Server {
  name: string
  base: () => string
  /** A POST route that reads a JSON body, and the headers it needs. */
  post: string
  headers: () => Record<string, string>
  body: (extra?: Record<string, unknown>) => Record<string, unknown>
}

let node: TestNode
let nodeBase: string
let f: FacadeFixture
let facadeBase: string

beforeAll(async () => {
  node = testNode({}, { options: { bodyLimit: LIMIT } })
  nodeBase = await listen(node.app)
  f = await facadeFixture({ options: { bodyLimit: LIMIT } })
  facadeBase = await f.app.listen({ port: 0, host: '127.0.0.1' })
})
afterAll(async () => {
  await node.app.close()
  await f.close()
})

const SERVERS: Server[] = [
  { name: 'node', base: () => nodeBase, post: '/internal/v1/completions', headers: () => ({}), body: completionBody },
  { name: 'facade', base: () => facadeBase, post: '/v1/chat/completions', headers: () => bearer(f.key), body: chatBody },
]

const head = (lines: string[]): string => `${lines.join('\r\n')}\r\n\r\n`
const headerLines = (h: Record<string, string>): string[] => Object.entries(h).map(([k, v]) => `${k}: ${v}`)

describe.each(SERVERS)('$name', (s) => {
  it('answers a malformed request line with 400 in the error object', async () => {
    const r = await rawRequest(s.base(), head(['GARBAGE']))
    expect(r.status).toBe(400)
    expect(errorOf(r)).toMatchObject({ type: 'invalid_request_error', message: expect.stringContaining('not valid HTTP/1.1') })
  })

  it('answers conflicting Content-Length and Transfer-Encoding with 400', async () => {
    const r = await rawRequest(s.base(), `${head([`POST ${s.post} HTTP/1.1`, 'Host: x', 'Content-Length: 5', 'Transfer-Encoding: chunked'])}0\r\n\r\n`)
    expect(r.status).toBe(400)
    expect(errorOf(r).type).toBe('invalid_request_error')
  })

  it('answers headers over 16 KB with 431', async () => {
    const r = await rawRequest(s.base(), head(['GET /health HTTP/1.1', 'Host: x', `X-Big: ${'a'.repeat(20_000)}`]))
    expect(r.status).toBe(431)
    expect(errorOf(r)).toMatchObject({ type: 'invalid_request_error', message: 'The request line and headers exceed 16384 bytes' })
  })

  it('answers %ff in the path with 400, without echoing the path', async () => {
    const r = await rawRequest(s.base(), head([`GET /v1/${'%ff'.repeat(100)} HTTP/1.1`, 'Host: x']))
    expect(r.status).toBe(400)
    expect(errorOf(r).message).not.toContain('%ff')
  })

  it('answers an unknown long path with 404 quoting only its start', async () => {
    const r = await rawRequest(s.base(), head([`GET /${'p'.repeat(10_000)} HTTP/1.1`, 'Host: x']))
    expect(r.status).toBe(404)
    expect(errorOf(r).message.length).toBeLessThan(100)
  })

  it('refuses a body nested deeper than the bound with 400, before any code walks it', async () => {
    const deep = `${'['.repeat(20_000)}"x"${']'.repeat(20_000)}` // messages[0].content, 20,000 levels down
    const body = JSON.stringify(s.body({ messages: [{ role: 'user', content: 'DEEP' }] })).replace('"DEEP"', deep)
    expect(body.length).toBeLessThan(LIMIT)
    const res = await fetch(`${s.base()}${s.post}`, { method: 'POST', headers: { 'content-type': 'application/json', ...s.headers() }, body })
    expect(res.status).toBe(400)
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain(`deeper than ${MAX_JSON_DEPTH} levels`)
  })

  it('answers 413 to an oversized upload without resetting it: the client finishes sending, reads the 413, and can reuse the connection', async () => {
    const c = new RawConnection(s.base())
    try {
      const size = 8 * 1024 * 1024
      await c.write(head([`POST ${s.post} HTTP/1.1`, 'Host: x', 'Content-Type: application/json', `Content-Length: ${size}`, ...headerLines(s.headers())]))
      const answer = c.next()
      const chunk = Buffer.alloc(64 * 1024, 0x20)
      for (let sent = 0; sent < size; sent += chunk.length) await c.write(chunk)
      const r = await answer
      expect(r.status).toBe(413)
      expect(errorOf(r)).toMatchObject({ type: 'invalid_request_error', message: `The request body exceeds the limit of ${LIMIT} bytes` })
      // The body was read and dropped: the same connection serves the next request.
      await c.write(head(['GET /no-such-route HTTP/1.1', 'Host: x']))
      expect((await c.next()).status).toBe(404)
    } finally {
      c.close()
    }
  })

  it('issue #32: answers 413 to an oversized upload sent with Connection: close, every time, and closes only after the client has it', async () => {
    const size = 256 * LIMIT
    const body = Buffer.alloc(size, 0x20)
    for (let i = 0; i < 20; i++) {
      const c = new RawConnection(s.base())
      try {
        // Headers and the whole body in one go, as a client that does not wait for an early answer sends them.
        const request = Buffer.concat([
          Buffer.from(head([`POST ${s.post} HTTP/1.1`, 'Host: x', 'Content-Type: application/json', `Content-Length: ${size}`, 'Connection: close', ...headerLines(s.headers())])),
          body,
        ])
        const sent = c.write(request).then(
          () => null,
          (e: NodeJS.ErrnoException) => e.code ?? e.message,
        )
        const r = await c.next()
        expect(r.status).toBe(413)
        expect(errorOf(r).code).toBe(413)
        expect(r.headers.connection).toBe('close')
        // The upload was read to its end (no EPIPE), and the connection then closed without a reset.
        expect(await sent).toBeNull()
        expect(await c.closed).toBeNull()
      } finally {
        c.close()
      }
    }
  })

  it('answers 413 to an oversized chunked upload and keeps the connection', async () => {
    const c = new RawConnection(s.base())
    try {
      await c.write(head([`POST ${s.post} HTTP/1.1`, 'Host: x', 'Content-Type: application/json', 'Transfer-Encoding: chunked', ...headerLines(s.headers())]))
      const answer = c.next()
      const piece = ' '.repeat(1024)
      for (let i = 0; i < 2 * (LIMIT / 1024); i++) await c.write(`${piece.length.toString(16)}\r\n${piece}\r\n`)
      await c.write('0\r\n\r\n')
      expect(errorOf(await answer).code).toBe(413)
      await c.write(head(['GET /no-such-route HTTP/1.1', 'Host: x']))
      expect((await c.next()).status).toBe(404)
    } finally {
      c.close()
    }
  })

  it('answers Expect: 100-continue over the limit with 413 instead of 100 Continue, so the body is never sent', async () => {
    const c = new RawConnection(s.base())
    try {
      await c.write(head([`POST ${s.post} HTTP/1.1`, 'Host: x', 'Content-Type: application/json', `Content-Length: ${LIMIT * 100}`, 'Expect: 100-continue', ...headerLines(s.headers())]))
      const r = await c.next()
      expect(r.status).toBe(413)
      errorOf(r)
      expect(await c.closed).toBeNull()
    } finally {
      c.close()
    }
  })

  it('still sends 100 Continue for a body within the limit', async () => {
    const c = new RawConnection(s.base())
    try {
      const body = JSON.stringify(s.body({ model: 42 }))
      await c.write(head([`POST ${s.post} HTTP/1.1`, 'Host: x', 'Content-Type: application/json', `Content-Length: ${body.length}`, 'Expect: 100-continue', ...headerLines(s.headers())]))
      expect((await c.next()).status).toBe(100)
      await c.write(body)
      const r = await c.next()
      // A model of the wrong type: the node's contract calls it a malformed body, the spec (the facade) a bad value.
      expect(r.status).toBe(s.name === 'facade' ? 422 : 400)
      errorOf(r)
    } finally {
      c.close()
    }
  })

  it('quotes a short prefix of a huge wrong-typed value', async () => {
    const res = await fetch(`${s.base()}${s.post}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...s.headers() },
      body: JSON.stringify({ ...s.body(), temperature: 'k'.repeat(3000) }),
    })
    expect([400, 422]).toContain(res.status)
    const e = ((await res.json()) as { error: { message: string; code: number } }).error
    expect(e.code).toBe(res.status)
    expect(e.message.length).toBeLessThan(200)
  })
})

describe('node', () => {
  it('names an unknown field by a short prefix only', async () => {
    const key = 'k'.repeat(3000)
    const res = await fetch(`${nodeBase}/internal/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...completionBody(), [key]: 1 }),
    })
    expect(res.status).toBe(400)
    expect(((await res.json()) as { error: { message: string } }).error.message).toBe(`Unknown field '${clip(key)}'`)
  })

  it('reads and drops at most DISCARD_LIMIT_BYTES of a body it has already answered, then closes the connection', async () => {
    const c = new RawConnection(nodeBase)
    try {
      const declared = 4 * DISCARD_LIMIT_BYTES
      await c.write(head(['POST /internal/v1/completions HTTP/1.1', 'Host: x', 'Content-Type: application/json', `Content-Length: ${declared}`]))
      expect((await c.next()).status).toBe(413)
      let sent = 0
      let closed = false
      void c.closed.then(() => (closed = true))
      const chunk = Buffer.alloc(1024 * 1024)
      while (!closed && sent < declared) {
        try {
          await c.write(chunk)
        } catch {
          break
        }
        sent += chunk.length
      }
      await c.closed
      // The server read the limit and a little of what was in flight (socket buffers), then closed.
      expect(sent).toBeGreaterThanOrEqual(DISCARD_LIMIT_BYTES)
      expect(sent).toBeLessThan(2 * DISCARD_LIMIT_BYTES)
    } finally {
      c.close()
    }
  })
})

describe('facade', () => {
  it('answers Expect: 100-continue without a credential with 401 and closes, without asking for the body', async () => {
    const c = new RawConnection(facadeBase)
    try {
      await c.write(head(['POST /v1/chat/completions HTTP/1.1', 'Host: x', 'Content-Type: application/json', `Content-Length: ${LIMIT * 100}`, 'Expect: 100-continue']))
      const r = await c.next()
      expect(r.status).toBe(401)
      expect(r.headers.connection).toBe('close')
      expect(errorOf(r).type).toBe('authentication_error')
      expect(await c.closed).toBeNull()
    } finally {
      c.close()
    }
  })

  it('answers an over-long key id in DELETE /v1/account/keys/{id} with 414', async () => {
    const r = await rawRequest(facadeBase, head([`DELETE /v1/account/keys/${'k'.repeat(500)} HTTP/1.1`, 'Host: x', `Authorization: Bearer ${await f.token()}`]))
    expect(r.status).toBe(414)
    expect(errorOf(r)).toMatchObject({ type: 'invalid_request_error', message: 'A path parameter is longer than 256 characters' })
  })

  it('answers a 500 KB profile name with a 422 naming the field and the bound, quoting 40 characters', async () => {
    const big = await facadeFixture({ options: { bodyLimit: 1024 * 1024 } })
    try {
      const name = 'n'.repeat(500_000)
      const res = await big.app.inject({ method: 'PATCH', url: '/v1/account/profile', headers: bearer(await big.token()), payload: { name } })
      expect(res.statusCode).toBe(422)
      const e = res.json<{ error: { message: string; code: number } }>().error
      expect(e.code).toBe(422)
      expect(e.message).toContain("'name'")
      expect(e.message).toContain('200')
      expect(e.message).toContain(`${quote(name)}`)
      expect(e.message.length).toBeLessThan(200)
    } finally {
      await big.close()
    }
  })

  it('answers a 100 KB unknown model name with a bounded 422', async () => {
    const res = await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody({ model: 'm'.repeat(3000) }) })
    expect(res.statusCode).toBe(422)
    expect(res.json<{ error: { message: string } }>().error.message.length).toBeLessThan(100)
  })

  it('answers requests that arrive while it closes with 503 and Retry-After, in the error object', async () => {
    const closing = deferred<void>()
    const g = await facadeFixture({
      options: { logLevel: 'info' },
      deps: { logStream: { write: (line: string) => void (line.includes('closing:') && closing.resolve()) } },
    })
    const base = await g.app.listen({ port: 0, host: '127.0.0.1' })
    const c = new RawConnection(base)
    try {
      // One request held in flight keeps the connection (and the server) open while the app closes.
      const hold = g.nodes[0]!.holdNext(0)
      const body = JSON.stringify(chatBody())
      await c.write(`${head(['POST /v1/chat/completions HTTP/1.1', 'Host: x', 'Content-Type: application/json', `Content-Length: ${body.length}`, `Authorization: Bearer ${g.key}`])}${body}`)
      await hold.reached
      const closed = g.app.close()
      await closing.promise
      await c.write(head(['GET /v1/models HTTP/1.1', 'Host: x', `Authorization: Bearer ${g.key}`]))
      hold.release()
      expect((await c.next()).status).toBe(200)
      const refused = await c.next()
      expect(refused.status).toBe(503)
      expect(errorOf(refused).type).toBe('service_unavailable')
      expect(refused.headers['retry-after']).toBe('1')
      await closed
    } finally {
      c.close()
      await g.close()
    }
  })
})

describe('shared helpers', () => {
  it('nestsDeeperThan counts the top level as 1 and never recurses', () => {
    expect(nestsDeeperThan({ a: [{ b: 1 }] }, 3)).toBe(false)
    expect(nestsDeeperThan({ a: [{ b: [] }] }, 3)).toBe(true)
    expect(nestsDeeperThan('x', 0)).toBe(false)
    let deep: unknown = 1
    for (let i = 0; i < 200_000; i++) deep = { d: deep }
    expect(nestsDeeperThan(deep, MAX_JSON_DEPTH)).toBe(true)
  })

  it('quote shows a short prefix of strings and describes arrays and objects', () => {
    expect(quote('abc')).toBe('"abc"')
    expect(quote('x'.repeat(1000))).toBe(`"${'x'.repeat(40)}"… (1000 characters)`)
    expect(quote([1, 2])).toBe('an array of 2 items')
    expect(quote({ a: 1 })).toBe('an object')
    expect(quote(undefined)).toBe('nothing')
    expect(quote(1.5)).toBe('1.5')
  })

  it('maps every status of the table back to a code of that status', () => {
    for (const status of [400, 401, 402, 404, 408, 413, 414, 422, 429, 431, 500, 503]) expect(errorStatus(codeForStatus(status))).toBe(status)
    expect(codeForStatus(414)).toBe('uri_too_long')
    expect(codeForStatus(431)).toBe('headers_too_large')
    expect(codeForStatus(418)).toBe('invalid_request')
    expect(codeForStatus(502)).toBe('internal')
  })

  it('cuts any message to MESSAGE_CHARS characters', () => {
    expect(errorBody('invalid_value', 'x'.repeat(100_000)).error.message).toHaveLength(MESSAGE_CHARS + 1)
  })
})
