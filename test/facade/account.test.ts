import { afterEach, describe, expect, it } from 'vitest'
import { bearer, chatBody, facadeFixture, type FacadeFixture } from '../helpers/facade.js'

let f: FacadeFixture | null = null
afterEach(async () => {
  await f?.close()
  f = null
})

describe('session-token routes', () => {
  it('GET and PATCH /v1/account/profile', async () => {
    f = await facadeFixture()
    const h = bearer(await f.token())
    const got = await f.app.inject({ method: 'GET', url: '/v1/account/profile', headers: h })
    expect(got.json()).toEqual({
      id: f.account.id,
      object: 'account',
      name: 'test',
      email: null,
      balance_micros: 1_000_000_000,
      balance: '1000.000000',
      subscription: 'active',
      created_at: expect.any(Number),
    })
    const patched = await f.app.inject({ method: 'PATCH', url: '/v1/account/profile', headers: h, payload: { name: 'Ada', email: 'ada@example.com' } })
    expect(patched.statusCode).toBe(200)
    expect(patched.json()).toMatchObject({ name: 'Ada', email: 'ada@example.com' })
    expect((await f.app.inject({ method: 'PATCH', url: '/v1/account/profile', headers: h, payload: { email: null } })).json().email).toBeNull()

    const bad = await f.app.inject({ method: 'PATCH', url: '/v1/account/profile', headers: h, payload: { email: 'not-an-email' } })
    expect(bad.statusCode).toBe(422)
    expect(bad.json().error).toMatchObject({ type: 'invalid_request_error', code: 422, message: expect.stringMatching(/'email'/) })
    const unknown = await f.app.inject({ method: 'PATCH', url: '/v1/account/profile', headers: h, payload: { balance_micros: 10 ** 12 } })
    expect(unknown.statusCode).toBe(422)
    const notJson = await f.app.inject({ method: 'PATCH', url: '/v1/account/profile', headers: { ...h, 'content-type': 'application/json' }, payload: '{' })
    expect(notJson.statusCode).toBe(400)
  })

  it('keys: create (201, secret once), list (never the secret), revoke (fails at once)', async () => {
    f = await facadeFixture()
    const h = bearer(await f.token())
    const created = await f.app.inject({ method: 'POST', url: '/v1/account/keys', headers: h, payload: { name: 'ci', rpm_limit: 30 } })
    expect(created.statusCode).toBe(201)
    const k = created.json()
    expect(k).toMatchObject({ object: 'api_key', account_id: f.account.id, name: 'ci', rpm_limit: 30, status: 'active', revoked_at: null })
    expect(k.key).toMatch(/^sk-svc-[A-Za-z0-9]{32}$/)
    expect(k.redacted_key).toBe(`${k.key.slice(0, 11)}…${k.key.slice(-4)}`)

    const empty = await f.app.inject({ method: 'POST', url: '/v1/account/keys', headers: h })
    expect(empty.statusCode).toBe(201)
    expect(empty.json()).toMatchObject({ name: null, rpm_limit: null })

    const list = await f.app.inject({ method: 'GET', url: '/v1/account/keys', headers: h })
    expect(list.json().object).toBe('list')
    expect(list.json().data).toHaveLength(3) // the fixture's key and two new ones
    expect(list.body).not.toContain(k.key)
    expect(list.json().data.every((x: Record<string, unknown>) => !('key' in x))).toBe(true)

    // The new key works at once for inference, and stops at once when revoked.
    expect((await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(k.key), payload: chatBody() })).statusCode).toBe(200)
    const revoked = await f.app.inject({ method: 'DELETE', url: `/v1/account/keys/${k.id}`, headers: h })
    expect(revoked.statusCode).toBe(200)
    expect(revoked.json()).toMatchObject({ id: k.id, status: 'revoked', revoked_at: expect.any(Number) })
    const after = await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(k.key), payload: chatBody() })
    expect(after.statusCode).toBe(401)
    expect(after.json().error.message).toBe('Invalid API key')
  })

  it('keys: invalid values are 422; another account’s key is 404', async () => {
    f = await facadeFixture()
    const h = bearer(await f.token())
    for (const payload of [{ rpm_limit: -1 }, { rpm_limit: 1.5 }, { name: 7 }, { secret: 'x' }]) {
      const res = await f.app.inject({ method: 'POST', url: '/v1/account/keys', headers: h, payload })
      expect(res.statusCode, JSON.stringify(payload)).toBe(422)
    }
    const other = await f.newAccount()
    const otherKey = await f.app.inject({ method: 'POST', url: '/v1/account/keys', headers: bearer(await f.token(other.id)) })
    const res = await f.app.inject({ method: 'DELETE', url: `/v1/account/keys/${otherKey.json().id}`, headers: h })
    expect(res.statusCode).toBe(404)
    expect(res.json().error).toMatchObject({ type: 'invalid_request_error', code: 404 })
  })

  it('GET /v1/account/billing shows balance, subscription and prices', async () => {
    f = await facadeFixture({ credits: 2_500_000, options: { prices: { 'tiny-llm': { prompt: 2, completion: 4 } } } })
    const h = bearer(await f.token())
    expect((await f.app.inject({ method: 'GET', url: '/v1/account/billing', headers: h })).json()).toEqual({
      object: 'billing',
      account_id: f.account.id,
      balance_micros: 2_500_000,
      balance: '2.500000',
      subscription: 'active',
      can_spend: true,
      // The configured prices, and `*`: what every other model costs (the default price unless configured).
      prices: { 'tiny-llm': { prompt: 2, completion: 4 }, '*': { prompt: 0.5, completion: 1.5 } },
    })
    await f.store.setSubscription(f.account.id, 'inactive')
    expect((await f.app.inject({ method: 'GET', url: '/v1/account/billing', headers: h })).json()).toMatchObject({ subscription: 'inactive', can_spend: false })
  })

  it('GET /v1/usage is scoped to the key; /v1/account/usage spans the account’s keys, with date filters', async () => {
    f = await facadeFixture()
    const second = await f.newKey()
    await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody({ max_tokens: 2 }) })
    await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(second), payload: chatBody({ max_tokens: 3 }) })
    const mine = (await f.app.inject({ method: 'GET', url: '/v1/usage', headers: bearer(f.key) })).json()
    expect(mine.total).toMatchObject({ requests: 1, prompt_tokens: 4, completion_tokens: 2, total_tokens: 6 })
    expect(mine.data).toEqual([expect.objectContaining({ model: 'tiny-llm', requests: 1, key_id: mine.key_id })])
    const all = (await f.app.inject({ method: 'GET', url: '/v1/account/usage', headers: bearer(await f.token()) })).json()
    expect(all).toMatchObject({ object: 'usage', account_id: f.account.id, key_id: null })
    expect(all.total).toMatchObject({ requests: 2, completion_tokens: 5 })
    const past = (await f.app.inject({ method: 'GET', url: '/v1/usage?end_date=2000-01-01', headers: bearer(f.key) })).json()
    expect(past).toMatchObject({ end_date: '2000-01-01', data: [], total: { requests: 0 } })
    const bad = await f.app.inject({ method: 'GET', url: '/v1/usage?start_date=yesterday', headers: bearer(f.key) })
    expect(bad.statusCode).toBe(422)
    expect(bad.json().error.type).toBe('invalid_request_error')
  })
})
