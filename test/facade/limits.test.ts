import { randomBytes } from 'node:crypto'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { formatDuration, RateLimiter } from '../../src/facade/limits/rate-limit.js'
import type { ApiKey, RateLimitStore } from '../../src/store/interfaces.js'
import { MemoryRateLimitStore } from '../../src/store/memory-rate-limit.js'
import { RedisRateLimitStore } from '../../src/store/redis-rate-limit.js'
import { bearer, chatBody, facadeFixture, type FacadeFixture } from '../helpers/facade.js'
import { startRedis } from '../helpers/servers.js'

const redis = await startRedis()
if (redis.reason) console.warn(`Redis rate-limit suites skipped: ${redis.reason}`)
afterAll(async () => {
  await redis.server?.stop()
})

// The start of a one-minute window a few minutes ahead (Redis expires a window's counter when the window ends).
const T0 = (Math.floor(Date.now() / 60_000) + 5) * 60_000
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

const refused = (code = 'rate_limited') => ({ refused: expect.objectContaining({ code }) })
const allowed = { refused: null }

const counters: { name: string; skip: string | null; make: () => RateLimitStore }[] = [
  { name: 'memory', skip: null, make: () => new MemoryRateLimitStore() },
  {
    name: 'Redis',
    skip: redis.reason,
    make: () => new RedisRateLimitStore({ url: redis.server!.url, prefix: `t${randomBytes(4).toString('hex')}:` }),
  },
]
const opened: RateLimitStore[] = []
const counter = (make: () => RateLimitStore): RateLimitStore => {
  const c = make()
  opened.push(c)
  return c
}
afterEach(async () => {
  for (const c of opened.splice(0)) await c.close()
})

for (const c of counters) {
describe.skipIf(c.skip !== null)(`RateLimiter on ${c.name} counters${c.skip ? ` (skipped: ${c.skip})` : ''}`, () => {
  it('applies the key override, the default, and 0 as unlimited', async () => {
    const l = new RateLimiter(counter(c.make), { keyRpm: 2, fleetRpm: 0 }, now)
    expect(await l.admit(key('a'))).toMatchObject({ limit: 2, remaining: 1, ...allowed })
    expect(await l.admit(key('a'))).toMatchObject({ limit: 2, remaining: 0, ...allowed })
    expect(await l.admit(key('a'))).toMatchObject({ limit: 2, remaining: 0, ...refused() })
    for (let i = 0; i < 5; i++) expect(await l.admit(key('b', 5))).toMatchObject(allowed)
    expect(await l.admit(key('b', 5))).toMatchObject(refused())
    for (let i = 0; i < 50; i++) expect(await l.admit(key('c', 0))).toBeNull()
  })

  it('gives Retry-After in whole seconds until the window resets, at least 1', async () => {
    const l = new RateLimiter(counter(c.make), { keyRpm: 1, fleetRpm: 0 }, now)
    clock = T0 + 100
    await l.admit(key('a'))
    clock = T0 + 12_300 // 47.7 s left
    expect((await l.admit(key('a')))?.refused).toMatchObject({ details: { retryAfterS: 48 } })
    clock = T0 + 59_999
    expect((await l.admit(key('a')))?.refused).toMatchObject({ details: { retryAfterS: 1 } })
    clock = T0 + 60_000
    expect(await l.admit(key('a'))).toMatchObject({ limit: 1, remaining: 0, resetAtMs: T0 + 120_000, refused: null })
  })

  it('reports the binding limit: the one with the fewest requests remaining, key or fleet', async () => {
    const l = new RateLimiter(counter(c.make), { keyRpm: 3, fleetRpm: 5 }, now)
    expect(await l.admit(key('a'))).toMatchObject({ limit: 3, remaining: 2, ...allowed }) // key 2 left, fleet 4
    expect(await l.admit(key('b'))).toMatchObject({ limit: 3, remaining: 2, ...allowed }) // key 2, fleet 3
    expect(await l.admit(key('c'))).toMatchObject({ limit: 3, remaining: 2, ...allowed }) // key 2, fleet 2: a tie keeps the key's
    expect(await l.admit(key('d'))).toMatchObject({ limit: 5, remaining: 1, ...allowed }) // fleet binds
    expect(await l.admit(key('a'))).toMatchObject({ limit: 5, remaining: 0, ...allowed })
    expect(await l.admit(key('a'))).toMatchObject({ limit: 5, remaining: 0, ...refused() }) // the fleet refuses
    expect((await l.admit(key('a')))?.refused?.message).toMatch(/this API key: 3 requests/) // now the key does
  })
})
}

describe('formatDuration', () => {
  it('writes reset durations as OpenAI does', () => {
    expect([1, 9, 59, 60, 61, 360, 3600, 3725].map(formatDuration)).toEqual(['1s', '9s', '59s', '1m0s', '1m1s', '6m0s', '1h0m0s', '1h2m5s'])
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
      expect(ok.headers['x-ratelimit-reset-requests']).toBe('45s')
    }
    const res = await f.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(f.key) })
    expect(res.statusCode).toBe(429)
    expect(res.headers['retry-after']).toBe('45')
    expect(res.headers).toMatchObject({ 'x-ratelimit-limit-requests': '3', 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '45s' })
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
      expect(res.headers).toMatchObject({ 'x-ratelimit-limit-requests': '4', 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '30s' })
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

  it('chat completions carry the binding limit, as JSON and as SSE; a full minute left reads 1m0s', async () => {
    f = await facadeFixture({ options: { keyRpm: 10, fleetRpm: 100 }, deps: { now } })
    const json = await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody() })
    expect(json.statusCode).toBe(200)
    expect(json.headers).toMatchObject({ 'x-ratelimit-limit-requests': '10', 'x-ratelimit-remaining-requests': '9', 'x-ratelimit-reset-requests': '1m0s' })
    clock = T0 + 50_500
    const sse = await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody({ stream: true }) })
    expect(sse.headers['content-type']).toMatch(/^text\/event-stream/)
    expect(sse.headers).toMatchObject({ 'x-ratelimit-limit-requests': '10', 'x-ratelimit-remaining-requests': '8', 'x-ratelimit-reset-requests': '10s' })
    // A 429 of a chat completion carries them too.
    for (let i = 0; i < 8; i++) await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody() })
    const over = await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody() })
    expect(over.statusCode).toBe(429)
    expect(over.headers).toMatchObject({ 'retry-after': '10', 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '10s' })
  })

  it('does not limit the session-token routes', async () => {
    f = await facadeFixture({ options: { keyRpm: 1, fleetRpm: 1 }, deps: { now } })
    const token = await f.token()
    for (let i = 0; i < 5; i++) {
      expect((await f.app.inject({ method: 'GET', url: '/v1/account/billing', headers: bearer(token) })).statusCode).toBe(200)
    }
  })
})

describe.skipIf(redis.server === null)(`facades sharing one Redis${redis.reason ? ` (skipped: ${redis.reason})` : ''}`, () => {
  it('two facades given the same ONNXD_REDIS_URL share one fleet-wide window', async () => {
    // A Redis database of its own, so that no other test's fleet counter is in the way.
    const url = `${redis.server!.url}/3`
    const a = await facadeFixture({ options: { keyRpm: 100, fleetRpm: 3, redisUrl: url }, deps: { now } })
    const b = await facadeFixture({ options: { keyRpm: 100, fleetRpm: 3, redisUrl: url }, deps: { now } })
    try {
      clock = T0 + 1000
      const codes: number[] = []
      for (let i = 0; i < 6; i++) {
        const fx = i % 2 ? a : b
        codes.push((await fx.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(fx.key) })).statusCode)
      }
      expect(codes).toEqual([200, 200, 200, 429, 429, 429])
    } finally {
      await a.close()
      await b.close()
    }
  })
})

describe('a facade whose Redis does not answer', () => {
  it('lets requests through (fail open) and reports how many on /health', async () => {
    f = await facadeFixture({ options: { keyRpm: 1, fleetRpm: 1, redisUrl: 'redis://127.0.0.1:1' }, deps: { now } })
    for (let i = 0; i < 3; i++) {
      expect((await f.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(f.key) })).statusCode).toBe(200)
    }
    // Each request counts its key and the fleet in one step: one failure per request.
    expect((await f.app.inject({ method: 'GET', url: '/health' })).json()).toMatchObject({ rate_limit_fail_open: 3 })
  })
})
