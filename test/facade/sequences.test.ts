// Issue #32, part 6: `n` cannot let one key take the nodes. A key holds one sequence per node request (per choice)
// from dispatch until its answer ends, up to keyMaxSequences; past it, 429 with Retry-After in the spec's error
// object, while other keys' streams go on. The facade tells the node whose request each is (`tenant`).
import { afterEach, describe, expect, it } from 'vitest'
import { SequenceLimiter } from '../../src/facade/limits/sequences.js'
import { bearer, chatBody, facadeFixture, sseEvents, type FacadeFixture } from '../helpers/facade.js'
import type { Hold } from '../helpers/fake-node.js'

describe('SequenceLimiter', () => {
  it('counts sequences per key, refuses past the bound with 429 and Retry-After, and frees them on release', () => {
    const l = new SequenceLimiter(32)
    const a1 = l.acquire('a', 16)
    const a2 = l.acquire('a', 16)
    expect(l.holding('a')).toBe(32)
    expect(() => l.acquire('a', 1)).toThrow(expect.objectContaining({ code: 'rate_limited', details: { retryAfterS: 1 } }))
    // Another key has its own bound.
    const b = l.acquire('b', 16)
    a1()
    a1() // idempotent
    expect(l.holding('a')).toBe(16)
    const a3 = l.acquire('a', 16)
    for (const r of [a2, a3, b]) r()
    expect(l.holding('a')).toBe(0)
    expect(l.holding('b')).toBe(0)
  })

  it('refuses with 422 naming n a request that alone needs more than the bound; 0 is unlimited', () => {
    expect(() => new SequenceLimiter(8).acquire('a', 9)).toThrow(expect.objectContaining({ code: 'invalid_value', message: expect.stringMatching(/^Invalid value for 'n': this request needs 9 sequences/) }))
    const free = new SequenceLimiter(0)
    for (let i = 0; i < 100; i++) free.acquire('a', 16)
  })
})

describe('concurrent sequences per key through the facade', () => {
  let f: FacadeFixture | null = null
  afterEach(async () => {
    await f?.close()
    f = null
  })

  const post = (key: string, extra: Record<string, unknown>) =>
    f!.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(key), payload: chatBody(extra) })

  it("refuses a key's requests past its bound with 429 and Retry-After while another key's streams flow; frees them when they end", async () => {
    f = await facadeFixture({ options: { keyMaxSequences: 32, keyRpm: 0, fleetRpm: 0 } })
    const node = f.nodes[0]!
    const flooder = f.key
    const other = await f.newKey((await f.newAccount()).id)
    // Two requests with n = 16 take the key's 32 sequences; the node holds every one of them.
    const holds: Hold[] = Array.from({ length: 32 }, () => node.holdNext(0))
    const flood = [post(flooder, { n: 16, stream: true, logprobs: true, top_logprobs: 20 }), post(flooder, { n: 16 })]
    await Promise.all(holds.map((h) => h.reached))

    for (const extra of [{ n: 16, stream: true }, { n: 1 }]) {
      const res = await post(flooder, extra)
      expect(res.statusCode).toBe(429)
      expect(res.headers['retry-after']).toBe('1')
      expect(res.json()).toEqual({ error: { message: expect.stringContaining('Concurrency limit reached for this API key'), type: 'rate_limit_error', code: 429 } })
    }
    // The other key's streams go through in full meanwhile.
    for (let i = 0; i < 3; i++) {
      const res = await post(other, { stream: true, n: 4 })
      expect(res.statusCode).toBe(200)
      expect(sseEvents(res.body).at(-1)).toBe('[DONE]')
      expect(sseEvents(res.body).filter((e) => e.includes('"finish_reason":"')).length).toBe(4)
    }
    expect(node.requests.length).toBe(32 + 3 * 4)

    for (const h of holds) h.release()
    expect((await Promise.all(flood)).map((r) => r.statusCode)).toEqual([200, 200])
    // Freed: the key may run 16 more.
    expect((await post(flooder, { n: 16 })).statusCode).toBe(200)

    // Each node request says whose it is: one tenant per key, the same for all of a key's requests.
    const tenants = node.requests.map((r) => r.tenant)
    expect(tenants.every((t) => typeof t === 'string' && t.length > 0)).toBe(true)
    expect(new Set(tenants).size).toBe(2)
    expect(new Set(tenants.slice(0, 32)).size).toBe(1)
    expect(tenants[32]).not.toBe(tenants[0])
  })
})
