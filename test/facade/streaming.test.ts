import { once } from 'node:events'
import { connect } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import type { CompletionUsage } from '../../src/store/interfaces.js'
import { bearer, chatBody, deferred, facadeFixture, observed, sseEvents, type FacadeFixture } from '../helpers/facade.js'

let f: FacadeFixture | null = null
afterEach(async () => {
  await f?.close()
  f = null
})

const PRICES = { 'tiny-llm': { prompt: 1000, completion: 2000 } } // micros per token: 1000 and 2000

describe('streams that end early', () => {
  it('a client who leaves mid-stream cancels the node request and is billed for the tokens produced', async () => {
    const recorded = deferred<CompletionUsage>()
    f = await facadeFixture({ wrapStore: observed((u) => recorded.resolve(u)), options: { prices: PRICES } })
    const node = f.nodes[0]!
    const hold = node.holdNext(3)
    const url = await f.app.listen({ port: 0, host: '127.0.0.1' })
    const ac = new AbortController()
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...bearer(f.key), 'content-type': 'application/json' },
      body: JSON.stringify(chatBody({ stream: true })),
      signal: ac.signal,
    })
    expect(res.status).toBe(200)
    await hold.reached
    ac.abort()
    await hold.cancelled
    const u = await recorded.promise
    expect(u).toMatchObject({ keyId: expect.any(String), model: 'tiny-llm', completionTokens: 3, costMicros: 3 * 2000 })
    expect(node.cancellations).toBe(1)
    expect((await f.store.getAccount(f.account.id))!.balanceMicros).toBe(1_000_000_000 - 6000)
    expect(f.app.facade.router.nodes[0]!.inflight).toBe(0)
  })

  it('a client who leaves during a non-streaming completion cancels the node request', async () => {
    f = await facadeFixture()
    const node = f.nodes[0]!
    const hold = node.holdNext(0)
    const url = await f.app.listen({ port: 0, host: '127.0.0.1' })
    const ac = new AbortController()
    const pending = fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...bearer(f.key), 'content-type': 'application/json' },
      body: JSON.stringify(chatBody()),
      signal: ac.signal,
    }).catch((e: unknown) => e)
    await hold.reached
    ac.abort()
    await hold.cancelled
    expect(await pending).toBeInstanceOf(Error)
    expect(node.cancellations).toBe(1)
  })

  it('an error event from the node mid-stream reaches the client as an error event, then [DONE]; the partial is billed', async () => {
    const recorded = deferred<CompletionUsage>()
    f = await facadeFixture({ wrapStore: observed((u) => recorded.resolve(u)) })
    f.nodes[0]!.breakNext(2, 'error')
    const res = await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody({ stream: true }) })
    const events = sseEvents(res.body)
    expect(events.at(-1)).toBe('[DONE]')
    expect(JSON.parse(events.at(-2)!)).toEqual({
      error: { type: 'server_error', code: 500, message: 'The inference backend failed during the stream; it is safe to retry' },
    })
    expect(events.slice(1, -2).map((e) => JSON.parse(e).choices[0].delta.content)).toEqual(['Hello', ','])
    // Billed with the usage the node put on its error event: prompt tokens included.
    expect(await recorded.promise).toMatchObject({ promptTokens: 4, completionTokens: 2 })
  })

  it('a node that drops the connection mid-stream gives the client an error event; the partial is billed', async () => {
    const recorded = deferred<CompletionUsage>()
    f = await facadeFixture({ wrapStore: observed((u) => recorded.resolve(u)) })
    f.nodes[0]!.breakNext(1, 'drop')
    const res = await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody({ stream: true }) })
    const events = sseEvents(res.body)
    expect(JSON.parse(events.at(-2)!).error).toMatchObject({ type: 'server_error', code: 500 })
    expect((await recorded.promise).completionTokens).toBe(1)
    expect(f.app.facade.router.nodes[0]!.inflight).toBe(0)
  })

  it('a finished stream is billed with the usage of the node’s final event, before [DONE] is sent', async () => {
    const records: CompletionUsage[] = []
    f = await facadeFixture({ wrapStore: observed((u) => records.push(u)), options: { prices: PRICES } })
    const res = await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody({ stream: true, max_tokens: 5 }) })
    expect(sseEvents(res.body).at(-1)).toBe('[DONE]')
    expect(records).toEqual([expect.objectContaining({ promptTokens: 4, completionTokens: 5, costMicros: 4 * 1000 + 5 * 2000 })])
  })
})

describe('connection handling', () => {
  it("honours a client's Connection: close: the facade closes the socket after the stream", async () => {
    f = await facadeFixture()
    const base = new URL(await f.app.listen({ port: 0, host: '127.0.0.1' }))
    const body = JSON.stringify(chatBody({ stream: true }))
    const sock = connect(Number(base.port), base.hostname)
    sock.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${f.key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    )
    let raw = ''
    sock.on('data', (d: Buffer) => (raw += d.toString()))
    await once(sock, 'end') // a keep-alive answer would leave the socket open
    const head = raw.slice(0, raw.indexOf('\r\n\r\n')).toLowerCase()
    expect(head).toMatch(/^http\/1\.1 200/)
    expect(head).toContain('connection: close')
    expect(raw).toContain('data: [DONE]')
    sock.destroy()
  })
})
