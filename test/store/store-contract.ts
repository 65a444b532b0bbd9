// The behaviour every Store implementation shares (SQLite, PostgreSQL): one suite, run by each store's test file
// against a fresh, empty store per test.
import { expect, it, describe } from 'vitest'
import type { Store } from '../../src/store/interfaces.js'

export interface StoreHarness<S extends Store> {
  /** A fresh, empty store (closed by the harness after the test). */
  open(): Promise<S>
  /** Column names of a table. */
  columns(table: string): Promise<string[]>
  /** The in-flight rows, ordered by id: id, owner, completion_tokens, updated_at, settled_at. */
  inflight(s: S): Promise<unknown[]>
}

const hash = (n: number): Buffer => Buffer.alloc(32, n)

export function storeContract<S extends Store>(h: StoreHarness<S>): void {
  it('creates, reads, updates and lists accounts', async () => {
    const s = await h.open()
    const a = await s.createAccount({ name: 'Ada', email: 'ada@example.com', balanceMicros: 5_000_000 })
    expect(a).toMatchObject({ name: 'Ada', email: 'ada@example.com', balanceMicros: 5_000_000, subscription: 'active' })
    expect(a.id).toMatch(/^acct_[A-Za-z0-9]{20}$/)
    expect((await s.updateProfile(a.id, { name: 'Ada L.' }))?.email).toBe('ada@example.com')
    expect((await s.updateProfile(a.id, { email: null }))).toMatchObject({ name: 'Ada L.', email: null })
    expect((await s.creditAccount(a.id, -1_500_000))?.balanceMicros).toBe(3_500_000)
    expect((await s.setSubscription(a.id, 'inactive'))?.subscription).toBe('inactive')
    expect(await s.getAccount('acct_missing')).toBeNull()
    expect(await s.creditAccount('acct_missing', 1)).toBeNull()
    expect((await s.listAccounts()).map((x) => x.id)).toEqual([a.id])
    await expect(s.creditAccount(a.id, 0.5)).rejects.toThrow(/integer/)
  })

  it('stores keys by hash only, finds them with their account, lists and revokes them per account', async () => {
    const s = await h.open()
    const a = await s.createAccount({ name: 'a' })
    const b = await s.createAccount({ name: 'b' })
    const k = await s.createKey({ accountId: a.id, name: 'ci', rpmLimit: 10, hash: hash(1), redacted: 'sk-svc-abcd…wxyz' })
    expect(k).toMatchObject({ accountId: a.id, name: 'ci', rpmLimit: 10, revokedAt: null, redacted: 'sk-svc-abcd…wxyz' })
    expect(await h.columns('api_keys')).not.toContain('secret')
    const found = await s.findKeyByHash(hash(1))
    expect(found?.key.id).toBe(k.id)
    expect(found?.account.id).toBe(a.id)
    expect(found?.hash.equals(hash(1))).toBe(true)
    expect(await s.findKeyByHash(hash(2))).toBeNull()
    expect(await s.revokeKey(b.id, k.id)).toBeNull() // not b's key
    const revoked = await s.revokeKey(a.id, k.id)
    expect(revoked?.revokedAt).toBeTypeOf('number')
    expect((await s.findKeyByHash(hash(1)))?.key.revokedAt).toBe(revoked?.revokedAt)
    expect((await s.listKeys(a.id)).map((x) => x.id)).toEqual([k.id])
    expect(await s.listKeys(b.id)).toEqual([])
    await expect(s.createKey({ accountId: 'acct_missing', hash: hash(3), redacted: 'x' })).rejects.toThrow(/FOREIGN KEY|foreign key/)
  })

  it('records usage per key, model and day and debits the account in one transaction', async () => {
    const s = await h.open()
    const a = await s.createAccount({ name: 'a', balanceMicros: 1000 })
    const k1 = await s.createKey({ accountId: a.id, hash: hash(1), redacted: 'x' })
    const k2 = await s.createKey({ accountId: a.id, hash: hash(2), redacted: 'y' })
    const day1 = Date.UTC(2025, 0, 1, 12)
    const day2 = Date.UTC(2025, 0, 2, 12)
    const rec = (keyId: string, model: string, at: number, cost: number) =>
      s.recordCompletion({ accountId: a.id, keyId, model, promptTokens: 10, completionTokens: 5, costMicros: cost, at })
    await rec(k1.id, 'm1', day1, 100)
    await rec(k1.id, 'm1', day2, 100)
    await rec(k1.id, 'm2', day2, 50)
    expect((await rec(k2.id, 'm1', day2, 900)).balanceMicros).toBe(-150)
    expect((await s.getAccount(a.id))?.balanceMicros).toBe(-150)
    expect((await s.getKey(k1.id))?.lastUsedAt).toBe(day2 / 1000)
    await s.recordCompletion({ accountId: a.id, keyId: k1.id, model: 'm3', promptTokens: 0, completionTokens: 0, costMicros: 0, at: day2 + 5000, touchKey: false })
    expect((await s.getKey(k1.id))?.lastUsedAt).toBe(day2 / 1000)

    expect(await s.usage({ keyId: k1.id })).toEqual([
      { keyId: k1.id, model: 'm1', requests: 2, promptTokens: 20, completionTokens: 10, costMicros: 200 },
      { keyId: k1.id, model: 'm2', requests: 1, promptTokens: 10, completionTokens: 5, costMicros: 50 },
      { keyId: k1.id, model: 'm3', requests: 1, promptTokens: 0, completionTokens: 0, costMicros: 0 },
    ])
    expect((await s.usage({ keyId: k1.id, from: '2025-01-02' })).map((r) => [r.model, r.requests])).toEqual([
      ['m1', 1],
      ['m2', 1],
      ['m3', 1],
    ])
    expect((await s.usage({ accountId: a.id, to: '2025-01-01' })).map((r) => [r.keyId, r.requests])).toEqual([[k1.id, 1]])
    expect((await s.usage({ accountId: a.id })).reduce((n, r) => n + r.costMicros, 0)).toBe(1150)
    await expect(s.usage({})).rejects.toThrow(/keyId or an accountId/)
  })

  it('records a completion id once: a record sent again changes nothing and answers the balance (issue #32)', async () => {
    const s = await h.open()
    const a = await s.createAccount({ name: 'a', balanceMicros: 1000 })
    const k = await s.createKey({ accountId: a.id, hash: hash(1), redacted: 'x' })
    const at = Date.UTC(2025, 0, 1, 12)
    const u = { id: 'chatcmpl-1', accountId: a.id, keyId: k.id, model: 'm', promptTokens: 3, completionTokens: 4, costMicros: 10, at }
    expect(await s.recordCompletion(u)).toEqual({ balanceMicros: 990 })
    expect(await s.recordCompletion(u)).toEqual({ balanceMicros: 990 })
    // Concurrently too (PostgreSQL sends these in one batch), with a different completion among them.
    const again = await Promise.all([s.recordCompletion(u), s.recordCompletion({ ...u, id: 'chatcmpl-2' }), s.recordCompletion(u)])
    // Each answers the balance its statement saw: before or after chatcmpl-2's debit.
    expect(again[1]!.balanceMicros).toBe(980)
    for (const b of again) expect([980, 990]).toContain(b.balanceMicros)
    expect(await s.usage({ keyId: k.id })).toEqual([{ keyId: k.id, model: 'm', requests: 2, promptTokens: 6, completionTokens: 8, costMicros: 20 }])
    expect((await s.getAccount(a.id))!.balanceMicros).toBe(980)
    // Records without an id all count.
    const { id: _, ...anonymous } = u
    await s.recordCompletion(anonymous)
    await s.recordCompletion(anonymous)
    expect((await s.getAccount(a.id))!.balanceMicros).toBe(960)
    // Ids are forgotten a day after their completion (settleStaleInFlight prunes them), then a record counts again.
    await s.settleStaleInFlight(at, at + 86_400_001)
    await s.recordCompletion(u)
    expect((await s.getAccount(a.id))!.balanceMicros).toBe(950)
  })

  it('a streamed completion recorded twice settles its in-flight row once and bills once', async () => {
    const s = await h.open()
    const a = await s.createAccount({ name: 'a', balanceMicros: 1000 })
    const k = await s.createKey({ accountId: a.id, hash: hash(1), redacted: 'x' })
    const T = Date.UTC(2025, 0, 1, 12)
    await s.saveInFlight('p', [{ id: 'r1', accountId: a.id, keyId: k.id, model: 'm', promptTokens: 4, completionTokens: 5, costMicros: 5, startedAt: T }], T)
    // Recovery took the row (its facade looked gone), then the completion's own record came, twice.
    await s.settleStaleInFlight(T + 1, T + 1)
    const u = { id: 'r1', inFlightId: 'r1', accountId: a.id, keyId: k.id, model: 'm', promptTokens: 4, completionTokens: 9, costMicros: 9, at: T + 2 }
    await s.recordCompletion(u)
    await s.recordCompletion(u)
    expect(await s.usage({ keyId: k.id })).toEqual([{ keyId: k.id, model: 'm', requests: 1, promptTokens: 4, completionTokens: 9, costMicros: 9 }])
    expect((await s.getAccount(a.id))!.balanceMicros).toBe(991)
    expect(await h.inflight(s)).toEqual([])
  })

  it('keeps responses per account: saved, replaced, read and deleted by their own account only', async () => {
    const s = await h.open()
    const a = await s.createAccount({ name: 'a' })
    const b = await s.createAccount({ name: 'b' })
    const r = { id: 'resp_1', accountId: a.id, createdAt: 1_790_000_000, response: '{"id":"resp_1"}', inputItems: '[{"role":"user"}]', conversation: '[1,2]' }
    await s.saveResponse(r)
    expect(await s.getResponse(a.id, 'resp_1')).toEqual(r)
    expect(await s.getResponse(b.id, 'resp_1')).toBeNull()
    expect(await s.getResponse(a.id, 'resp_2')).toBeNull()
    await s.saveResponse({ ...r, response: '{"id":"resp_1","status":"completed"}' })
    expect((await s.getResponse(a.id, 'resp_1'))?.response).toBe('{"id":"resp_1","status":"completed"}')
    expect(await s.deleteResponse(b.id, 'resp_1')).toBe(false)
    expect(await s.deleteResponse(a.id, 'resp_1')).toBe(true)
    expect(await s.deleteResponse(a.id, 'resp_1')).toBe(false)
    expect(await s.getResponse(a.id, 'resp_1')).toBeNull()
  })

  it('tells an outage from a refused operation, and answers a ping', async () => {
    const s = await h.open()
    await s.ping()
    const refused = await s.createKey({ accountId: 'acct_missing', hash: hash(3), redacted: 'x' }).catch((e: unknown) => e)
    expect(s.isOutage(refused)).toBe(false)
    expect(s.isOutage(new Error('anything'))).toBe(false)
    expect(s.isOutage(null)).toBe(false)
  })

  it('rolls the usage row back when the debit fails', async () => {
    const s = await h.open()
    const a = await s.createAccount({ name: 'a' })
    const k = await s.createKey({ accountId: a.id, hash: hash(1), redacted: 'x' })
    await expect(
      s.recordCompletion({ accountId: 'acct_gone', keyId: k.id, model: 'm', promptTokens: 1, completionTokens: 1, costMicros: 1, at: Date.now() }),
    ).rejects.toThrow()
    expect(await s.usage({ keyId: k.id })).toEqual([])
  })

  describe('completions in flight', () => {
    const T = Date.UTC(2025, 0, 1, 12)
    async function setup() {
      const s = await h.open()
      const a = await s.createAccount({ name: 'a', balanceMicros: 1000 })
      const k = await s.createKey({ accountId: a.id, hash: hash(1), redacted: 'x' })
      const row = (id: string, completionTokens: number, costMicros = completionTokens) => ({
        id, accountId: a.id, keyId: k.id, model: 'm', promptTokens: 4, completionTokens, costMicros, startedAt: T,
      })
      const total = async () => (await s.usage({ keyId: k.id }))[0] ?? null
      const balance = async () => (await s.getAccount(a.id))!.balanceMicros
      const inflight = () => h.inflight(s)
      return { s, a, k, row, total, balance, inflight }
    }

    it('a completion that ends normally bills exactly once: its final record removes the row it kept up to date', async () => {
      const { s, a, k, row, total, balance, inflight } = await setup()
      await s.saveInFlight('p1', [row('r1', 3)], T + 1)
      await s.saveInFlight('p1', [row('r1', 7)], T + 2)
      expect(await inflight()).toEqual([{ id: 'r1', owner: 'p1', completion_tokens: 7, updated_at: T + 2, settled_at: null }])
      expect(await total()).toBeNull() // nothing billed while it runs
      await s.recordCompletion({ accountId: a.id, keyId: k.id, model: 'm', promptTokens: 4, completionTokens: 9, costMicros: 9, at: T + 3, inFlightId: 'r1' })
      expect(await inflight()).toEqual([])
      expect(await total()).toMatchObject({ requests: 1, promptTokens: 4, completionTokens: 9, costMicros: 9 })
      expect(await balance()).toBe(991)
      // Nothing is left for recovery to bill again.
      expect(await s.settleStaleInFlight(T + 10_000, T + 10_000)).toMatchObject({ completions: 0 })
      expect(await balance()).toBe(991)
    })

    it('recovery settles rows whose owner stopped renewing them, once; live owners keep theirs by renewing', async () => {
      const { s, row, total, balance, inflight } = await setup()
      await s.saveInFlight('dead', [row('r1', 5), row('r2', 6)], T)
      await s.saveInFlight('live', [row('r3', 2)], T)
      await s.saveInFlight('live', [], T + 4000) // renews r3 only
      expect(await s.settleStaleInFlight(T + 3000, T + 5000)).toEqual({ completions: 2, promptTokens: 8, completionTokens: 11, costMicros: 11 })
      expect(await total()).toMatchObject({ requests: 2, promptTokens: 8, completionTokens: 11, costMicros: 11 })
      expect(await balance()).toBe(989)
      expect(await s.settleStaleInFlight(T + 3000, T + 5000)).toMatchObject({ completions: 0 })
      expect(await balance()).toBe(989)
      // A settled row is not brought back or updated by a late save.
      await s.saveInFlight('dead', [row('r1', 50)], T + 6000)
      expect(await inflight()).toEqual([
        { id: 'r1', owner: 'dead', completion_tokens: 5, updated_at: T, settled_at: T + 5000 },
        { id: 'r2', owner: 'dead', completion_tokens: 6, updated_at: T, settled_at: T + 5000 },
        { id: 'r3', owner: 'live', completion_tokens: 2, updated_at: T + 4000, settled_at: null },
      ])
      // Settled rows are forgotten after a day.
      await s.settleStaleInFlight(T, T + 5000 + 86_400_001)
      expect(await inflight()).toEqual([expect.objectContaining({ id: 'r3' })])
    })

    it('one save writes new rows, updates saved ones and renews the rest of its owner\'s, models of any spelling', async () => {
      const { s, row, inflight } = await setup()
      const odd = 'm,{"x"}\\ \'y\' NULL'
      await s.saveInFlight('p', [row('r1', 1), row('r2', 2)], T)
      await s.saveInFlight('q', [row('r9', 9)], T)
      await s.saveInFlight('p', [row('r1', 5), { ...row('r3', 3), model: odd }], T + 10)
      expect(await inflight()).toEqual([
        { id: 'r1', owner: 'p', completion_tokens: 5, updated_at: T + 10, settled_at: null },
        { id: 'r2', owner: 'p', completion_tokens: 2, updated_at: T + 10, settled_at: null },
        { id: 'r3', owner: 'p', completion_tokens: 3, updated_at: T + 10, settled_at: null },
        { id: 'r9', owner: 'q', completion_tokens: 9, updated_at: T, settled_at: null },
      ])
      // The model is billed as written.
      expect(await s.settleStaleInFlight(T + 20, T + 20)).toMatchObject({ completions: 4 })
      expect((await s.usage({ keyId: row('x', 0).keyId })).map((u) => u.model).sort()).toEqual(['m', odd])
    })

    it('a completion that finishes after recovery took its row adds only what it delivered since', async () => {
      const { s, a, k, row, total, balance } = await setup()
      await s.saveInFlight('slow', [row('r1', 5)], T)
      await s.settleStaleInFlight(T + 1, T + 1)
      await s.recordCompletion({ accountId: a.id, keyId: k.id, model: 'm', promptTokens: 4, completionTokens: 8, costMicros: 8, at: T + 2, inFlightId: 'r1' })
      expect(await total()).toMatchObject({ requests: 1, promptTokens: 4, completionTokens: 8, costMicros: 8 })
      expect(await balance()).toBe(992)
    })

    it('a record whose row was never written bills in full', async () => {
      const { s, a, k, total } = await setup()
      await s.recordCompletion({ accountId: a.id, keyId: k.id, model: 'm', promptTokens: 1, completionTokens: 2, costMicros: 3, at: T, inFlightId: 'never-saved' })
      expect(await total()).toMatchObject({ requests: 1, promptTokens: 1, completionTokens: 2, costMicros: 3 })
    })
  })
}
