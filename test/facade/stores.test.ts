// Which store and counters a facade opens: SQLite and in-process counters with nothing configured, PostgreSQL at
// ONNXD_DATABASE_URL, Redis at ONNXD_REDIS_URL; a malformed URL is refused without echoing it (it may hold a password).
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { loadFacadeOptions } from '../../src/facade/options.js'
import { openRateLimits, openStore } from '../../src/facade/stores.js'
import { MemoryRateLimitStore } from '../../src/store/memory-rate-limit.js'
import { PostgresStore } from '../../src/store/postgres.js'
import { RedisRateLimitStore } from '../../src/store/redis-rate-limit.js'
import { SqliteStore } from '../../src/store/sqlite.js'
import { startPostgres } from '../helpers/servers.js'

const pgServer = await startPostgres()
afterAll(async () => {
  await pgServer.server?.stop()
})

describe('facade store selection', () => {
  it('defaults to SQLite in the data directory and in-process counters', async () => {
    const opts = loadFacadeOptions({ ONNXD_DATA_DIR: mkdtempSync(join(tmpdir(), 'onnxd-stores-')) })
    const store = await openStore(opts)
    const limits = openRateLimits(opts, () => undefined)
    expect(store).toBeInstanceOf(SqliteStore)
    expect(limits).toBeInstanceOf(MemoryRateLimitStore)
    await store.close()
    await limits.close()
  })

  it('opens Redis counters at ONNXD_REDIS_URL', async () => {
    const limits = openRateLimits(loadFacadeOptions({ ONNXD_REDIS_URL: 'redis://127.0.0.1:1' }), () => undefined)
    expect(limits).toBeInstanceOf(RedisRateLimitStore)
    await limits.close()
  })

  it('refuses URLs of the wrong scheme, naming the variable, never echoing the value', () => {
    const err = (() => {
      try {
        loadFacadeOptions({ ONNXD_DATABASE_URL: 'mysql://root:hunter2@db/x', ONNXD_REDIS_URL: 'http://:hunter3@cache' })
      } catch (e) {
        return e as Error
      }
      return null
    })()
    expect(err?.message).toMatch(/ONNXD_DATABASE_URL, --database-url\): must be a postgres:\/\/ URL/)
    expect(err?.message).toMatch(/ONNXD_REDIS_URL, --redis-url\): must be a redis:\/\/ or rediss:\/\/ URL/)
    expect(err?.message).not.toMatch(/hunter/)
  })

  it.skipIf(pgServer.server === null)(`opens PostgreSQL at ONNXD_DATABASE_URL${pgServer.reason ? ` (skipped: ${pgServer.reason})` : ''}`, async () => {
    const store = await openStore(loadFacadeOptions({ ONNXD_DATABASE_URL: pgServer.server!.url }))
    try {
      expect(store).toBeInstanceOf(PostgresStore)
      const a = await store.createAccount({ name: 'in postgres' })
      expect((await store.getAccount(a.id))?.name).toBe('in postgres')
    } finally {
      await store.close()
    }
  })

  it.skipIf(pgServer.server === null)(`holds at most ONNXD_DATABASE_POOL_SIZE connections (default 4), queueing the rest${pgServer.reason ? ` (skipped: ${pgServer.reason})` : ''}`, async () => {
    const url = pgServer.server!.url
    for (const [env, most] of [[{ ONNXD_DATABASE_URL: url }, 4], [{ ONNXD_DATABASE_URL: url, ONNXD_DATABASE_POOL_SIZE: '2' }, 2]] as const) {
      const store = (await openStore(loadFacadeOptions(env))) as PostgresStore
      try {
        const a = await store.createAccount({ name: 'pooled' })
        // Each query holds its connection for 50 ms: twelve at once need more than the pool has.
        const held = await Promise.all(Array.from({ length: 12 }, () => store.pool.query('SELECT pg_sleep(0.05), $1::text AS id', [a.id])))
        expect(held.map((r) => r.rows[0].id)).toEqual(Array(12).fill(a.id))
        expect(store.pool.totalCount).toBe(most)
      } finally {
        await store.close()
      }
    }
    expect(() => loadFacadeOptions({ ONNXD_DATABASE_POOL_SIZE: '0' })).toThrow(/databasePoolSize \(ONNXD_DATABASE_POOL_SIZE, --database-pool-size\): must be >= 1/)
  })
})
