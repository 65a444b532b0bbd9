// PostgresStore: the shared behavioural suite (store-contract.ts) against a real PostgreSQL, plus what only a
// networked store shares with other facades: concurrent debits from several connections, and migrations run once by
// facades starting together. Skipped, with the reason, when no server can be had (test/helpers/servers.ts).
import { afterAll, afterEach, describe, expect, it } from 'vitest'
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
