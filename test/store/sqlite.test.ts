import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { MIGRATIONS, PG_MIGRATIONS } from '../../src/store/migrations.js'
import { DB_FILE, migrate, SqliteStore } from '../../src/store/sqlite.js'
import { storeContract } from './store-contract.js'

const stores: SqliteStore[] = []
const open = (opts: ConstructorParameters<typeof SqliteStore>[0] = { file: ':memory:' }): SqliteStore => {
  const s = new SqliteStore(opts)
  stores.push(s)
  return s
}
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close()
})

const hash = (n: number): Buffer => Buffer.alloc(32, n)

describe('SqliteStore', () => {
  storeContract({
    open: async () => open(),
    columns: async (table) => {
      const s = open()
      return (s.db.prepare(`PRAGMA table_info(${table})`).all() as { name: string }[]).map((c) => c.name)
    },
    inflight: async (s) => s.db.prepare('SELECT id, owner, completion_tokens, updated_at, settled_at FROM inflight ORDER BY id').all(),
  })

  it('keeps the PostgreSQL schema in step: one migration there for each here', () => {
    expect(PG_MIGRATIONS.length).toBe(MIGRATIONS.length)
  })

  it('creates its file under the data directory, in WAL mode, at the latest schema version', () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'onnxd-store-')), 'nested', 'data')
    const s = open({ dataDir: dir })
    expect(s.db.location()).toBe(join(dir, DB_FILE))
    expect(s.db.pragma('journal_mode', { simple: true })).toBe('wal')
    expect(s.db.pragma('user_version', { simple: true })).toBe(MIGRATIONS.length)
  })

  it('migrates once: reopening an existing file applies nothing new and keeps the data', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'onnxd-store-'))
    const a = await open({ dataDir: dir }).createAccount({ name: 'kept' })
    await stores.pop()!.close()
    const again = open({ dataDir: dir })
    expect(migrate(again.db)).toBe(MIGRATIONS.length)
    expect((await again.getAccount(a.id))?.name).toBe('kept')
  })

  it('refuses a database from a newer onnxd', () => {
    const { db } = open()
    db.pragma(`user_version = ${MIGRATIONS.length + 1}`)
    expect(() => migrate(db)).toThrow(/newer than this onnxd/)
  })

  it('keeps in-flight rows across a reopen of the file (what a restart after a crash sees)', async () => {
    const T = Date.UTC(2025, 0, 1, 12)
    const dir = mkdtempSync(join(tmpdir(), 'onnxd-store-'))
    const s = open({ dataDir: dir })
    const a = await s.createAccount({ name: 'a', balanceMicros: 100 })
    const k = await s.createKey({ accountId: a.id, hash: hash(1), redacted: 'x' })
    await s.saveInFlight('p', [{ id: 'r', accountId: a.id, keyId: k.id, model: 'm', promptTokens: 3, completionTokens: 4, costMicros: 7, startedAt: T }], T)
    await stores.pop()!.close()
    const again = open({ dataDir: dir })
    expect(await again.settleStaleInFlight(T + 1, T + 1)).toEqual({ completions: 1, promptTokens: 3, completionTokens: 4, costMicros: 7 })
    expect((await again.getAccount(a.id))!.balanceMicros).toBe(93)
  })

  it('lets a second connection (the operator CLI) write while the server holds the file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'onnxd-store-'))
    const server = open({ dataDir: dir })
    const cli = open({ dataDir: dir })
    const a = await server.createAccount({ name: 'a', balanceMicros: 10 })
    await cli.creditAccount(a.id, 5)
    expect((await server.getAccount(a.id))?.balanceMicros).toBe(15)
  })

  it("calls SQLite's own failures of the file outages: locked past busy_timeout, full, read-only; a refused write is none", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'onnxd-store-'))
    const server = open({ dataDir: dir })
    const cli = open({ dataDir: dir })
    const a = await server.createAccount({ name: 'a' })
    const failure = (p: Promise<unknown>) => p.then(() => expect.unreachable('the call succeeded'), (e: unknown) => e)

    // Another connection holds the write lock for longer than this one waits.
    cli.db.pragma('busy_timeout = 20')
    server.db.exec('BEGIN IMMEDIATE')
    const busy = await failure(cli.creditAccount(a.id, 5))
    server.db.exec('ROLLBACK')
    expect(busy).toMatchObject({ message: 'database is locked' })
    expect(cli.isOutage(busy)).toBe(true)

    // The file may not grow: the write that needs a new page fails, and its transaction leaves nothing behind.
    const full = open({ dataDir: mkdtempSync(join(tmpdir(), 'onnxd-store-')) })
    const b = await full.createAccount({ name: 'b', balanceMicros: 100 })
    const k = await full.createKey({ accountId: b.id, hash: hash(2), redacted: 'x' })
    full.db.pragma(`max_page_count = ${full.db.pragma('page_count', { simple: true }) as number}`)
    const rows = Array.from({ length: 50 }, (_, i) => ({ id: `r${i}-${'x'.repeat(200)}`, accountId: b.id, keyId: k.id, model: 'm', promptTokens: 1, completionTokens: 1, costMicros: 1, startedAt: 1 }))
    const diskFull = await failure(full.saveInFlight('p', rows, 1))
    expect(diskFull).toMatchObject({ message: 'database or disk is full' })
    expect(full.isOutage(diskFull)).toBe(true)
    expect(full.db.isTransaction).toBe(false)
    expect(full.db.prepare('SELECT count(*) AS n FROM inflight').get()).toEqual({ n: 0 })

    cli.db.pragma('query_only = 1')
    const readOnly = await failure(cli.createAccount({ name: 'c' }))
    expect(readOnly).toMatchObject({ message: 'attempt to write a readonly database' })
    expect(cli.isOutage(readOnly)).toBe(true)

    const refused = await failure(server.createKey({ accountId: 'acct_missing', hash: hash(3), redacted: 'x' }))
    expect(refused).toMatchObject({ message: 'FOREIGN KEY constraint failed' })
    expect(server.isOutage(refused)).toBe(false)
  })

  it('finds a key by its hash and gives the hash back as a Buffer, as the PostgreSQL store does', async () => {
    const s = open()
    const a = await s.createAccount({ name: 'a' })
    await s.createKey({ accountId: a.id, hash: hash(7), redacted: 'x' })
    const found = await s.findKeyByHash(hash(7))
    expect(Buffer.isBuffer(found?.hash)).toBe(true)
    expect(found?.hash.equals(hash(7))).toBe(true)
    expect(await s.findKeyByHash(hash(8))).toBeNull()
  })
})
