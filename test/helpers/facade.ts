// Builds a facade for tests: in-memory SQLite, a fixed JWT secret, fake nodes, an account with credit and a key.
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { buildFacade, type FacadeApp, type FacadeDeps } from '../../src/facade/app.js'
import { createApiKey } from '../../src/facade/accounts.js'
import { mintSessionToken } from '../../src/facade/auth/jwt.js'
import { loadFacadeOptions, type FacadeOptions } from '../../src/facade/options.js'
import type { Account, CompletionUsage, Store } from '../../src/store/interfaces.js'
import { SqliteStore } from '../../src/store/sqlite.js'
import { startFakeNode, type FakeNode, type FakeNodeOptions } from './fake-node.js'
export { deferred } from './deferred.js'

export const TEST_SECRET = 'test-secret-test-secret-test-secret-0123'
export const MODEL = 'tiny-llm'

export interface FacadeFixture {
  app: FacadeApp
  store: SqliteStore
  nodes: FakeNode[]
  options: FacadeOptions
  account: Account
  /** An API key secret of `account`. */
  key: string
  newAccount(credits?: number, subscription?: 'active' | 'inactive'): Promise<Account>
  newKey(accountId?: string, rpmLimit?: number | null): Promise<string>
  token(accountId?: string, ttlS?: number): Promise<string>
  close(): Promise<void>
}

export interface FixtureOptions {
  options?: Partial<FacadeOptions>
  node?: FakeNodeOptions
  /** How many fake nodes (default 1). */
  nodeCount?: number
  /** Node URLs to use instead of starting fake nodes. */
  nodeUrls?: string[]
  deps?: Partial<FacadeDeps>
  /** Wraps the store (e.g. to observe writes). */
  wrapStore?: (s: SqliteStore) => Store
  credits?: number
}

export async function facadeFixture(f: FixtureOptions = {}): Promise<FacadeFixture> {
  const nodes: FakeNode[] = []
  if (!f.nodeUrls) for (let i = 0; i < (f.nodeCount ?? 1); i++) nodes.push(await startFakeNode(f.node))
  const store = new SqliteStore({ file: ':memory:' })
  const options = loadFacadeOptions(
    {},
    {
      nodes: f.nodeUrls ?? nodes.map((n) => n.url),
      dataDir: mkdtempSync(join(tmpdir(), 'onnxd-facade-')),
      jwtSecret: TEST_SECRET,
      logLevel: 'silent',
      port: 0,
      ...f.options,
    },
  )
  const app = await buildFacade(options, {
    store: f.wrapStore ? f.wrapStore(store) : store,
    pollHealth: false,
    ...f.deps,
  })
  const newAccount = (credits = f.credits ?? 1_000_000_000, subscription: 'active' | 'inactive' = 'active'): Promise<Account> =>
    store.createAccount({ name: 'test', balanceMicros: credits, subscription })
  const account = await newAccount()
  const newKey = async (accountId = account.id, rpmLimit: number | null = null): Promise<string> =>
    (await createApiKey(store, accountId, { rpmLimit })).key!
  return {
    app,
    store,
    nodes,
    options,
    account,
    key: await newKey(),
    newAccount,
    newKey,
    token: (accountId = account.id, ttlS = 600) => mintSessionToken({ secret: TEST_SECRET, accountId, ttlS }),
    async close() {
      await app.close()
      await store.close()
      for (const n of nodes) await n.close()
    },
  }
}

export const bearer = (credential: string): { authorization: string } => ({ authorization: `Bearer ${credential}` })

export const chatBody = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  model: MODEL,
  messages: [{ role: 'user', content: 'Say hello' }],
  ...extra,
})

/** Parses an SSE body into its data payloads. */
export function sseEvents(body: string): string[] {
  return body
    .split('\n\n')
    .filter((b) => b.startsWith('data: '))
    .map((b) => b.slice(6))
}

/** A store that reports each usage record after it is written. */
export function observed(onRecord: (u: CompletionUsage) => void) {
  return (s: SqliteStore): Store =>
    new Proxy(s, {
      get(target, prop) {
        if (prop === 'recordCompletion') {
          return async (u: CompletionUsage) => {
            const out = await target.recordCompletion(u)
            onRecord(u)
            return out
          }
        }
        const v = Reflect.get(target, prop, target) as unknown
        return typeof v === 'function' ? v.bind(target) : v
      },
    })
}
