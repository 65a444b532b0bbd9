// PostgresStore: the shared behavioural suite (store-contract.ts) against a real PostgreSQL, plus what only a
// networked store shares with other facades: concurrent debits from several connections, and migrations run once by
// facades starting together. Skipped, with the reason, when no server can be had (test/helpers/servers.ts).
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest'
import { PG_MIGRATIONS } from '../../src/store/migrations.js'
import { migratePostgres, PostgresStore } from '../../src/store/postgres.js'
import { freshDatabase as freshPg, startPostgres } from '../helpers/servers.js'
import { storeContract } from './store-contract.js'

const started = await startPostgres()
if (started.reason) console.warn(`PostgreSQL suites skipped: ${started.reason}`)

/** A new, empty database on the test server; its URL. */
const freshDatabase = (): Promise<string> => freshPg(started.server!.url)

const stores: PostgresStore[] = []
const open = async (url?: string): Promise<PostgresStore> => {
  const s = await PostgresStore.open({ url: url ?? (await freshDatabase()) })
  stores.push(s)
  return s
}
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close()
})
afterAll(async () => {
  await started.server?.stop()
})

const hash = (n: number): Buffer => Buffer.alloc(32, n)

describe.skipIf(started.server === null)(`PostgresStore${started.reason ? ` (skipped: ${started.reason})` : ''}`, () => {
  storeContract({
    open: () => open(),
    columns: async (table) => {
      const s = await open()
      const r = await s.pool.query<{ column_name: string }>('SELECT column_name FROM information_schema.columns WHERE table_name = $1', [table])
      return r.rows.map((x) => x.column_name)
    },
    inflight: async (s) =>
      (await s.pool.query('SELECT id, owner, completion_tokens, updated_at, settled_at FROM inflight ORDER BY id COLLATE "C"')).rows,
  })

  it('migrates once, to the latest version, when several facades open the same database together', async () => {
    const url = await freshDatabase()
    const all = await Promise.all([open(url), open(url), open(url)])
    const v = await all[0]!.pool.query<{ version: number }>('SELECT version FROM onnxd_schema')
    expect(v.rows).toEqual([{ version: PG_MIGRATIONS.length }])
    expect(await migratePostgres(all[1]!.pool)).toBe(PG_MIGRATIONS.length)
    const a = await all[0]!.createAccount({ name: 'seen by all' })
    expect((await all[2]!.getAccount(a.id))?.name).toBe('seen by all')
  })

  it('refuses a database from a newer onnxd', async () => {
    const s = await open()
    await s.pool.query('UPDATE onnxd_schema SET version = $1', [PG_MIGRATIONS.length + 1])
    await expect(migratePostgres(s.pool)).rejects.toThrow(/newer than this onnxd/)
  })

  it('refuses an unreachable server with a config error that does not echo the password', async () => {
    const err = await PostgresStore.open({ url: 'postgres://u:hunter2@127.0.0.1:1/db' }).catch((e: unknown) => e)
    expect(err).toMatchObject({ code: 'config' })
    expect(String((err as Error).message)).toContain('127.0.0.1:1/db')
    expect(String((err as Error).message)).not.toContain('hunter2')
  })

  it('concurrent debits and credits from several facades leave the exact balance', async () => {
    const url = await freshDatabase()
    const facades = await Promise.all([open(url), open(url), open(url), open(url)])
    const a = await facades[0]!.createAccount({ name: 'a', balanceMicros: 1_000_000 })
    const k = await facades[0]!.createKey({ accountId: a.id, hash: hash(1), redacted: 'x' })
    const at = Date.UTC(2025, 0, 1, 12)
    const work: Promise<unknown>[] = []
    for (let i = 0; i < 200; i++) {
      const s = facades[i % facades.length]!
      work.push(s.recordCompletion({ accountId: a.id, keyId: k.id, model: 'm', promptTokens: 1, completionTokens: 2, costMicros: 7, at }))
      if (i % 10 === 0) work.push(s.creditAccount(a.id, 3))
    }
    await Promise.all(work)
    expect((await facades[1]!.getAccount(a.id))!.balanceMicros).toBe(1_000_000 - 200 * 7 + 20 * 3)
    expect(await facades[2]!.usage({ keyId: k.id })).toEqual([
      { keyId: k.id, model: 'm', requests: 200, promptTokens: 200, completionTokens: 400, costMicros: 1400 },
    ])
  })

  it('records completions that end together in shared statements, each exactly, settling their in-flight rows', async () => {
    const s = await open()
    const accounts = await Promise.all([0, 1, 2].map((i) => s.createAccount({ name: `a${i}`, balanceMicros: 10_000 })))
    const keys = await Promise.all(accounts.flatMap((a, i) => [0, 1].map((j) => s.createKey({ accountId: a.id, hash: hash(10 * i + j + 1), redacted: 'x' }))))
    const T = Date.UTC(2025, 0, 1, 12)
    // r0..r9 saved in flight and settled by recovery (3 completion tokens, cost 3 already billed); r10..r19 saved, unsettled.
    const inflight = (i: number) => ({ id: `r${i}`, accountId: keys[i % 6]!.accountId, keyId: keys[i % 6]!.id, model: 'm', promptTokens: 2, completionTokens: 3, costMicros: 3, startedAt: T })
    await s.saveInFlight('dead', Array.from({ length: 10 }, (_, i) => inflight(i)), T)
    expect((await s.settleStaleInFlight(T + 1, T + 1)).completions).toBe(10)
    await s.saveInFlight('me', Array.from({ length: 10 }, (_, i) => inflight(10 + i)), T + 2)
    const statements = vi.spyOn(s.pool, 'query')
    const done = await Promise.all(
      Array.from({ length: 120 }, (_, i) => {
        const k = keys[i % 6]!
        return s.recordCompletion({ accountId: k.accountId, keyId: k.id, model: i % 2 ? 'm' : 'n', promptTokens: 2, completionTokens: 5, costMicros: 5, at: T + 3, ...(i < 20 ? { inFlightId: `r${i}` } : {}) })
      }),
    )
    const sent = statements.mock.calls.filter(([q]) => (q as { name?: string }).name === 'onnxd_record_completions').length
    expect(sent).toBeGreaterThan(0)
    expect(sent).toBeLessThan(120)
    // What recovery billed for r0..r9 and what their own records add beyond it make each of them one whole
    // completion: every key ends with 20 completions of 2 + 5 tokens at 5, as if each had been recorded once.
    for (const a of accounts) expect((await s.getAccount(a.id))!.balanceMicros).toBe(10_000 - 40 * 5)
    for (const k of keys) {
      const rows = await s.usage({ keyId: k.id })
      const sum = (f: (r: (typeof rows)[number]) => number) => rows.reduce((n, r) => n + f(r), 0)
      expect([sum((r) => r.requests), sum((r) => r.promptTokens), sum((r) => r.completionTokens), sum((r) => r.costMicros)]).toEqual([20, 40, 100, 100])
    }
    for (const [i, d] of done.entries()) expect(d.balanceMicros).toBeLessThanOrEqual(10_000 - 5 * Math.floor(i / 6) - 5)
    expect((await s.pool.query('SELECT count(*)::int AS n FROM inflight WHERE settled_at IS NULL')).rows[0].n).toBe(0)
  })

  it('fails only the completion that cannot be recorded when it was sent with others', async () => {
    const s = await open()
    const a = await s.createAccount({ name: 'a', balanceMicros: 100 })
    const k = await s.createKey({ accountId: a.id, hash: hash(1), redacted: 'x' })
    const at = Date.UTC(2025, 0, 1, 12)
    const one = (keyId: string) => s.recordCompletion({ accountId: a.id, keyId, model: 'm', promptTokens: 1, completionTokens: 1, costMicros: 1, at })
    // The first goes out alone; the next four wait for it and go out together, where the unknown key fails the batch.
    const results = await Promise.allSettled([one(k.id), one(k.id), one('key_gone'), one(k.id), one(k.id)])
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'fulfilled'])
    expect((await s.getAccount(a.id))!.balanceMicros).toBe(96)
    expect(await s.usage({ keyId: k.id })).toEqual([{ keyId: k.id, model: 'm', requests: 4, promptTokens: 4, completionTokens: 4, costMicros: 4 }])
  })

  it('bills a completion id once within a shared statement, and after one, with other accounts in the batch (issue #32)', async () => {
    const s = await open()
    const a = await s.createAccount({ name: 'a', balanceMicros: 100 })
    const b = await s.createAccount({ name: 'b', balanceMicros: 100 })
    const ka = await s.createKey({ accountId: a.id, hash: hash(1), redacted: 'x' })
    const kb = await s.createKey({ accountId: b.id, hash: hash(2), redacted: 'y' })
    const at = Date.UTC(2025, 0, 1, 12)
    const rec = (id: string, k = ka) => s.recordCompletion({ id, accountId: k.accountId, keyId: k.id, model: 'm', promptTokens: 1, completionTokens: 2, costMicros: 3, at })
    await rec('c1', kb)
    const statements = vi.spyOn(s.pool, 'query')
    // The first goes out alone; the rest wait for it and go out together: c2 twice, c1 (b's, already billed) again.
    const done = await Promise.all([rec('c0'), rec('c2'), rec('c2'), rec('c1', kb), rec('c3')])
    expect(statements.mock.calls.filter(([q]) => (q as { name?: string }).name === 'onnxd_record_completions')).toHaveLength(1)
    expect((await s.getAccount(a.id))!.balanceMicros).toBe(100 - 3 * 3)
    // b, with nothing new in the batch, still gets its balance.
    expect(done[3]).toEqual({ balanceMicros: 97 })
    expect((await s.getAccount(b.id))!.balanceMicros).toBe(97)
    expect(await s.usage({ keyId: ka.id })).toEqual([{ keyId: ka.id, model: 'm', requests: 3, promptTokens: 3, completionTokens: 6, costMicros: 9 }])
  })

  it('tells an unreachable or shut-down server from a refused statement', async () => {
    const s = await open()
    const down = await PostgresStore.open({ url: 'postgres://u@127.0.0.1:1/db' }).catch((e: unknown) => e)
    expect(down).toMatchObject({ code: 'config' }) // at start: stops start-up
    const refused = await s.pool.query('SELECT * FROM no_such_table').catch((e: unknown) => e)
    expect(s.isOutage(refused)).toBe(false)
    const pool = new (await import('pg')).default.Pool({ connectionString: 'postgres://u@127.0.0.1:1/db' })
    const unreachable = await pool.query('SELECT 1').catch((e: unknown) => e)
    await pool.end()
    expect(s.isOutage(unreachable)).toBe(true)
    for (const code of ['57P01', '57P03', '08006', '53300']) expect(s.isOutage(Object.assign(new Error('x'), { code }))).toBe(true)
    expect(s.isOutage(new Error('Connection terminated unexpectedly'))).toBe(true)
    expect(s.isOutage(Object.assign(new Error('x'), { code: '23503' }))).toBe(false)
  })

  it('looks up keys that come together in shared statements, each its own answer, a revoked key failing at once', async () => {
    const [s, other] = await (async () => {
      const url = await freshDatabase()
      return [await open(url), await open(url)] as const
    })()
    const a = await s.createAccount({ name: 'a', balanceMicros: 100 })
    const b = await s.createAccount({ name: 'b', balanceMicros: 200 })
    const keys = await Promise.all([1, 2, 3].map((n) => s.createKey({ accountId: (n === 3 ? b : a).id, hash: hash(n), redacted: `k${n}` })))
    const statements = vi.spyOn(s.pool, 'query')
    // 1, 2 and 3 several times over, and a hash no key has; the first goes out alone, the rest wait for it.
    const asked = [1, 2, 3, 9, 1, 1, 3, 2, 9, 3].map(hash)
    const found = await Promise.all(asked.map((h) => s.findKeyByHash(h)))
    expect(found.map((f) => f?.key.redacted ?? null)).toEqual(['k1', 'k2', 'k3', null, 'k1', 'k1', 'k3', 'k2', null, 'k3'])
    expect(found.map((f) => f?.account.balanceMicros ?? null)).toEqual([100, 100, 200, null, 100, 100, 200, 100, null, 200])
    for (const [i, f] of found.entries()) if (f) expect(f.hash.equals(asked[i]!)).toBe(true)
    const names = statements.mock.calls.map(([q]) => (q as { name?: string }).name)
    expect(names.filter((n) => n === 'onnxd_find_key')).toHaveLength(1)
    expect(names.filter((n) => n === 'onnxd_find_keys')).toHaveLength(1)
    // Revoked through another facade: the next lookup, batched or not, sees it.
    await other.revokeKey(a.id, keys[0]!.id)
    const again = await Promise.all([hash(1), hash(2), hash(1)].map((h) => s.findKeyByHash(h)))
    expect(again.map((f) => f?.key.revokedAt != null)).toEqual([true, false, true])
  })

  it('fails every lookup of a statement that failed, and answers the next ones', async () => {
    const s = await open()
    const a = await s.createAccount({ name: 'a' })
    await s.createKey({ accountId: a.id, hash: hash(1), redacted: 'x' })
    vi.spyOn(s.pool, 'query').mockRejectedValueOnce(new Error('connection reset'))
    const results = await Promise.allSettled([s.findKeyByHash(hash(1)), s.findKeyByHash(hash(1)), s.findKeyByHash(hash(1))])
    expect(results.map((r) => r.status)).toEqual(['rejected', 'fulfilled', 'fulfilled'])
    expect((await s.findKeyByHash(hash(1)))?.key.redacted).toBe('x')
  })

  it('sends a usage statement again when PostgreSQL rolled it back as a deadlock victim', async () => {
    const s = await open()
    const a = await s.createAccount({ name: 'a', balanceMicros: 100 })
    const k = await s.createKey({ accountId: a.id, hash: hash(1), redacted: 'x' })
    const statements = vi.spyOn(s.pool, 'query').mockRejectedValueOnce(Object.assign(new Error('deadlock detected'), { code: '40P01' }))
    await expect(s.recordCompletion({ accountId: a.id, keyId: k.id, model: 'm', promptTokens: 1, completionTokens: 1, costMicros: 1, at: Date.now() })).resolves.toEqual({ balanceMicros: 99 })
    expect(statements).toHaveBeenCalledTimes(2)
    expect((await s.usage({ keyId: k.id }))[0]).toMatchObject({ requests: 1, costMicros: 1 })
  })

  it('several facades recording for several accounts at once leave every balance and usage row exact', async () => {
    const url = await freshDatabase()
    const facades = await Promise.all([open(url), open(url), open(url)])
    const accounts = await Promise.all([0, 1, 2, 3].map((i) => facades[0]!.createAccount({ name: `a${i}`, balanceMicros: 100_000 })))
    const keys = await Promise.all(accounts.map((a, i) => facades[0]!.createKey({ accountId: a.id, hash: hash(i + 1), redacted: 'x' })))
    const at = Date.UTC(2025, 0, 1, 12)
    const work: Promise<unknown>[] = []
    // Each facade walks the accounts in its own order, so that concurrent batches name the same rows in different orders.
    for (let i = 0; i < 600; i++) {
      const f = i % 3
      const k = keys[(f === 1 ? 3 - (i % 4) : (i + f) % 4)]!
      work.push(facades[f]!.recordCompletion({ accountId: k.accountId, keyId: k.id, model: 'm', promptTokens: 1, completionTokens: 1, costMicros: 2, at }))
    }
    await Promise.all(work)
    for (const [i, a] of accounts.entries()) {
      expect((await facades[1]!.getAccount(a.id))!.balanceMicros).toBe(100_000 - 150 * 2)
      expect((await facades[2]!.usage({ keyId: keys[i]!.id }))[0]).toMatchObject({ requests: 150, costMicros: 300 })
    }
  })

  it('facades recovering at the same time settle each stale in-flight row exactly once', async () => {
    const url = await freshDatabase()
    const facades = await Promise.all([open(url), open(url), open(url)])
    const a = await facades[0]!.createAccount({ name: 'a', balanceMicros: 1000 })
    const k = await facades[0]!.createKey({ accountId: a.id, hash: hash(1), redacted: 'x' })
    const T = Date.UTC(2025, 0, 1, 12)
    const rows = Array.from({ length: 30 }, (_, i) => ({
      id: `r${i}`, accountId: a.id, keyId: k.id, model: 'm', promptTokens: 1, completionTokens: 1, costMicros: 2, startedAt: T,
    }))
    await facades[0]!.saveInFlight('dead', rows, T)
    const settled = await Promise.all(facades.map((s) => s.settleStaleInFlight(T + 1, T + 1)))
    expect(settled.reduce((n, x) => n + x.completions, 0)).toBe(30)
    expect((await facades[0]!.getAccount(a.id))!.balanceMicros).toBe(1000 - 60)
    expect((await facades[0]!.usage({ keyId: k.id }))[0]).toMatchObject({ requests: 30, costMicros: 60 })
  })
})
