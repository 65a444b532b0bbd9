// Closing a server does not wait on a client's keep-alive connection (issue #10: after SIGTERM, `onnxd serve` drained
// but stayed up until the keep-alive timeout, past docker stop's 10 s): an answer that ends after the server stopped
// listening is sent whole, and then the server closes its connection itself, though it offered keep-alive; a
// connection that never carried a request is closed at once, without a byte. Each client is a raw socket, so what it
// receives from the server (the answer, the server's end of the connection) is what the tests read.
import { once } from 'node:events'
import { connect, type Socket } from 'node:net'
import Fastify, { type FastifyInstance } from 'fastify'
import { describe, expect, it } from 'vitest'
import { hardenHttp } from '../../src/shared/http-server.js'
import { deferred } from '../helpers/deferred.js'

/**
 * A raw client of `app` that keeps its side of the connection open (half-open) until the test destroys it: what it
 * has received so far, and the server ending the connection (a clean FIN; a reset would be an 'error').
 */
async function rawClient(app: FastifyInstance): Promise<{ sock: Socket; received: () => string; serverEnded: Promise<void> }> {
  const url = new URL(await app.listen({ port: 0, host: '127.0.0.1' }))
  const sock = connect({ port: Number(url.port), host: url.hostname, allowHalfOpen: true })
  let text = ''
  sock.on('data', (b: Buffer) => (text += b.toString('latin1')))
  const serverEnded = once(sock, 'end').then(() => undefined)
  await once(sock, 'connect')
  return { sock, received: () => text, serverEnded }
}

describe('closing with a keep-alive client', () => {
  it('sends the answer in progress at close() whole, then closes the connection the client keeps open', async () => {
    const app = Fastify({ logger: false })
    hardenHttp(app, { bodyLimit: 1024 })
    const entered = deferred<void>()
    const release = deferred<void>()
    app.get('/slow', async () => {
      entered.resolve()
      await release.promise
      return { ok: true }
    })
    // The answer ends only after the server has stopped listening (fastify closes it right after the preClose hooks).
    app.addHook('preClose', async () => {
      setImmediate(() => release.resolve())
    })
    const client = await rawClient(app)
    client.sock.write('GET /slow HTTP/1.1\r\nHost: onnxd\r\nConnection: keep-alive\r\n\r\n')
    await entered.promise

    const closing = app.close()
    // The client never ends its side: the server ends the connection (before, it waited out the keep-alive timeout).
    await client.serverEnded
    const [head, body] = client.received().split('\r\n\r\n')
    expect(head).toMatch(/^HTTP\/1\.1 200 OK\r\n/)
    // The answer itself offered keep-alive, as it does to any client that asks: the close is the server's own.
    expect(head).toMatch(/\r\nconnection: keep-alive\r\n/i)
    expect(JSON.parse(body!)).toEqual({ ok: true })
    expect(client.sock.writableEnded).toBe(false)
    await closing
    expect(app.server.listening).toBe(false)
    client.sock.destroy()
  })
})

describe('closing with a connection that never sent a request', () => {
  it('does not wait on it (Node 20 counts it neither idle nor busy): close() ends it without a byte', async () => {
    const app = Fastify({ logger: false })
    hardenHttp(app, { bodyLimit: 1024 })
    app.get('/', async () => ({ ok: true }))
    const client = await rawClient(app)
    await app.close() // hung until the client let go, before
    await client.serverEnded
    expect(client.received()).toBe('')
    expect(app.server.listening).toBe(false)
    expect(client.sock.writableEnded).toBe(false) // the client did not let go
    client.sock.destroy()
  })
})
