import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { formatMoney, parseMoney } from '../../src/facade/billing/money.js'
import { PriceTable } from '../../src/facade/billing/meter.js'
import { bearer, facadeFixture, MODEL, type FacadeFixture } from '../helpers/facade.js'

describe('money', () => {
  it('parses decimal amounts into exact micros and formats them back', () => {
    expect(parseMoney('10')).toBe(10_000_000)
    expect(parseMoney('0.1')).toBe(100_000)
    expect(parseMoney('-3.000001')).toBe(-3_000_001)
    expect(formatMoney(-3_000_001)).toBe('-3.000001')
    expect(formatMoney(5)).toBe('0.000005')
    expect(() => parseMoney('1.0000001')).toThrow(/at most 6 decimals/)
    expect(() => parseMoney('1e3')).toThrow()
  })

  it('prices per 1M tokens, exactly, rounded up per completion; `*` is the fallback', () => {
    const p = new PriceTable({ a: { prompt: 0.15, completion: 0.6 }, '*': { prompt: 1, completion: 1 } })
    expect(p.costMicros('a', { promptTokens: 1_000_000, completionTokens: 0 })).toBe(150_000)
    expect(p.costMicros('a', { promptTokens: 3, completionTokens: 1 })).toBe(2) // 0.45 + 0.6 → 1.05 → 2
    expect(p.costMicros('other', { promptTokens: 3, completionTokens: 4 })).toBe(7)
    expect(new PriceTable({}).costMicros('a', { promptTokens: 10, completionTokens: 10 })).toBe(0)
  })
})

describe('usage and billing under concurrency', () => {
  let f: FacadeFixture
  let baseURL: string
  beforeAll(async () => {
    f = await facadeFixture({ nodeCount: 2, options: { prices: { [MODEL]: { prompt: 0.15, completion: 0.6 } }, keyRpm: 0, fleetRpm: 0 } })
    baseURL = `${await f.app.listen({ port: 0, host: '127.0.0.1' })}/v1`
  })
  afterAll(() => f.close())

  it('200 concurrent completions over several keys: usage and balances equal the sums of what the responses reported', async () => {
    const START = 50_000_000
    const accounts = [await f.newAccount(START), await f.newAccount(START)]
    const keys: { secret: string; account: string }[] = []
    for (const a of accounts) for (let i = 0; i < 3; i++) keys.push({ secret: await f.newKey(a.id), account: a.id })
    const cost = (pt: number, ct: number): number => Math.ceil((pt * 150 + ct * 600) / 1000) // nano-units per token

    const results = await Promise.all(
      Array.from({ length: 200 }, async (_, i) => {
        const k = keys[i % keys.length]!
        const client = new OpenAI({ apiKey: k.secret, baseURL, maxRetries: 0 })
        const messages = [{ role: 'user' as const, content: 'word '.repeat(1 + (i % 17)) }]
        const max_tokens = 1 + (i % 8)
        if (i % 2 === 0) {
          const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens })
          return { key: k, pt: r.usage!.prompt_tokens, ct: r.usage!.completion_tokens }
        }
        const s = await client.chat.completions.create({ model: MODEL, messages, max_tokens, stream: true, stream_options: { include_usage: true } })
        let usage: OpenAI.CompletionUsage | undefined
        for await (const c of s) if (c.usage) usage = c.usage
        return { key: k, pt: usage!.prompt_tokens, ct: usage!.completion_tokens }
      }),
    )

    for (const k of keys) {
      const mine = results.filter((r) => r.key === k)
      const res = await f.app.inject({ method: 'GET', url: '/v1/usage', headers: bearer(k.secret) })
      expect(res.statusCode).toBe(200)
      const u = res.json()
      const costs = mine.reduce((n, r) => n + cost(r.pt, r.ct), 0)
      expect(u.total).toMatchObject({
        requests: mine.length,
        prompt_tokens: mine.reduce((n, r) => n + r.pt, 0),
        completion_tokens: mine.reduce((n, r) => n + r.ct, 0),
        cost_micros: costs,
        cost: formatMoney(costs),
      })
      expect(u.data).toHaveLength(1)
    }
    for (const a of accounts) {
      const spent = results.filter((r) => r.key.account === a.id).reduce((n, r) => n + cost(r.pt, r.ct), 0)
      expect(spent).toBeGreaterThan(0)
      expect((await f.store.getAccount(a.id))!.balanceMicros).toBe(START - spent)
      const token = await f.token(a.id)
      const acct = (await f.app.inject({ method: 'GET', url: '/v1/account/usage', headers: bearer(token) })).json()
      expect(acct.total.cost_micros).toBe(spent)
      expect(acct.data).toHaveLength(3)
      expect(acct.total.requests).toBe(results.filter((r) => r.key.account === a.id).length)
    }
    expect(f.app.facade.router.nodes.map((n) => n.inflight)).toEqual([0, 0])
  })
})
