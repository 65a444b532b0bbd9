// Which store and which rate-limit counters a facade (or an operator command) opens, from its options: PostgreSQL
// when `databaseUrl` is set, else SQLite in `dataDir`; Redis when `redisUrl` is set, else counters in process.
// Imports: store, facade options.
import type { RateLimitStore, Store } from '../store/interfaces.js'
import { MemoryRateLimitStore } from '../store/memory-rate-limit.js'
import { PostgresStore } from '../store/postgres.js'
import { RedisRateLimitStore } from '../store/redis-rate-limit.js'
import { SqliteStore } from '../store/sqlite.js'
import type { FacadeOptions } from './options.js'

export async function openStore(options: Pick<FacadeOptions, 'dataDir' | 'databaseUrl' | 'databasePoolSize'>): Promise<Store> {
  if (options.databaseUrl !== undefined) return PostgresStore.open({ url: options.databaseUrl, maxConnections: options.databasePoolSize })
  return new SqliteStore({ dataDir: options.dataDir })
}

/** `warn` receives the fail-open warnings of a Redis that does not answer (at most one a minute). */
export function openRateLimits(options: Pick<FacadeOptions, 'redisUrl'>, warn: (message: string) => void): RateLimitStore {
  if (options.redisUrl !== undefined) return new RedisRateLimitStore({ url: options.redisUrl, warn })
  return new MemoryRateLimitStore()
}
