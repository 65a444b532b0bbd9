// Closing a server does not wait on a client's keep-alive connection (issue #10: after SIGTERM, `onnxd serve` drained
// but stayed up until the keep-alive timeout, past docker stop's 10 s): an answer that ends after the server stopped
// listening releases its connection at once.
import { once } from 'node:events'
import { connect } from 'node:net'
import Fastify from 'fastify'
import { describe, expect, it } from 'vitest'
import { hardenHttp } from '../../src/shared/http-server.js'
import { deferred } from '../helpers/deferred.js'

describe('closing with a keep-alive client', () => {
  it('closes as soon as the answer in progress at close() is sent, though the client keeps its connection', async () => {
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
    const base = await app.listen({ port: 0, host: '127.0.0.1' })

    // fetch keeps its connection alive after the answer (fastify offers 72 s).
    const answer = fetch(`${base}/slow`)
    await entered.promise
    let closedAt = 0
    const closing = app.close().then(() => (closedAt = Date.now()))
    const res = await answer
    expect(await res.json()).toEqual({ ok: true })
    expect(app.server.listening).toBe(false)
    const answeredAt = Date.now()
    const timeout = new Promise((resolve) => setTimeout(resolve, 3000, 'still open'))
    expect(await Promise.race([closing.then(() => 'closed'), timeout])).toBe('closed')
    expect(closedAt - answeredAt).toBeLessThan(1000)
  })
})

describe('closing with a connection that never sent a request', () => {
  it('does not wait on it (Node 20 counts it neither idle nor busy): close() returns and the socket is closed', async () => {
    const app = Fastify({ logger: false })
    hardenHttp(app, { bodyLimit: 1024 })
    app.get('/', async () => ({ ok: true }))
    const url = new URL(await app.listen({ port: 0, host: '127.0.0.1' }))
    const sock = connect(Number(url.port), url.hostname)
    await once(sock, 'connect')
    const closedByServer = once(sock, 'close')
    await app.close() // hung until the client let go, before
    await closedByServer
  })
})
