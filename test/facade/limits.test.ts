import { afterEach, describe, expect, it } from 'vitest'
import { RateLimiter } from '../../src/facade/limits/rate-limit.js'
import type { ApiKey } from '../../src/store/interfaces.js'
import { MemoryRateLimitStore } from '../../src/store/memory-rate-limit.js'
import { bearer, chatBody, facadeFixture, type FacadeFixture } from '../helpers/facade.js'

const T0 = 28_333_334 * 60_000 // the start of a one-minute window
let clock = T0
const now = (): number => clock

let f: FacadeFixture | null = null
afterEach(async () => {
  await f?.close()
  f = null
  clock = T0
})

const key = (id: string, rpmLimit: number | null = null): ApiKey => ({
  id,
  accountId: 'a',
  name: null,
  redacted: 'x',
  rpmLimit,
  createdAt: 0,
  lastUsedAt: null,
  revokedAt: null,
})

describe('RateLimiter', () => {
  it('applies the key override, the default, and 0 as unlimited', async () => {
    const l = new RateLimiter(new MemoryRateLimitStore(), { keyRpm: 2, fleetRpm: 0 }, now)
    await l.admit(key('a'))
    await l.admit(key('a'))
    await expect(l.admit(key('a'))).rejects.toMatchObject({ code: 'rate_limited' })
    for (let i = 0; i < 5; i++) await l.admit(key('b', 5))
    await expect(l.admit(key('b', 5))).rejects.toMatchObject({ code: 'rate_limited' })
    for (let i = 0; i < 50; i++) await l.admit(key('c', 0))
  })

  it('gives Retry-After in whole seconds until the window resets, at least 1', async () => {
    const l = new RateLimiter(new MemoryRateLimitStore(), { keyRpm: 1, fleetRpm: 0 }, now)
    clock = T0 + 100
    await l.admit(key('a'))
    clock = T0 + 12_300 // 47.7 s left
    await expect(l.admit(key('a'))).rejects.toMatchObject({ details: { retryAfterS: 48 } })
    clock = T0 + 59_999
    await expect(l.admit(key('a'))).rejects.toMatchObject({ details: { retryAfterS: 1 } })
    clock = T0 + 60_000
    await expect(l.admit(key('a'))).resolves.toMatchObject({ limit: 1, remaining: 0, resetAtMs: T0 + 120_000 })
  })
})

describe('429 rate_limit_error over HTTP', () => {
  it('per key: the key default from config, with Retry-After and x-ratelimit headers', async () => {
    f = await facadeFixture({ options: { keyRpm: 3, fleetRpm: 0 }, deps: { now } })
    clock = T0 + 15_000
    for (let i = 0; i < 3; i++) {
      const ok = await f.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(f.key) })
      expect(ok.statusCode).toBe(200)
      expect(ok.headers['x-ratelimit-remaining-requests']).toBe(String(2 - i))
      expect(ok.headers['x-ratelimit-limit-requests']).toBe('3')
    }
    const res = await f.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(f.key) })
    expect(res.statusCode).toBe(429)
    expect(res.headers['retry-after']).toBe('45')
    expect(res.json()).toEqual({ error: { type: 'rate_limit_error', code: 429, message: 'Rate limit reached for this API key: 3 requests per minute' } })
    // Another key of the same account has its own counter.
    expect((await f.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(await f.newKey()) })).statusCode).toBe(200)
    // The window resets.
    clock = T0 + 60_000
    expect((await f.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(f.key) })).statusCode).toBe(200)
  })

  it("per key: a key's own rpm_limit overrides the default", async () => {
    f = await facadeFixture({ options: { keyRpm: 100, fleetRpm: 0 }, deps: { now } })
    const slow = await f.newKey(f.account.id, 1)
    expect((await f.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(slow) })).statusCode).toBe(200)
    const res = await f.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(slow) })
    expect(res.statusCode).toBe(429)
    expect(res.json().error.message).toMatch(/1 requests per minute/)
  })

  it('fleet-wide: one limit over all keys of the facade', async () => {
    f = await facadeFixture({ options: { keyRpm: 100, fleetRpm: 4 }, deps: { now } })
    clock = T0 + 30_000
    const keys = [f.key, await f.newKey(), await f.newKey((await f.newAccount()).id)]
    for (let i = 0; i < 4; i++) {
      expect((await f.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(keys[i % 3]!) })).statusCode).toBe(200)
    }
    for (const k of keys) {
      const res = await f.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(k) })
      expect(res.statusCode).toBe(429)
      expect(res.headers['retry-after']).toBe('30')
      expect(res.json().error).toMatchObject({ type: 'rate_limit_error', code: 429, message: expect.stringMatching(/Fleet-wide rate limit reached: 4 requests per minute/) })
    }
  })

  it('comes after 401 (a bad credential counts nothing) and before 400 (an over-limit bad body is 429)', async () => {
    f = await facadeFixture({ options: { keyRpm: 1, fleetRpm: 1 }, deps: { now } })
    for (let i = 0; i < 3; i++) {
      expect((await f.app.inject({ method: 'GET', url: '/v1/models', headers: bearer('sk-svc-bad') })).statusCode).toBe(401)
    }
    const first = await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody() })
    expect(first.statusCode).toBe(200)
    const bad = await f.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { ...bearer(f.key), 'content-type': 'application/json' },
      payload: '{oops',
    })
    expect(bad.statusCode).toBe(429)
  })

  it('does not limit the session-token routes', async () => {
    f = await facadeFixture({ options: { keyRpm: 1, fleetRpm: 1 }, deps: { now } })
    const token = await f.token()
    for (let i = 0; i < 5; i++) {
      expect((await f.app.inject({ method: 'GET', url: '/v1/account/billing', headers: bearer(token) })).statusCode).toBe(200)
    }
  })
})
