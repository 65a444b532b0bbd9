// The store's contract: accounts, API keys, usage and billing, and the rate-limit counters. Imports: nothing internal.
//
// Every method is async so that a networked backend (PostgreSQL for accounts and usage, Redis for rate-limit
// counters) can implement the same interfaces; the embedded SQLite store answers synchronously inside a promise.
// Money is always an integer number of micro-units (1 unit = 1_000_000 micros): sums are exact.

export type Subscription = 'active' | 'inactive'

export interface Account {
  id: string
  name: string
  email: string | null
  balanceMicros: number
  subscription: Subscription
  /** Unix seconds. */
  createdAt: number
}

export interface ApiKey {
  id: string
  accountId: string
  name: string | null
  /** A display form of the secret (`sk-svc-AbCd…wXyZ`); the secret itself is never stored. */
  redacted: string
  /** Requests per minute for this key; null means the facade's default. 0 means unlimited. */
  rpmLimit: number | null
  createdAt: number
  lastUsedAt: number | null
  revokedAt: number | null
}

export interface NewAccount {
  name: string
  email?: string | null
  balanceMicros?: number
  subscription?: Subscription
}

export interface NewApiKey {
  accountId: string
  name?: string | null
  rpmLimit?: number | null
  /** sha256 of the secret. */
  hash: Buffer
  redacted: string
}

export interface ProfilePatch {
  name?: string
  email?: string | null
}

/** Who consumed what, and its price: what a completion's usage record and its in-flight row share. */
interface Consumption {
  accountId: string
  keyId: string
  model: string
  promptTokens: number
  completionTokens: number
  costMicros: number
}

/** What one finished (or cut short) completion consumed; written with its debit in one transaction. */
export interface CompletionUsage extends Consumption {
  /**
   * The completion's id. A store records each id once: a second record of the same id (sent again because the first
   * one's outcome was unknown, e.g. the connection dropped around its commit) changes nothing and answers the
   * balance as it is. Ids are remembered for BILLED_RETENTION_MS after `at`. Without an id, every record counts.
   */
  id?: string
  /** Unix milliseconds; decides the day bucket. */
  at: number
  /** Set the key's `lastUsedAt` to `at` (default true; callers skip it when it was set less than a minute ago). */
  touchKey?: boolean
  /**
   * The in-flight row (`InFlightCompletion.id`) this completion settles, if one may have been written: it is removed
   * in the same transaction. If recovery already settled it, only what this record adds beyond it is recorded.
   */
  inFlightId?: string
}

/**
 * A completion being served, as far as its client has received it. Written as it goes (admission, then every few
 * tokens or every interval), so that a crash loses at most one interval of usage; settled exactly once, by the
 * completion's own `recordCompletion` or, when its owner stopped renewing it, by `settleStaleInFlight`.
 */
export interface InFlightCompletion extends Consumption {
  /** The completion's request id. */
  id: string
  /** Unix milliseconds of admission. */
  startedAt: number
}

/** What `settleStaleInFlight` recorded. */
export interface SettledInFlight {
  completions: number
  promptTokens: number
  completionTokens: number
  costMicros: number
}

export interface UsageTotals {
  requests: number
  promptTokens: number
  completionTokens: number
  costMicros: number
}

export interface UsageRow extends UsageTotals {
  keyId: string
  model: string
}

export interface UsageQuery {
  /** Exactly one of keyId and accountId. */
  keyId?: string
  accountId?: string
  /** Inclusive UTC days, `YYYY-MM-DD`. */
  from?: string
  to?: string
}

export interface KeyLookup {
  key: ApiKey
  /** The stored hash, for the caller's constant-time comparison. */
  hash: Buffer
  account: Account
}

export interface AccountStore {
  createAccount(input: NewAccount): Promise<Account>
  getAccount(id: string): Promise<Account | null>
  listAccounts(): Promise<Account[]>
  updateProfile(id: string, patch: ProfilePatch): Promise<Account | null>
  /** Adds (or, negative, removes) credit. Returns the updated account, or null if there is none. */
  creditAccount(id: string, micros: number): Promise<Account | null>
  setSubscription(id: string, subscription: Subscription): Promise<Account | null>
}

export interface KeyStore {
  createKey(input: NewApiKey): Promise<ApiKey>
  /** The key with this hash and its account, revoked or not; null if none. */
  findKeyByHash(hash: Buffer): Promise<KeyLookup | null>
  getKey(id: string): Promise<ApiKey | null>
  listKeys(accountId: string): Promise<ApiKey[]>
  /** Revokes a key of this account (any account when accountId is null). Null if there is no such key. */
  revokeKey(accountId: string | null, keyId: string): Promise<ApiKey | null>
}

export interface UsageStore {
  /**
   * Records usage per key, model and day and debits the account, atomically, settling `usage.inFlightId` in the same
   * transaction. Returns the new balance.
   */
  recordCompletion(usage: CompletionUsage): Promise<{ balanceMicros: number }>
  /**
   * In one transaction: writes these rows of `owner` (insert, or update a row not yet settled) and renews the lease
   * of every unsettled row `owner` holds (their `updatedAt` becomes `nowMs`). Rows already settled are left alone.
   */
  saveInFlight(owner: string, rows: readonly InFlightCompletion[], nowMs: number): Promise<void>
  /**
   * In one transaction: records and debits every unsettled in-flight row not renewed since `staleBeforeMs` (its owner
   * is gone: a crash), as one request each, and marks them settled; forgets rows settled more than a day before
   * `nowMs`. Safe to run from every facade sharing the store.
   */
  settleStaleInFlight(staleBeforeMs: number, nowMs: number): Promise<SettledInFlight>
  usage(query: UsageQuery): Promise<UsageRow[]>
}

/**
 * A response kept for OpenAI's Responses API (`store: true`): its answer, the input items its request gave, and the
 * conversation a response continuing it (`previous_response_id`) starts from. Visible only to its account. The
 * items and the answer are opaque JSON to the store.
 */
export interface StoredResponse {
  /** `resp_…`. */
  id: string
  accountId: string
  /** Unix seconds. */
  createdAt: number
  /** The response object as answered (JSON text). */
  response: string
  /** The items this request gave as `input`, in order (JSON text of an array). */
  inputItems: string
  /** The conversation up to and including this response's output, for the next turn (JSON text of an array). */
  conversation: string
}

export interface ResponseStore {
  /** Saves a response; saving the same id again replaces it. */
  saveResponse(r: StoredResponse): Promise<void>
  /** The account's response with this id; null when there is none, or it is another account's. */
  getResponse(accountId: string, id: string): Promise<StoredResponse | null>
  /** Deletes the account's response with this id; false when there was none (another account's is left alone). */
  deleteResponse(accountId: string, id: string): Promise<boolean>
}

export interface Store extends AccountStore, KeyStore, UsageStore, ResponseStore {
  /** Resolves once the store has answered a trivial query: how a caller learns that an outage is over. */
  ping(): Promise<void>
  /**
   * Whether `e`, thrown by one of this store's methods, means the store could not be reached or could not work at all
   * (connection refused or lost, server shutting down, disk full or failing), rather than refusing this operation.
   */
  isOutage(e: unknown): boolean
  close(): Promise<void>
}

/** A bucket to count a request against, and its limit. */
export interface RateLimitCheck {
  bucket: string
  limit: number
}

/** One counter hit in a fixed window. */
export interface RateLimitHit {
  allowed: boolean
  /** Requests counted in the current window, this one included. */
  count: number
  remaining: number
  /** Unix milliseconds at which the current window ends. */
  resetAtMs: number
}

/**
 * Fixed-window request counters. Windows are aligned to multiples of `windowMs` since the epoch, so every facade
 * sharing a backend (e.g. Redis `INCR` + `PEXPIREAT`) agrees on when a window resets.
 */
export interface RateLimitStore {
  /**
   * Counts one request against each bucket in order, in one step (one round trip to a shared backend), stopping
   * after the first bucket over its limit: those after it are not counted. Returns the hits made, in order.
   */
  hits(checks: readonly RateLimitCheck[], windowMs: number, nowMs: number): Promise<RateLimitHit[]>
  /** A networked backend: requests (`hits` calls) it allowed because it could not answer (fail open), since it was opened. */
  readonly failures?: number
  close(): Promise<void>
}
