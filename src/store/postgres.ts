// The shared store: accounts, keys, usage and billing in PostgreSQL (node-postgres pool), for several facades at once.
// Chosen by ONNXD_DATABASE_URL. Every balance change is one atomic `UPDATE ... RETURNING`; a completion's usage row,
// its debit and its in-flight row are written in one transaction; recovery takes stale in-flight rows with
// `FOR UPDATE SKIP LOCKED`, so facades sharing the database never settle one row twice.
// Imports: store interfaces, rows, migrations, ids, shared errors.
import pg from 'pg'
import { OnnxdError } from '../shared/errors.js'
import { fulfilled, GroupCommit, rejected } from './group-commit.js'
import { newAccountId, newKeyId } from './ids.js'
import { PG_MIGRATIONS } from './migrations.js'
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
  type AccountRow,
  type InFlightRow,
  type KeyRow,
  type KeyWithAccountRow,
  type ResponseRow,
  type UsageDbRow,
} from './rows.js'

/** Serialises migrations of facades starting together (an arbitrary constant: "onnx"). */
const MIGRATION_LOCK = 0x6f6e6e78

const INT8_OID = 20
/** BIGINT columns as numbers: every stored amount is a safe integer (micros, tokens, seconds). */
const types = {
  getTypeParser(oid: number, format?: string) {
    if (oid === INT8_OID) return (v: string) => Number(v)
    return format === 'binary' ? pg.types.getTypeParser(oid, 'binary') : pg.types.getTypeParser(oid, 'text')
  },
} as pg.CustomTypesConfig

type Queryable = Pick<pg.PoolClient, 'query'>

const USAGE_INSERT = 'INSERT INTO usage (key_id, account_id, model, day, requests, prompt_tokens, completion_tokens, cost_micros)'
/** A day's usage row exists already: add to it. */
const USAGE_ADD = `
  ON CONFLICT (key_id, model, day) DO UPDATE SET
    requests = usage.requests + excluded.requests,
    prompt_tokens = usage.prompt_tokens + excluded.prompt_tokens,
    completion_tokens = usage.completion_tokens + excluded.completion_tokens,
    cost_micros = usage.cost_micros + excluded.cost_micros`

const UPSERT_USAGE = `${USAGE_INSERT} VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ${USAGE_ADD}`

const FIND_KEY = `${SELECT_KEY_WITH_ACCOUNT} WHERE k.hash = $1`
/** The same for several keys: $1 their hashes. */
const FIND_KEYS = `${SELECT_KEY_WITH_ACCOUNT} WHERE k.hash = ANY($1::bytea[])`

/**
 * The rule of unsettledRest (rows.ts) in SQL: what a completion with these counts adds beyond `t`, its in-flight row
 * as the same statement took it. With no such row, or one recovery had not settled, that is all of the completion.
 */
const restColumns = (promptTokens: string, completionTokens: string, costMicros: string): string => `
      CASE WHEN t.settled_at IS NULL THEN 1 ELSE 0 END AS requests,
      CASE WHEN t.settled_at IS NULL THEN ${promptTokens} ELSE GREATEST(0, ${promptTokens} - t.prompt_tokens) END AS prompt_tokens,
      CASE WHEN t.settled_at IS NULL THEN ${completionTokens} ELSE GREATEST(0, ${completionTokens} - t.completion_tokens) END AS completion_tokens,
      CASE WHEN t.settled_at IS NULL THEN ${costMicros} ELSE GREATEST(0, ${costMicros} - t.cost_micros) END AS cost_micros`

/**
 * recordCompletion's statement for one completion (named, so planned once per connection): $1 key, $2 account, $3
 * model, $4 day, $5..$7 tokens and cost, $8 in-flight id, $9 last_used_at, $10 the completion's id, $11 its time (ms).
 * A completion id already in `billed` changes nothing (`go` is false); otherwise its in-flight row (if any) is taken
 * and only the rest is added. Returns the account's new balance.
 */
const RECORD_COMPLETION = `
  WITH fresh AS (
    INSERT INTO billed (id, billed_at) SELECT $10::text, $11::bigint WHERE $10::text IS NOT NULL
    ON CONFLICT (id) DO NOTHING RETURNING id
  ), go AS (
    SELECT $10::text IS NULL OR EXISTS (SELECT 1 FROM fresh) AS ok
  ), taken AS (
    DELETE FROM inflight WHERE id = $8::text AND (SELECT ok FROM go) RETURNING settled_at, prompt_tokens, completion_tokens, cost_micros
  ), rest AS (
    SELECT ${restColumns('$5::bigint', '$6::bigint', '$7::bigint')}
    FROM (SELECT 1) AS one LEFT JOIN taken AS t ON true WHERE (SELECT ok FROM go)
  ), added AS (
    ${USAGE_INSERT}
    SELECT $1, $2, $3, $4, requests, prompt_tokens, completion_tokens, cost_micros FROM rest
    WHERE requests + prompt_tokens + completion_tokens + cost_micros > 0
    ${USAGE_ADD}
  ), touched AS (
    UPDATE api_keys SET last_used_at = $9::bigint WHERE id = $1 AND $9::bigint IS NOT NULL
  )
  UPDATE accounts SET balance_micros = balance_micros - coalesce((SELECT cost_micros FROM rest), 0) WHERE id = $2
  RETURNING id, balance_micros`

/**
 * The same for a batch of completions: $1..$11 are their columns as arrays (in-flight ids, last_used_at and
 * completion ids may be null; completion ids are distinct, recordBatch sees to it). Completions whose id is already
 * in `billed` drop out (`todo`); the rests of the others are summed per usage row and per account, so that each row
 * is written once. Usage rows are upserted in key, model, day order, so statements of several facades lock them in
 * one order; accounts are updated in the plan's order, and a statement PostgreSQL picks as a deadlock victim is rolled
 * back whole and sent again (recordBatch). It costs PostgreSQL about 0.2 ms more than RECORD_COMPLETION for a single
 * completion (measured on an otherwise idle server), hence two statements. Returns the new balance of each account
 * of the batch.
 */
const RECORD_COMPLETIONS = `
  WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::text[], $10::text[], $11::bigint[])
      AS i(key_id, account_id, model, day, prompt_tokens, completion_tokens, cost_micros, inflight_id, id, at)
  ), fresh AS (
    INSERT INTO billed (id, billed_at) SELECT id, at FROM input WHERE id IS NOT NULL
    ON CONFLICT (id) DO NOTHING RETURNING id
  ), todo AS (
    SELECT * FROM input WHERE id IS NULL OR id IN (SELECT id FROM fresh)
  ), taken AS (
    DELETE FROM inflight WHERE id IN (SELECT inflight_id FROM todo) RETURNING id, settled_at, prompt_tokens, completion_tokens, cost_micros
  ), rest AS (
    SELECT i.key_id, i.account_id, i.model, i.day, ${restColumns('i.prompt_tokens', 'i.completion_tokens', 'i.cost_micros')}
    FROM todo AS i LEFT JOIN taken AS t ON t.id = i.inflight_id
  ), added AS (
    ${USAGE_INSERT}
    SELECT key_id, account_id, model, day, sum(requests), sum(prompt_tokens), sum(completion_tokens), sum(cost_micros) FROM rest
    GROUP BY key_id, account_id, model, day
    HAVING sum(requests) + sum(prompt_tokens) + sum(completion_tokens) + sum(cost_micros) > 0
    ORDER BY key_id, model, day
    ${USAGE_ADD}
  ), touched AS (
    UPDATE api_keys SET last_used_at = u.at
    FROM (SELECT key_id, max(used_at) AS at FROM unnest($1::text[], $9::bigint[]) AS x(key_id, used_at) WHERE used_at IS NOT NULL GROUP BY key_id) AS u
    WHERE id = u.key_id
  )
  UPDATE accounts SET balance_micros = balance_micros - d.cost
  FROM (
    SELECT a.account_id, coalesce(sum(r.cost_micros), 0) AS cost
    FROM (SELECT DISTINCT account_id FROM input) AS a LEFT JOIN rest AS r ON r.account_id = a.account_id
    GROUP BY a.account_id
  ) AS d WHERE id = d.account_id
  RETURNING id, balance_micros`

/** Most completions one usage statement records. */
const MAX_RECORD_BATCH = 256

/** Most keys one lookup statement looks up. */
const MAX_LOOKUP_BATCH = 256

/** PostgreSQL's deadlock_detected: the statement was rolled back whole and may run again. */
const DEADLOCK = '40P01'

/**
 * SQLSTATEs of an unusable server: class 08 (connection exception), 53 (insufficient resources: disk full, out of
 * memory, too many connections), 57P01..57P03 (shut down by an operator, crash shutdown, cannot connect now).
 */
const OUTAGE_SQLSTATE = /^(08|53|57P0[123])/
/** Socket errors of a server that cannot be reached. */
const OUTAGE_ERRNO = new Set(['ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ENOTFOUND', 'EAI_AGAIN'])
/** node-postgres's own errors (no code) for a connection lost, never made in time, or broken. */
const OUTAGE_MESSAGE = /Connection terminated|timeout exceeded when trying to connect|connection error and is not queryable|Query read timeout/i

/** Whether an error of node-postgres means the server could not be reached or could not work (see Store.isOutage). */
export function isPostgresOutage(e: unknown): boolean {
  if (e === null || typeof e !== 'object') return false
  const code = (e as { code?: unknown }).code
  if (typeof code === 'string') return /^[0-9A-Z]{5}$/.test(code) ? OUTAGE_SQLSTATE.test(code) : OUTAGE_ERRNO.has(code)
  // Node's connect to a name with several addresses fails with an AggregateError of the attempts.
  if (e instanceof AggregateError) return e.errors.some(isPostgresOutage)
  return e instanceof Error && OUTAGE_MESSAGE.test(e.message)
}

/**
 * Longest wait for a connection (a new one, or a free one of the pool): a server that drops packets fails requests
 * in this time instead of holding them. node-postgres waits forever by default.
 */
const CONNECT_TIMEOUT_MS = 5000

/**
 * saveInFlight's statement: $1 owner, $2 now (ms), $3..$10 the rows' columns as arrays. Upserts the rows (a row
 * already settled is left alone) and renews the lease of the owner's other unsettled rows.
 */
const SAVE_INFLIGHT = `
  WITH saved AS (
    INSERT INTO ${INFLIGHT_SAVE_COLUMNS}
    SELECT r.id, $1::text, r.key_id, r.account_id, r.model, r.prompt_tokens, r.completion_tokens, r.cost_micros,
           r.started_at, $2::bigint
    FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[])
      AS r(id, key_id, account_id, model, prompt_tokens, completion_tokens, cost_micros, started_at)
    ${INFLIGHT_SAVE_CONFLICT}
  )
  UPDATE inflight SET updated_at = $2::bigint WHERE owner = $1::text AND settled_at IS NULL AND id <> ALL($3::text[])`

async function debit(c: Queryable, micros: number, accountId: string): Promise<number> {
  const r = await c.query<{ balance_micros: number }>(
    'UPDATE accounts SET balance_micros = balance_micros - $1 WHERE id = $2 RETURNING balance_micros',
    [micros, accountId],
  )
  if (r.rowCount === 0) throw new OnnxdError('internal', `account ${accountId} vanished while recording usage`)
  return r.rows[0]!.balance_micros
}

/** Applies pending migrations (one transaction each, under an advisory lock); returns the schema version reached. */
export async function migratePostgres(pool: pg.Pool): Promise<number> {
  const c = await pool.connect()
  try {
    await c.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK])
    await c.query('CREATE TABLE IF NOT EXISTS onnxd_schema (version INTEGER NOT NULL)')
    await c.query('INSERT INTO onnxd_schema (version) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM onnxd_schema)')
    let version = (await c.query<{ version: number }>('SELECT version FROM onnxd_schema')).rows[0]!.version
    if (version > PG_MIGRATIONS.length) {
      throw new OnnxdError('config', `database schema version ${version} is newer than this onnxd (${PG_MIGRATIONS.length})`)
    }
    for (; version < PG_MIGRATIONS.length; version++) {
      await c.query('BEGIN')
      try {
        await c.query(PG_MIGRATIONS[version]!)
        await c.query('UPDATE onnxd_schema SET version = $1', [version + 1])
        await c.query('COMMIT')
      } catch (e) {
        await c.query('ROLLBACK')
        throw e
      }
    }
    return version
  } finally {
    await c.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => undefined)
    c.release()
  }
}

/** A store's connections unless told otherwise: few and busy (the facade's `databasePoolSize` says why). */
export const DEFAULT_MAX_CONNECTIONS = 4

export interface PostgresStoreOptions {
  /** `postgres://user:password@host:port/database` */
  url: string
  /** Most connections this store opens (default DEFAULT_MAX_CONNECTIONS). */
  maxConnections?: number
}

export class PostgresStore implements Store {
  private constructor(readonly pool: pg.Pool) {}

  /** Connects, migrates, and returns the store; a bad URL or an unreachable server is a `config` error. */
  static async open(opts: PostgresStoreOptions): Promise<PostgresStore> {
    let pool: pg.Pool
    try {
      pool = new pg.Pool({ connectionString: opts.url, max: opts.maxConnections ?? DEFAULT_MAX_CONNECTIONS, connectionTimeoutMillis: CONNECT_TIMEOUT_MS, types })
    } catch {
      throw new OnnxdError('config', 'ONNXD_DATABASE_URL is not a valid postgres:// URL')
    }
    // An idle connection dropped by the server must not crash the process; the next query reconnects.
    pool.on('error', () => undefined)
    try {
      await migratePostgres(pool)
    } catch (e) {
      await pool.end()
      if (e instanceof OnnxdError) throw e
      const host = safeHost(opts.url)
      throw new OnnxdError('config', `cannot open the PostgreSQL store at ${host}: ${(e as Error).message}`)
    }
    return new PostgresStore(pool)
  }

  /** Runs `fn` in one transaction on one connection. */
  private async tx<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    const c = await this.pool.connect()
    try {
      await c.query('BEGIN')
      const out = await fn(c)
      await c.query('COMMIT')
      return out
    } catch (e) {
      await c.query('ROLLBACK').catch(() => undefined)
      throw e
    } finally {
      c.release()
    }
  }

  private async one<R extends pg.QueryResultRow>(sql: string, params: unknown[]): Promise<R | null> {
    return (await this.pool.query<R>(sql, params)).rows[0] ?? null
  }

  async createAccount(input: NewAccount): Promise<Account> {
    const r = await this.one<AccountRow>(
      `INSERT INTO accounts (id, name, email, balance_micros, subscription, created_at) VALUES ($1, $2, $3, $4, $5, $6)
       RETURNING *`,
      [newAccountId(), input.name, input.email ?? null, input.balanceMicros ?? 0, input.subscription ?? 'active', nowS()],
    )
    return toAccount(r!)
  }

  async getAccount(id: string): Promise<Account | null> {
    const r = await this.one<AccountRow>('SELECT * FROM accounts WHERE id = $1', [id])
    return r ? toAccount(r) : null
  }

  async listAccounts(): Promise<Account[]> {
    return (await this.pool.query<AccountRow>('SELECT * FROM accounts ORDER BY created_at, id COLLATE "C"')).rows.map(toAccount)
  }

  async updateProfile(id: string, patch: ProfilePatch): Promise<Account | null> {
    const r = await this.one<AccountRow>(
      `UPDATE accounts SET name = coalesce($2, name), email = CASE WHEN $3 THEN $4 ELSE email END
       WHERE id = $1 RETURNING *`,
      [id, patch.name ?? null, patch.email !== undefined, patch.email ?? null],
    )
    return r ? toAccount(r) : null
  }

  async creditAccount(id: string, micros: number): Promise<Account | null> {
    if (!Number.isSafeInteger(micros)) throw new OnnxdError('invalid_value', `credit must be an integer number of micros. Given: ${micros}`)
    const r = await this.one<AccountRow>('UPDATE accounts SET balance_micros = balance_micros + $1 WHERE id = $2 RETURNING *', [micros, id])
    return r ? toAccount(r) : null
  }

  async setSubscription(id: string, subscription: Subscription): Promise<Account | null> {
    const r = await this.one<AccountRow>('UPDATE accounts SET subscription = $1 WHERE id = $2 RETURNING *', [subscription, id])
    return r ? toAccount(r) : null
  }

  async createKey(input: NewApiKey): Promise<ApiKey> {
    const r = await this.one<KeyRow>(
      `INSERT INTO api_keys (id, account_id, name, hash, redacted, rpm_limit, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
       RETURNING *`,
      [newKeyId(), input.accountId, input.name ?? null, input.hash, input.redacted, input.rpmLimit ?? null, nowS()],
    )
    return toKey(r!)
  }

  /**
   * Every authenticated request runs this. Lookups that come while one is under way go together in the next, as one
   * statement (GroupCommit), so a busy facade sends a lookup per batch; a lone one keeps the one-row statement. Each
   * statement reads the rows as they are when it runs: a key revoked on any facade fails at the next lookup.
   */
  findKeyByHash(hash: Buffer): Promise<KeyLookup | null> {
    return this.lookups.push(hash)
  }

  private readonly lookups = new GroupCommit((hashes: readonly Buffer[]) => this.findKeys(hashes), MAX_LOOKUP_BATCH)

  private async findKeys(hashes: readonly Buffer[]): Promise<PromiseSettledResult<KeyLookup | null>[]> {
    // Named statements: parsed and planned once per connection.
    if (hashes.length === 1) {
      const r = await this.pool.query<KeyWithAccountRow>({ name: 'onnxd_find_key', text: FIND_KEY, values: [hashes[0]] })
      return [fulfilled(r.rows[0] ? toKeyLookup(r.rows[0]) : null)]
    }
    const hex = hashes.map((h) => h.toString('hex'))
    const distinct = [...new Map(hex.map((x, i) => [x, hashes[i]!])).values()]
    const r = await this.pool.query<KeyWithAccountRow>({ name: 'onnxd_find_keys', text: FIND_KEYS, values: [distinct] })
    const rows = new Map(r.rows.map((row) => [row.hash.toString('hex'), row]))
    return hex.map((x) => {
      const row = rows.get(x)
      return fulfilled(row ? toKeyLookup(row) : null)
    })
  }

  async getKey(id: string): Promise<ApiKey | null> {
    const r = await this.one<KeyRow>('SELECT * FROM api_keys WHERE id = $1', [id])
    return r ? toKey(r) : null
  }

  async listKeys(accountId: string): Promise<ApiKey[]> {
    return (await this.pool.query<KeyRow>('SELECT * FROM api_keys WHERE account_id = $1 ORDER BY created_at, id COLLATE "C"', [accountId])).rows.map(toKey)
  }

  async revokeKey(accountId: string | null, keyId: string): Promise<ApiKey | null> {
    const r = await this.one<KeyRow>(
      `UPDATE api_keys SET revoked_at = coalesce(revoked_at, $1) WHERE id = $2 AND ($3::text IS NULL OR account_id = $3)
       RETURNING *`,
      [nowS(), keyId, accountId],
    )
    return r ? toKey(r) : null
  }

  /**
   * One statement, so one round trip and one implicit transaction: the row locks it takes (the account's balance,
   * the key's usage row, which every completion of a busy key shares) are held for its execution only, not across
   * client round trips. Data-modifying CTEs all run to completion, on one snapshot. One statement is under way at a
   * time: completions that end while it runs are recorded together by the next one (GroupCommit), so that a busy
   * facade sends a statement per batch, not per completion. Each caller still waits for its own commit.
   */
  recordCompletion(u: CompletionUsage): Promise<{ balanceMicros: number }> {
    return this.records.push(u)
  }

  private readonly records = new GroupCommit((batch: readonly CompletionUsage[]) => this.recordCompletions(batch), MAX_RECORD_BATCH)

  private async recordCompletions(batch: readonly CompletionUsage[]): Promise<PromiseSettledResult<{ balanceMicros: number }>[]> {
    let balances: Map<string, number>
    try {
      balances = await this.recordBatch(batch)
    } catch (e) {
      // An unreachable server fails each alone too.
      if (batch.length === 1 || isPostgresOutage(e)) throw e
      // The statement was rolled back whole. One completion's failure (a key that is gone) must not fail the others:
      // each alone.
      const outcomes: PromiseSettledResult<{ balanceMicros: number }>[] = []
      for (const u of batch) outcomes.push(await this.recordBatch([u]).then((b) => settleBatch([u], b)[0]!, rejected))
      return outcomes
    }
    // Outside the try: once the statement has committed, nothing may send the batch again (it would bill it twice).
    return settleBatch(batch, balances)
  }

  /**
   * Records `batch` in one statement (again after a deadlock); the new balance of each account of the batch. A
   * completion id that comes twice in one batch is sent once: the statement would bill both.
   */
  private async recordBatch(batch: readonly CompletionUsage[]): Promise<Map<string, number>> {
    const cols = (u: CompletionUsage) =>
      [
        u.keyId,
        u.accountId,
        u.model,
        dayOf(u.at),
        u.promptTokens,
        u.completionTokens,
        u.costMicros,
        u.inFlightId ?? null,
        u.touchKey !== false ? Math.floor(u.at / 1000) : null,
        u.id ?? null,
        u.at,
      ] as const
    const ids = new Set<string>()
    const rows = batch.filter((u) => u.id === undefined || (!ids.has(u.id) && ids.add(u.id))).map(cols)
    const query =
      rows.length === 1
        ? { name: 'onnxd_record_completion', text: RECORD_COMPLETION, values: [...rows[0]!] }
        : { name: 'onnxd_record_completions', text: RECORD_COMPLETIONS, values: rows[0]!.map((_, c) => rows.map((r) => r[c])) }
    for (let attempt = 1; ; attempt++) {
      try {
        const r = await this.pool.query<{ id: string; balance_micros: number }>(query)
        return new Map(r.rows.map((row) => [row.id, row.balance_micros]))
      } catch (e) {
        if ((e as { code?: string }).code !== DEADLOCK || attempt === 3) throw e
      }
    }
  }

  /**
   * One statement (one round trip, one implicit transaction) whatever the number of rows: the rows as arrays,
   * unnested. A completion that ends while a save runs waits for it (Meter.settle), so the save is kept short.
   */
  async saveInFlight(owner: string, rows: readonly InFlightCompletion[], nowMs: number): Promise<void> {
    const col = <K extends keyof InFlightCompletion>(k: K): InFlightCompletion[K][] => rows.map((r) => r[k])
    await this.pool.query({ name: 'onnxd_save_inflight', text: SAVE_INFLIGHT, values: [
      owner,
      nowMs,
      col('id'),
      col('keyId'),
      col('accountId'),
      col('model'),
      col('promptTokens'),
      col('completionTokens'),
      col('costMicros'),
      col('startedAt'),
    ] })
  }

  async settleStaleInFlight(staleBeforeMs: number, nowMs: number): Promise<SettledInFlight> {
    return this.tx(async (c) => {
      const out: SettledInFlight = { completions: 0, promptTokens: 0, completionTokens: 0, costMicros: 0 }
      // Rows another facade is settling (or its owner is renewing) right now are locked: skip them, never wait.
      const stale = await c.query<InFlightRow>(
        `SELECT * FROM inflight WHERE settled_at IS NULL AND updated_at < $1 ORDER BY updated_at, id FOR UPDATE SKIP LOCKED`,
        [staleBeforeMs],
      )
      for (const r of stale.rows) {
        await c.query(UPSERT_USAGE, [r.key_id, r.account_id, r.model, dayOf(r.updated_at), 1, r.prompt_tokens, r.completion_tokens, r.cost_micros])
        await debit(c, r.cost_micros, r.account_id)
        await c.query('UPDATE inflight SET settled_at = $1 WHERE id = $2', [nowMs, r.id])
        addSettled(out, r)
      }
      await c.query('DELETE FROM inflight WHERE settled_at IS NOT NULL AND settled_at < $1', [nowMs - SETTLED_RETENTION_MS])
      await c.query('DELETE FROM billed WHERE billed_at < $1', [nowMs - BILLED_RETENTION_MS])
      return out
    })
  }

  async usage(query: UsageQuery): Promise<UsageRow[]> {
    if (query.keyId === undefined && query.accountId === undefined) throw new OnnxdError('internal', 'usage query needs a keyId or an accountId')
    const all: [string, string | undefined][] = [
      ['key_id =', query.keyId],
      ['account_id =', query.accountId],
      ['day >=', query.from],
      ['day <=', query.to],
    ]
    const filters = all.filter((f): f is [string, string] => f[1] !== undefined)
    const where = filters.map(([condition], i) => `${condition} $${i + 1}`)
    const rows = await this.pool.query<UsageDbRow>(
      `SELECT key_id, model, sum(requests)::bigint AS requests, sum(prompt_tokens)::bigint AS prompt_tokens,
              sum(completion_tokens)::bigint AS completion_tokens, sum(cost_micros)::bigint AS cost_micros
       FROM usage WHERE ${where.join(' AND ')} GROUP BY key_id, model ORDER BY key_id COLLATE "C", model COLLATE "C"`,
      filters.map(([, value]) => value),
    )
    return rows.rows.map(toUsage)
  }

  async saveResponse(r: StoredResponse): Promise<void> {
    await this.pool.query(RESPONSE_UPSERT(['$1', '$2', '$3', '$4', '$5', '$6']), [r.id, r.accountId, r.createdAt, r.response, r.inputItems, r.conversation])
  }

  async getResponse(accountId: string, id: string): Promise<StoredResponse | null> {
    const r = await this.one<ResponseRow>('SELECT * FROM responses WHERE id = $1 AND account_id = $2', [id, accountId])
    return r ? toStoredResponse(r) : null
  }

  async deleteResponse(accountId: string, id: string): Promise<boolean> {
    return ((await this.pool.query('DELETE FROM responses WHERE id = $1 AND account_id = $2', [id, accountId])).rowCount ?? 0) > 0
  }

  async ping(): Promise<void> {
    await this.pool.query('SELECT 1')
  }

  isOutage(e: unknown): boolean {
    return isPostgresOutage(e)
  }

  private closed = false
  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    // Completions already handed in are recorded (and lookups answered) before the connections close.
    await Promise.all([this.records.idle(), this.lookups.idle()])
    await this.pool.end()
  }
}

/** Each completion of a recorded batch: its account's new balance ("vanished" if it was not debited). */
function settleBatch(batch: readonly CompletionUsage[], balances: ReadonlyMap<string, number>): PromiseSettledResult<{ balanceMicros: number }>[] {
  return batch.map((u) => {
    const balance = balances.get(u.accountId)
    return balance === undefined
      ? rejected(new OnnxdError('internal', `account ${u.accountId} vanished while recording usage`))
      : fulfilled({ balanceMicros: balance })
  })
}

/** `host:port/database` of a connection URL, never its credentials. */
function safeHost(url: string): string {
  try {
    const u = new URL(url)
    return `${u.hostname}${u.port ? `:${u.port}` : ''}${u.pathname}`
  } catch {
    return '(unparseable URL)'
  }
}
