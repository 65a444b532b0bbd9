// The SQL stores' shared row shapes (snake_case columns, the same in SQLite and PostgreSQL) and their mapping to
// the store's objects, plus the bookkeeping both stores apply to in-flight rows. No driver here, and SQL only in the
// fragments both dialects read alike; the queries, with their dialect differences, stay in sqlite.ts and postgres.ts.
// Imports: store interfaces.
import type { Account, ApiKey, KeyLookup, SettledInFlight, StoredResponse, Subscription, UsageRow } from './interfaces.js'

export interface AccountRow {
  id: string
  name: string
  email: string | null
  balance_micros: number
  subscription: Subscription
  created_at: number
}

export interface KeyRow {
  id: string
  account_id: string
  name: string | null
  redacted: string
  rpm_limit: number | null
  created_at: number
  last_used_at: number | null
  revoked_at: number | null
}

/** A key row joined with its account's columns, each prefixed `a_`, and the key's hash. */
export type KeyWithAccountRow = KeyRow & { hash: Buffer } & { [K in keyof AccountRow as `a_${K}`]: AccountRow[K] }

/** Keys with their accounts, as `KeyWithAccountRow` names the columns (`k` is api_keys, `a` accounts); a WHERE follows. */
export const SELECT_KEY_WITH_ACCOUNT = `SELECT k.*, a.id AS a_id, a.name AS a_name, a.email AS a_email, a.balance_micros AS a_balance_micros,
              a.subscription AS a_subscription, a.created_at AS a_created_at
       FROM api_keys k JOIN accounts a ON a.id = k.account_id`

/** The columns an in-flight save writes, in the order of its values. */
export const INFLIGHT_SAVE_COLUMNS = `inflight (id, owner, key_id, account_id, model, prompt_tokens, completion_tokens, cost_micros, started_at, updated_at)`

/** What an in-flight save does to a row already there: takes the new counts and lease; a settled row stays as it is. */
export const INFLIGHT_SAVE_CONFLICT = `ON CONFLICT (id) DO UPDATE SET
    owner = excluded.owner,
    prompt_tokens = excluded.prompt_tokens,
    completion_tokens = excluded.completion_tokens,
    cost_micros = excluded.cost_micros,
    updated_at = excluded.updated_at
  WHERE inflight.settled_at IS NULL`

export interface UsageDbRow {
  key_id: string
  model: string
  requests: number
  prompt_tokens: number
  completion_tokens: number
  cost_micros: number
}

export interface InFlightRow {
  id: string
  key_id: string
  account_id: string
  model: string
  prompt_tokens: number
  completion_tokens: number
  cost_micros: number
  updated_at: number
  settled_at: number | null
}

/** Settled in-flight rows are kept this long, so that a completion still running when recovery took its row adds only the rest. */
export const SETTLED_RETENTION_MS = 86_400_000

/**
 * Ids of recorded completions are kept this long after the completion (its `at`): a record sent again within it is
 * ignored. As long as settled in-flight rows are kept, the horizon of the rest of the billing bookkeeping.
 */
export const BILLED_RETENTION_MS = SETTLED_RETENTION_MS

export const toAccount = (r: AccountRow): Account => ({
  id: r.id,
  name: r.name,
  email: r.email,
  balanceMicros: r.balance_micros,
  subscription: r.subscription,
  createdAt: r.created_at,
})

export const toKey = (r: KeyRow): ApiKey => ({
  id: r.id,
  accountId: r.account_id,
  name: r.name,
  redacted: r.redacted,
  rpmLimit: r.rpm_limit,
  createdAt: r.created_at,
  lastUsedAt: r.last_used_at,
  revokedAt: r.revoked_at,
})

export const toKeyLookup = (r: KeyWithAccountRow): KeyLookup => ({
  key: toKey(r),
  hash: r.hash,
  account: toAccount({
    id: r.a_id,
    name: r.a_name,
    email: r.a_email,
    balance_micros: r.a_balance_micros,
    subscription: r.a_subscription,
    created_at: r.a_created_at,
  }),
})

export const toUsage = (r: UsageDbRow): UsageRow => ({
  keyId: r.key_id,
  model: r.model,
  requests: r.requests,
  promptTokens: r.prompt_tokens,
  completionTokens: r.completion_tokens,
  costMicros: r.cost_micros,
})

export interface ResponseRow {
  id: string
  account_id: string
  created_at: number | string
  response: string
  input_items: string
  conversation: string
}

/** Saves a response, replacing one of the same id (both dialects read `?` and `$n` differently: the caller numbers). */
export const RESPONSE_UPSERT = (p: readonly string[]): string => `INSERT INTO responses (id, account_id, created_at, response, input_items, conversation)
  VALUES (${p.join(', ')})
  ON CONFLICT (id) DO UPDATE SET response = excluded.response, input_items = excluded.input_items, conversation = excluded.conversation`

export const toStoredResponse = (r: ResponseRow): StoredResponse => ({
  id: r.id,
  accountId: r.account_id,
  createdAt: Number(r.created_at),
  response: r.response,
  inputItems: r.input_items,
  conversation: r.conversation,
})

export const nowS = (): number => Math.floor(Date.now() / 1000)
export const dayOf = (ms: number): string => new Date(ms).toISOString().slice(0, 10)

/**
 * What a finished completion still adds to usage once its in-flight row (if any) is taken: everything, or, when
 * recovery already recorded the request and what it had delivered, only the rest (and no second request).
 */
export function unsettledRest(
  u: { promptTokens: number; completionTokens: number; costMicros: number },
  taken: InFlightRow | undefined,
): { requests: number; promptTokens: number; completionTokens: number; costMicros: number } {
  const { promptTokens, completionTokens, costMicros } = u
  if (!taken || taken.settled_at === null) return { requests: 1, promptTokens, completionTokens, costMicros }
  return {
    requests: 0,
    promptTokens: Math.max(0, promptTokens - taken.prompt_tokens),
    completionTokens: Math.max(0, completionTokens - taken.completion_tokens),
    costMicros: Math.max(0, costMicros - taken.cost_micros),
  }
}

/** Adds a settled in-flight row to the recovery totals. */
export function addSettled(out: SettledInFlight, r: InFlightRow): void {
  out.completions++
  out.promptTokens += r.prompt_tokens
  out.completionTokens += r.completion_tokens
  out.costMicros += r.cost_micros
}
