import OpenAI from 'openai'
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest'
import { formatMoney, parseMoney } from '../../src/facade/billing/money.js'
import { Meter, PriceTable } from '../../src/facade/billing/meter.js'
import type { Account, ApiKey } from '../../src/store/interfaces.js'
import { SqliteStore } from '../../src/store/sqlite.js'
import { DEFAULT_PRICE } from '../../src/facade/options.js'
import { bearer, facadeFixture, MODEL, type FacadeFixture } from '../helpers/facade.js'
import { deferred } from '../helpers/deferred.js'

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
  })

  it('prices models that are not listed, and without `*`, at the default price (documented: 0.5 and 1.5 per 1M tokens)', () => {
    expect(DEFAULT_PRICE).toEqual({ prompt: 0.5, completion: 1.5 })
    expect(new PriceTable({}).costMicros('a', { promptTokens: 10, completionTokens: 10 })).toBe(20) // 5 + 15
    expect(new PriceTable({ a: { prompt: 1, completion: 1 } }).costMicros('b', { promptTokens: 2, completionTokens: 2 })).toBe(4)
    expect(new PriceTable({ '*': { prompt: 0, completion: 0 } }).costMicros('a', { promptTokens: 10, completionTokens: 10 })).toBe(0)
    expect(new PriceTable({}, { prompt: 0, completion: 0 }).costMicros('a', { promptTokens: 10, completionTokens: 10 })).toBe(0)
    expect(new PriceTable({ a: { prompt: 2, completion: 3 } }).table()).toEqual({ a: { prompt: 2, completion: 3 }, '*': DEFAULT_PRICE })
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

describe('usage in flight (a Tab per stream)', () => {
  const T0 = Date.UTC(2025, 0, 1, 12)
  /** Lets a save asked for while another ran finish (saves are chained through promises, not timers). */
  const settled = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))
  let clock = T0
  const stores: SqliteStore[] = []
  afterEach(async () => {
    vi.useRealTimers()
    clock = T0
    for (const st of stores.splice(0)) await st.close()
  })

  async function setup(opts: { flushMs?: number; flushTokens?: number } = {}) {
    const store = new SqliteStore({ file: ':memory:' })
    stores.push(store)
    const account: Account = await store.createAccount({ name: 'a', balanceMicros: 1_000_000 })
    const { id } = await store.createKey({ accountId: account.id, hash: Buffer.alloc(32, 1), redacted: 'x' })
    const key = (await store.getKey(id)) as ApiKey
    const prices = new PriceTable({ m: { prompt: 1, completion: 2 } }) // micros per token
    const meter = (): Meter => new Meter(store, prices, { flushMs: opts.flushMs ?? 1000, flushTokens: opts.flushTokens ?? 4, now: () => clock })
    const rows = () => store.db.prepare('SELECT id, prompt_tokens, completion_tokens, cost_micros, settled_at FROM inflight').all()
    const usage = async () => (await store.usage({ keyId: key.id }))[0] ?? null
    const balance = async () => (await store.getAccount(account.id))!.balanceMicros
    return { store, account, key, meter, rows, usage, balance }
  }

  it('saves a stream as soon as it has delivered flushTokens tokens since its last save', async () => {
    const { account, key, meter, rows } = await setup({ flushTokens: 4 })
    const m = meter()
    const tab = m.open('r1', account, key, 'm')
    for (let n = 1; n <= 3; n++) tab.progress({ promptTokens: 5, completionTokens: n })
    expect(rows()).toEqual([])
    tab.progress({ promptTokens: 5, completionTokens: 4 })
    expect(rows()).toEqual([{ id: 'r1', prompt_tokens: 5, completion_tokens: 4, cost_micros: 13, settled_at: null }])
    await settled()
    for (let n = 5; n <= 7; n++) tab.progress({ promptTokens: 5, completionTokens: n })
    await settled()
    expect(rows()).toEqual([expect.objectContaining({ completion_tokens: 4 })])
    tab.progress({ promptTokens: 5, completionTokens: 8 })
    await settled()
    expect(rows()).toEqual([expect.objectContaining({ completion_tokens: 8, cost_micros: 21 })])
  })

  it('saves every stream with news, in one batch, every flushMs, and renews the rows of quiet ones', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] })
    const { store, account, key, meter, rows } = await setup({ flushMs: 1000, flushTokens: 100 })
    const m = meter()
    await m.start()
    const save = vi.spyOn(store, 'saveInFlight')
    const a = m.open('a', account, key, 'm')
    const b = m.open('b', account, key, 'm')
    a.progress({ promptTokens: 2, completionTokens: 1 })
    expect(rows()).toEqual([])
    clock += 1000
    await vi.advanceTimersByTimeAsync(1000)
    expect(save).toHaveBeenCalledTimes(1)
    expect(save.mock.calls[0]![1].map((r) => [r.id, r.completionTokens])).toEqual([['a', 1], ['b', 0]])
    clock += 1000
    await vi.advanceTimersByTimeAsync(1000) // nothing new: the lease is renewed all the same
    expect(save).toHaveBeenCalledTimes(2)
    expect(save.mock.calls[1]![1]).toEqual([])
    expect(store.db.prepare('SELECT DISTINCT updated_at AS t FROM inflight').all()).toEqual([{ t: T0 + 2000 }])
    b.progress({ promptTokens: 3, completionTokens: 2 })
    await m.close() // saves what is in flight
    expect(rows()).toEqual([expect.objectContaining({ id: 'a', completion_tokens: 1 }), expect.objectContaining({ id: 'b', completion_tokens: 2 })])
  })

  it('a stream that ends bills exactly its final usage, once, whether or not it was saved', async () => {
    const { account, key, meter, rows, usage, balance } = await setup({ flushTokens: 2 })
    const m = meter()
    const saved = m.open('r1', account, key, 'm')
    saved.progress({ promptTokens: 5, completionTokens: 3 })
    expect(rows()).toHaveLength(1)
    expect(await saved.settle({ promptTokens: 5, completionTokens: 6 })).toBe(17)
    expect(() => saved.settle({ promptTokens: 5, completionTokens: 6 })).toThrow(/already settled/)
    const unsaved = m.open('r2', account, key, 'm')
    unsaved.progress({ promptTokens: 1, completionTokens: 1 })
    await unsaved.settle({ promptTokens: 1, completionTokens: 1 })
    expect(rows()).toEqual([])
    expect(m.inFlight).toBe(0)
    expect(await usage()).toMatchObject({ requests: 2, promptTokens: 6, completionTokens: 7, costMicros: 17 + 3 })
    expect(await balance()).toBe(1_000_000 - 20)
    // Nothing is left for recovery.
    clock += 60_000
    expect(await meter().start()).toMatchObject({ completions: 0 })
  })

  it('a stream that ends during a save waits for it only when that save writes its row', async () => {
    const { store, account, key, meter, rows, usage } = await setup({ flushTokens: 100 })
    const m = meter()
    const gate = deferred()
    const save = store.saveInFlight.bind(store)
    vi.spyOn(store, 'saveInFlight').mockImplementationOnce(async (...args) => {
      await gate.promise
      return save(...args)
    })
    const a = m.open('a', account, key, 'm')
    const saving = m.flush() // writes a's row, held at the gate
    const b = m.open('b', account, key, 'm') // opened after: not in that save
    let aDone = false
    const aSettled = a.settle({ promptTokens: 1, completionTokens: 1 }).then(() => (aDone = true))
    // b records at once, while the save holding a's row is still out.
    await b.settle({ promptTokens: 2, completionTokens: 2 })
    expect(await usage()).toMatchObject({ requests: 1, promptTokens: 2 })
    await settled()
    expect(aDone).toBe(false)
    gate.resolve()
    await saving
    await aSettled
    // a's record came after its row was written, and removed it: billed once, nothing left in flight.
    expect(rows()).toEqual([])
    expect(await usage()).toMatchObject({ requests: 2, promptTokens: 3, completionTokens: 3 })
  })

  it('after a crash, the next start settles what was saved: usage and debit, once', async () => {
    const { account, key, meter, usage, balance } = await setup({ flushMs: 1000, flushTokens: 4 })
    const crashed = meter()
    const tabs = ['a', 'b', 'c'].map((id) => crashed.open(id, account, key, 'm'))
    tabs.forEach((t, i) => t.progress({ promptTokens: 10, completionTokens: 4 * (i + 1) })) // 4 tokens or more: saved
    await settled()
    tabs[0]!.progress({ promptTokens: 10, completionTokens: 6 }) // 2 more, not saved: lost with the crash (< flushTokens)
    // The process dies here: no settle, no close. A new one starts once the lease (5 intervals) has run out.
    clock += 5001
    const next = meter()
    expect(await next.start()).toEqual({ completions: 3, promptTokens: 30, completionTokens: 24, costMicros: 30 + 48 })
    expect(await usage()).toMatchObject({ requests: 3, promptTokens: 30, completionTokens: 24, costMicros: 78 })
    expect(await balance()).toBe(1_000_000 - 78)
    expect(await next.settleStale()).toMatchObject({ completions: 0 })
    await next.close()
  })

  it("a live facade's streams are not taken by another facade's recovery", async () => {
    const { account, key, meter, usage } = await setup({ flushMs: 1000, flushTokens: 1 })
    const live = meter()
    live.open('r', account, key, 'm').progress({ promptTokens: 1, completionTokens: 1 })
    clock += 5000
    expect(await meter().start()).toMatchObject({ completions: 0 })
    expect(await usage()).toBeNull()
  })
})

describe('default price (issue #10: out of the box, credits never went down and 402 could not happen)', () => {
  let f: FacadeFixture | null = null
  afterEach(async () => {
    await f?.close()
    f = null
  })

  it('a fresh account with credits and no price configuration is debited; once exhausted, it gets 402', async () => {
    f = await facadeFixture({ credits: 40 })
    expect(f.options.prices).toEqual({})
    const ask = () => f!.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f!.key), payload: { model: MODEL, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 8 } })
    const first = await ask()
    expect(first.statusCode).toBe(200)
    const { prompt_tokens: pt, completion_tokens: ct } = first.json().usage
    const cost = Math.ceil((pt * 500 + ct * 1500) / 1000) // 0.5 and 1.5 micro-units per token
    expect(cost).toBeGreaterThan(0)
    expect((await f.store.getAccount(f.account.id))!.balanceMicros).toBe(40 - cost)
    while ((await f.store.getAccount(f.account.id))!.balanceMicros > 0) expect((await ask()).statusCode).toBe(200)
    const refused = await ask()
    expect(refused.statusCode).toBe(402)
    expect(refused.json()).toEqual({ error: { type: 'payment_required', code: 402, message: expect.stringMatching(/balance exhausted/) } })
  })
})
