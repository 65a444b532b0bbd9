// The embedded store: accounts, keys, usage and billing in one SQLite file (WAL), through @photostructure/sqlite:
// node:sqlite's API for Node 20 with prebuilt binaries inside its npm package, so installing it compiles and downloads
// nothing; enhance() adds better-sqlite3's pragma() and transaction(). Imports: store interfaces, rows, migrations, ids,
// shared errors.
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { DatabaseSync, enhance, type DatabaseSyncInstance, type EnhancedDatabaseSync } from '@photostructure/sqlite'
import { OnnxdError } from '../shared/errors.js'
import { newAccountId, newKeyId } from './ids.js'
import { MIGRATIONS } from './migrations.js'
import type {
  Account,
  ApiKey,
  CompletionUsage,
  InFlightCompletion,
  KeyLookup,
  NewAccount,
  NewApiKey,
  ProfilePatch,
  SettledInFlight,
  Store,
  StoredResponse,
  Subscription,
  UsageQuery,
  UsageRow,
} from './interfaces.js'
import {
  addSettled,
  BILLED_RETENTION_MS,
  dayOf,
  INFLIGHT_SAVE_COLUMNS,
  INFLIGHT_SAVE_CONFLICT,
  nowS,
  RESPONSE_UPSERT,
  SELECT_KEY_WITH_ACCOUNT,
  SETTLED_RETENTION_MS,
  toAccount,
  toKey,
  toKeyLookup,
  toStoredResponse,
  toUsage,
  unsettledRest,
  type AccountRow,
  type InFlightRow,
  type KeyRow,
  type KeyWithAccountRow,
  type ResponseRow,
  type UsageDbRow,
} from './rows.js'

export const DB_FILE = 'onnxd.sqlite'

export interface SqliteStoreOptions {
  /** Directory holding the database file; created if missing. Ignored when `file` is `:memory:`. */
  dataDir?: string
  /** A file path, or `:memory:` for tests. Default: `<dataDir>/onnxd.sqlite`. */
  file?: string
}

/** A connection to the store's database file: node:sqlite's API plus better-sqlite3's pragma() and transaction(). */
export type Database = EnhancedDatabaseSync<DatabaseSyncInstance>

/** A prepared statement typed by its parameters and rows (the driver types both as any). */
interface Statement<P extends unknown[], R> {
  run(...params: P): { changes: number }
  get(...params: P): R | undefined
  all(...params: P): R[]
}

/** The key row as the driver reads it: a BLOB comes back as a Uint8Array, which the key lookup turns into a Buffer. */
type KeyWithAccountDbRow = Omit<KeyWithAccountRow, 'hash'> & { hash: Uint8Array }

/** Applies pending migrations in one transaction each; returns the schema version reached. */
export function migrate(db: Database): number {
  let version = db.pragma('user_version', { simple: true }) as number
  if (version > MIGRATIONS.length) {
    throw new OnnxdError('config', `database schema version ${version} is newer than this onnxd (${MIGRATIONS.length})`)
  }
  for (; version < MIGRATIONS.length; version++) {
    const sql = MIGRATIONS[version]!
    const next = version + 1
    db.transaction(() => {
      db.exec(sql)
      db.pragma(`user_version = ${next}`)
    })()
  }
  return version
}

function prepareStatements(db: Database) {
  const prepare = <P extends unknown[] = [], R = never>(sql: string): Statement<P, R> => db.prepare(sql) as Statement<P, R>
  return {
    insertAccount: prepare<[string, string, string | null, number, Subscription, number]>(
      'INSERT INTO accounts (id, name, email, balance_micros, subscription, created_at) VALUES (?, ?, ?, ?, ?, ?)',
    ),
    getAccount: prepare<[string], AccountRow>('SELECT * FROM accounts WHERE id = ?'),
    listAccounts: prepare<[], AccountRow>('SELECT * FROM accounts ORDER BY created_at, id'),
    updateProfile: prepare<[{ id: string; name: string | null; email: string | null; setEmail: number }], AccountRow>(
      `UPDATE accounts SET name = coalesce(@name, name), email = CASE WHEN @setEmail THEN @email ELSE email END
       WHERE id = @id RETURNING *`,
    ),
    credit: prepare<[number, string], AccountRow>(
      'UPDATE accounts SET balance_micros = balance_micros + ? WHERE id = ? RETURNING *',
    ),
    setSubscription: prepare<[Subscription, string], AccountRow>(
      'UPDATE accounts SET subscription = ? WHERE id = ? RETURNING *',
    ),
    insertKey: prepare<[string, string, string | null, Buffer, string, number | null, number], KeyRow>(
      `INSERT INTO api_keys (id, account_id, name, hash, redacted, rpm_limit, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)
       RETURNING *`,
    ),
    findKey: prepare<[Buffer], KeyWithAccountDbRow>(
      `${SELECT_KEY_WITH_ACCOUNT} WHERE k.hash = ?`,
    ),
    getKey: prepare<[string], KeyRow>('SELECT * FROM api_keys WHERE id = ?'),
    listKeys: prepare<[string], KeyRow>('SELECT * FROM api_keys WHERE account_id = ? ORDER BY created_at, id'),
    revokeKey: prepare<[number, string, string | null, string | null], KeyRow>(
      `UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ? AND (? IS NULL OR account_id = ?)
       RETURNING *`,
    ),
    upsertUsage: prepare<[string, string, string, string, number, number, number, number]>(
      `INSERT INTO usage (key_id, account_id, model, day, requests, prompt_tokens, completion_tokens, cost_micros)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (key_id, model, day) DO UPDATE SET
         requests = requests + excluded.requests,
         prompt_tokens = prompt_tokens + excluded.prompt_tokens,
         completion_tokens = completion_tokens + excluded.completion_tokens,
         cost_micros = cost_micros + excluded.cost_micros`,
    ),
    touchKey: prepare<[number, string]>('UPDATE api_keys SET last_used_at = ? WHERE id = ?'),
    markBilled: prepare<[string, number]>('INSERT INTO billed (id, billed_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING'),
    forgetBilled: prepare<[number]>('DELETE FROM billed WHERE billed_at < ?'),
    balance: prepare<[string], { balance_micros: number }>('SELECT balance_micros FROM accounts WHERE id = ?'),
    ping: prepare<[], { one: number }>('SELECT 1 AS one'),
    debit: prepare<[number, string], { balance_micros: number }>(
      'UPDATE accounts SET balance_micros = balance_micros - ? WHERE id = ? RETURNING balance_micros',
    ),
    takeInFlight: prepare<[string], InFlightRow>('DELETE FROM inflight WHERE id = ? RETURNING *'),
    saveInFlight: prepare<[string, string, string, string, string, number, number, number, number, number]>(
      `INSERT INTO ${INFLIGHT_SAVE_COLUMNS} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ${INFLIGHT_SAVE_CONFLICT}`,
    ),
    renewInFlight: prepare<[number, string]>('UPDATE inflight SET updated_at = ? WHERE owner = ? AND settled_at IS NULL'),
    staleInFlight: prepare<[number], InFlightRow>(
      'SELECT * FROM inflight WHERE settled_at IS NULL AND updated_at < ? ORDER BY updated_at, id',
    ),
    markSettled: prepare<[number, string]>('UPDATE inflight SET settled_at = ? WHERE id = ?'),
    forgetSettled: prepare<[number]>('DELETE FROM inflight WHERE settled_at IS NOT NULL AND settled_at < ?'),
    saveResponse: prepare<[string, string, number, string, string, string]>(RESPONSE_UPSERT(['?', '?', '?', '?', '?', '?'])),
    getResponse: prepare<[string, string], ResponseRow>('SELECT * FROM responses WHERE id = ? AND account_id = ?'),
    deleteResponse: prepare<[string, string]>('DELETE FROM responses WHERE id = ? AND account_id = ?'),
  }
}

export class SqliteStore implements Store {
  readonly db: Database
  private readonly q: ReturnType<typeof prepareStatements>
  private readonly record: (u: CompletionUsage) => { balanceMicros: number }
  private readonly save: (owner: string, rows: readonly InFlightCompletion[], nowMs: number) => void
  private readonly settleStale: (staleBeforeMs: number, nowMs: number) => SettledInFlight

  constructor(opts: SqliteStoreOptions = {}) {
    let file = opts.file
    if (file !== ':memory:') {
      const dir = opts.dataDir ?? 'data'
      mkdirSync(dir, { recursive: true })
      file ??= join(dir, DB_FILE)
    }
    this.db = enhance(new DatabaseSync(file))
    this.db.pragma('journal_mode = WAL')
    this.db.pragma('synchronous = NORMAL')
    this.db.pragma('foreign_keys = ON')
    this.db.pragma('busy_timeout = 5000')
    migrate(this.db)

    const q = (this.q = prepareStatements(this.db))
    const debit = (micros: number, accountId: string): number => {
      const row = q.debit.get(micros, accountId)
      if (!row) throw new OnnxdError('internal', `account ${accountId} vanished while recording usage`)
      return row.balance_micros
    }
    this.record = this.db.transaction((u: CompletionUsage): { balanceMicros: number } => {
      // A completion recorded before: nothing more (the first record's outcome may not have reached its caller).
      if (u.id !== undefined && q.markBilled.run(u.id, u.at).changes === 0) {
        const row = q.balance.get(u.accountId)
        if (!row) throw new OnnxdError('internal', `account ${u.accountId} vanished while recording usage`)
        return { balanceMicros: row.balance_micros }
      }
      const taken = u.inFlightId !== undefined ? q.takeInFlight.get(u.inFlightId) : undefined
      const { requests, promptTokens, completionTokens, costMicros } = unsettledRest(u, taken)
      if (requests + promptTokens + completionTokens + costMicros > 0) {
        q.upsertUsage.run(u.keyId, u.accountId, u.model, dayOf(u.at), requests, promptTokens, completionTokens, costMicros)
      }
      if (u.touchKey !== false) q.touchKey.run(Math.floor(u.at / 1000), u.keyId)
      return { balanceMicros: debit(costMicros, u.accountId) }
    })
    this.save = this.db.transaction((owner: string, rows: readonly InFlightCompletion[], nowMs: number): void => {
      for (const r of rows) {
        q.saveInFlight.run(r.id, owner, r.keyId, r.accountId, r.model, r.promptTokens, r.completionTokens, r.costMicros, r.startedAt, nowMs)
      }
      q.renewInFlight.run(nowMs, owner)
    })
    this.settleStale = this.db.transaction((staleBeforeMs: number, nowMs: number): SettledInFlight => {
      const out: SettledInFlight = { completions: 0, promptTokens: 0, completionTokens: 0, costMicros: 0 }
      for (const r of q.staleInFlight.all(staleBeforeMs)) {
        q.upsertUsage.run(r.key_id, r.account_id, r.model, dayOf(r.updated_at), 1, r.prompt_tokens, r.completion_tokens, r.cost_micros)
        debit(r.cost_micros, r.account_id)
        q.markSettled.run(nowMs, r.id)
        addSettled(out, r)
      }
      q.forgetSettled.run(nowMs - SETTLED_RETENTION_MS)
      q.forgetBilled.run(nowMs - BILLED_RETENTION_MS)
      return out
    })
  }

  async createAccount(input: NewAccount): Promise<Account> {
    const id = newAccountId()
    this.q.insertAccount.run(
      id,
      input.name,
      input.email ?? null,
      input.balanceMicros ?? 0,
      input.subscription ?? 'active',
      nowS(),
    )
    return toAccount(this.q.getAccount.get(id)!)
  }

  async getAccount(id: string): Promise<Account | null> {
    const r = this.q.getAccount.get(id)
    return r ? toAccount(r) : null
  }

  async listAccounts(): Promise<Account[]> {
    return this.q.listAccounts.all().map(toAccount)
  }

  async updateProfile(id: string, patch: ProfilePatch): Promise<Account | null> {
    const r = this.q.updateProfile.get({
      id,
      name: patch.name ?? null,
      email: patch.email ?? null,
      setEmail: patch.email === undefined ? 0 : 1,
    })
    return r ? toAccount(r) : null
  }

  async creditAccount(id: string, micros: number): Promise<Account | null> {
    if (!Number.isSafeInteger(micros)) throw new OnnxdError('invalid_value', `credit must be an integer number of micros. Given: ${micros}`)
    const r = this.q.credit.get(micros, id)
    return r ? toAccount(r) : null
  }

  async setSubscription(id: string, subscription: Subscription): Promise<Account | null> {
    const r = this.q.setSubscription.get(subscription, id)
    return r ? toAccount(r) : null
  }

  async createKey(input: NewApiKey): Promise<ApiKey> {
    const r = this.q.insertKey.get(
      newKeyId(),
      input.accountId,
      input.name ?? null,
      input.hash,
      input.redacted,
      input.rpmLimit ?? null,
      nowS(),
    )
    return toKey(r!)
  }

  async findKeyByHash(hash: Buffer): Promise<KeyLookup | null> {
    const r = this.q.findKey.get(hash)
    return r ? toKeyLookup({ ...r, hash: Buffer.from(r.hash.buffer, r.hash.byteOffset, r.hash.byteLength) }) : null
  }

  async getKey(id: string): Promise<ApiKey | null> {
    const r = this.q.getKey.get(id)
    return r ? toKey(r) : null
  }

  async listKeys(accountId: string): Promise<ApiKey[]> {
    return this.q.listKeys.all(accountId).map(toKey)
  }

  async revokeKey(accountId: string | null, keyId: string): Promise<ApiKey | null> {
    const r = this.q.revokeKey.get(nowS(), keyId, accountId, accountId)
    return r ? toKey(r) : null
  }

  async recordCompletion(usage: CompletionUsage): Promise<{ balanceMicros: number }> {
    return this.record(usage)
  }

  async saveInFlight(owner: string, rows: readonly InFlightCompletion[], nowMs: number): Promise<void> {
    this.save(owner, rows, nowMs)
  }

  async settleStaleInFlight(staleBeforeMs: number, nowMs: number): Promise<SettledInFlight> {
    return this.settleStale(staleBeforeMs, nowMs)
  }

  async usage(query: UsageQuery): Promise<UsageRow[]> {
    if (query.keyId === undefined && query.accountId === undefined) throw new OnnxdError('internal', 'usage query needs a keyId or an accountId')
    const all: [string, string | undefined][] = [
      ['key_id = ?', query.keyId],
      ['account_id = ?', query.accountId],
      ['day >= ?', query.from],
      ['day <= ?', query.to],
    ]
    const filters = all.filter((f): f is [string, string] => f[1] !== undefined)
    const where = filters.map(([condition]) => condition)
    const params = filters.map(([, value]) => value)
    const sum = this.db.prepare(
      `SELECT key_id, model, sum(requests) AS requests, sum(prompt_tokens) AS prompt_tokens,
              sum(completion_tokens) AS completion_tokens, sum(cost_micros) AS cost_micros
       FROM usage WHERE ${where.join(' AND ')} GROUP BY key_id, model ORDER BY key_id, model`,
    ) as Statement<string[], UsageDbRow>
    const rows = sum.all(...params)
    return rows.map(toUsage)
  }

  async saveResponse(r: StoredResponse): Promise<void> {
    this.q.saveResponse.run(r.id, r.accountId, r.createdAt, r.response, r.inputItems, r.conversation)
  }

  async getResponse(accountId: string, id: string): Promise<StoredResponse | null> {
    const r = this.q.getResponse.get(id, accountId)
    return r ? toStoredResponse(r) : null
  }

  async deleteResponse(accountId: string, id: string): Promise<boolean> {
    return this.q.deleteResponse.run(id, accountId).changes > 0
  }

  async ping(): Promise<void> {
    this.q.ping.get()
  }

  /** SQLite's failures of the file itself (locked past busy_timeout, I/O error, disk full, unopenable, read-only). */
  isOutage(e: unknown): boolean {
    const err = e as { code?: unknown; errcode?: unknown } | null
    // node:sqlite's errors: code ERR_SQLITE_ERROR, errcode SQLite's extended result code (its low byte the primary one).
    return err?.code === 'ERR_SQLITE_ERROR' && typeof err.errcode === 'number' && SQLITE_OUTAGE.has(err.errcode & 0xff)
  }

  async close(): Promise<void> {
    if (this.db.isOpen) this.db.close()
  }
}

/**
 * SQLite's primary result codes that mean the database file cannot be used: BUSY, LOCKED, NOMEM, READONLY, IOERR,
 * FULL, CANTOPEN, PROTOCOL (https://sqlite.org/rescode.html).
 */
const SQLITE_OUTAGE = new Set([5, 6, 7, 8, 10, 13, 14, 15])
