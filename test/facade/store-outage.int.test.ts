// Issue #32, parts 4 and 5, against a real PostgreSQL: 8 streams through a real facade (in front of a fake node) are
// held mid-way, PostgreSQL is stopped, the streams end (each client told its usage), PostgreSQL is started again. What
// is billed per key (tokens and micros) must equal what each client was told, once; meanwhile new requests get 503
// with Retry-After in the spec's error object, the facade's /health is 503 and its metrics count the failures. The
// same with the facade closed during the outage and a new one started on its data directory afterwards (its spool
// replayed at start). A server named by ONNXD_TEST_DATABASE_URL cannot be stopped from here: the suite starts its own,
// or, without PostgreSQL binaries, cuts a TCP proxy in front of the named one. Skipped, with the reason, when neither.
import { existsSync, mkdtempSync, readdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { createApiKey } from '../../src/facade/accounts.js'
import { SPOOL_DIR } from '../../src/facade/billing/spool.js'
import { loadFacadeOptions, type FacadeOptions } from '../../src/facade/options.js'
import { startFacade, type RunningFacade } from '../../src/facade/server.js'
import { PostgresStore } from '../../src/store/postgres.js'
import { startFakeNode, type FakeNode, type Hold } from '../helpers/fake-node.js'
import { bearer, MODEL } from '../helpers/facade.js'
import { freshDatabase, startPostgres } from '../helpers/servers.js'
import { outageProxy, type OutageProxy } from '../helpers/tcp-proxy.js'

interface Switchable {
  /** The server's URL for the facade (through the proxy, when there is one). */
  url: string
  /** The server's own URL, for creating databases. */
  adminUrl: string
  down(): Promise<void>
  up(): Promise<void>
  stop(): Promise<void>
}

async function switchablePostgres(): Promise<{ pg: Switchable | null; reason: string | null }> {
  const own = await startPostgres({ own: true })
  if (own.server?.down && own.server.up) {
    const s = own.server
    return { pg: { url: s.url, adminUrl: s.url, down: s.down!, up: s.up!, stop: s.stop }, reason: null }
  }
  const given = process.env.ONNXD_TEST_DATABASE_URL
  if (!given) return { pg: null, reason: own.reason ?? 'no PostgreSQL that can be stopped' }
  const proxy: OutageProxy = await outageProxy(given)
  return { pg: { url: proxy.url, adminUrl: given, down: proxy.down, up: proxy.up, stop: proxy.close }, reason: null }
}

const { pg, reason } = await switchablePostgres()
if (reason) console.warn(`PostgreSQL outage suite skipped: ${reason}`)

const STREAMS = 8
const CREDITS = 1_000_000_000
const PRICE = { prompt: 1000, completion: 2000 } // units per 1M tokens = micros per token
const SECRET = 'outage-test-secret-outage-test-secret-01'

/** `url` (a server's) pointing at database `name` instead. */
function onDatabase(url: string, of: string): string {
  const u = new URL(url)
  u.pathname = new URL(of).pathname
  return u.toString()
}

async function waitFor(cond: () => Promise<boolean> | boolean, what: string, timeoutMs = 30_000): Promise<void> {
  const t0 = Date.now()
  while (!(await cond())) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

interface Told {
  status: number
  chunks: number
  usage: { prompt_tokens: number; completion_tokens: number } | null
}

/** One streamed chat completion, read to its end: content chunks and the usage chunk. */
async function stream(url: string, key: string, maxTokens: number): Promise<Told> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: maxTokens, stream: true, stream_options: { include_usage: true } }),
  })
  const told: Told = { status: res.status, chunks: 0, usage: null }
  for (const event of (await res.text()).split('\n\n')) {
    if (!event.startsWith('data: {')) continue
    const d = JSON.parse(event.slice(6)) as { choices?: { delta?: { content?: string } }[]; usage?: Told['usage'] }
    if (d.choices?.[0]?.delta?.content) told.chunks++
    if (d.usage) told.usage = d.usage
  }
  return told
}

/** The value of one series of a Prometheus exposition (0 when absent). */
async function metric(url: string, series: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text()
  const line = text.split('\n').find((l) => l.startsWith(`${series} `))
  return line ? Number(line.slice(series.length + 1)) : 0
}

describe.skipIf(pg === null)('a PostgreSQL outage through a real facade (issue #32)', () => {
  let node: FakeNode
  let databaseUrl: string
  let admin: PostgresStore
  let accountId: string
  let keys: { id: string; key: string }[]
  const facades: RunningFacade[] = []

  beforeAll(async () => {
    node = await startFakeNode({ tokens: Array.from({ length: 64 }, (_, i) => ` t${i}`) })
  })
  afterAll(async () => {
    await node?.close()
    await pg?.stop()
  })
  afterEach(async () => {
    await pg!.up()
    for (const f of facades.splice(0)) await f.close()
    await admin?.close()
  })

  async function setup(): Promise<void> {
    databaseUrl = onDatabase(pg!.url, await freshDatabase(pg!.adminUrl, 'onnxd_outage_'))
    admin = await PostgresStore.open({ url: onDatabase(pg!.adminUrl, databaseUrl) })
    accountId = (await admin.createAccount({ name: 'outage', balanceMicros: CREDITS })).id
    keys = []
    for (let i = 0; i < STREAMS; i++) {
      const k = await createApiKey(admin, accountId)
      keys.push({ id: k.id, key: k.key! })
    }
  }

  const options = (dataDir: string): FacadeOptions =>
    loadFacadeOptions(
      {},
      { port: 0, nodes: [node.url], databaseUrl, dataDir, jwtSecret: SECRET, logLevel: 'silent', healthIntervalMs: 200, keyRpm: 0, fleetRpm: 0, prices: { [MODEL]: PRICE } },
    )

  async function facade(dataDir: string): Promise<RunningFacade> {
    const f = await startFacade(options(dataDir))
    facades.push(f)
    await waitFor(async () => (await fetch(`${f.url}/health`)).status === 200, 'the facade to be ready')
    return f
  }

  /** 8 streams held mid-way (after 2..9 deltas), PostgreSQL stopped, then let go to their ends; what each was told. */
  async function streamsThroughAnOutage(url: string): Promise<Told[]> {
    const holds: Hold[] = []
    const streams: Promise<Told>[] = []
    for (let i = 0; i < STREAMS; i++) {
      holds.push(node.holdNext(2 + i))
      streams.push(stream(url, keys[i]!.key, 20 + 3 * i))
    }
    await Promise.all(holds.map((h) => h.reached))
    await pg!.down()
    for (const h of holds) h.release()
    const told = await Promise.all(streams)
    for (const [i, t] of told.entries()) {
      expect(t.status).toBe(200)
      expect(t.chunks).toBe(20 + 3 * i)
      expect(t.usage).toMatchObject({ completion_tokens: 20 + 3 * i })
    }
    return told
  }

  /** Per key: billed exactly what its client was told, one request each; the account debited the sum. */
  async function expectBilledAsTold(told: Told[]): Promise<void> {
    let spent = 0
    for (const [i, t] of told.entries()) {
      const cost = t.usage!.prompt_tokens * PRICE.prompt + t.usage!.completion_tokens * PRICE.completion
      expect(await admin.usage({ keyId: keys[i]!.id })).toEqual([
        { keyId: keys[i]!.id, model: MODEL, requests: 1, promptTokens: t.usage!.prompt_tokens, completionTokens: t.usage!.completion_tokens, costMicros: cost },
      ])
      spent += cost
    }
    expect((await admin.getAccount(accountId))!.balanceMicros).toBe(CREDITS - spent)
    expect((await admin.pool.query('SELECT count(*)::int AS n FROM inflight WHERE settled_at IS NULL')).rows[0].n).toBe(0)
  }

  it('streams that end while it is stopped are billed once, as their clients were told, once it is back; meanwhile 503s and /health 503', async () => {
    await setup()
    const dataDir = mkdtempSync(join(tmpdir(), 'onnxd-outage-'))
    const f = await facade(dataDir)
    const told = await streamsThroughAnOutage(f.url)

    // Every usage record is spooled (the usage chunk goes out once its record is kept).
    expect(await metric(f.url, 'onnxd_facade_usage_spooled')).toBe(STREAMS)
    expect(await metric(f.url, 'onnxd_facade_store_errors_total{operation="recordCompletion"}')).toBeGreaterThanOrEqual(STREAMS)
    const refused = await fetch(`${f.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...bearer(keys[0]!.key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }),
    })
    expect(refused.status).toBe(503)
    expect(refused.headers.get('retry-after')).toBe('1')
    expect(await refused.json()).toEqual({
      error: { message: 'The service is briefly unavailable (its database cannot be reached); retry with backoff', type: 'service_unavailable', code: 503 },
    })
    expect((await fetch(`${f.url}/v1/usage`, { headers: bearer(keys[1]!.key) })).status).toBe(503)
    const health = await fetch(`${f.url}/health`)
    expect(health.status).toBe(503)
    expect(await health.json()).toMatchObject({ status: 'unavailable', store: { status: 'down', usage_spooled: STREAMS } })
    expect(await metric(f.url, 'onnxd_facade_store_up')).toBe(0)
    expect(await metric(f.url, 'onnxd_facade_store_errors_total{operation="findKeyByHash"}')).toBeGreaterThanOrEqual(2)

    await pg!.up()
    // The facade's probe sees it back; the spool is sent at once.
    await waitFor(async () => (await fetch(`${f.url}/health`)).status === 200, '/health 200 after the outage')
    await waitFor(async () => (await metric(f.url, 'onnxd_facade_usage_spooled')) === 0, 'the spool to be recorded')
    expect(await metric(f.url, 'onnxd_facade_store_up')).toBe(1)
    // The spool's file goes once the last record's line is written after it (done does not wait for the disk).
    await waitFor(() => readdirSync(join(dataDir, SPOOL_DIR)).length === 0, 'the spool file to go')
    await expectBilledAsTold(told)
    expect((await fetch(`${f.url}/v1/usage`, { headers: bearer(keys[1]!.key) })).status).toBe(200)
  })

  it('a facade closed during the outage loses nothing: the next one on its data directory replays the spool at start', async () => {
    await setup()
    const dataDir = mkdtempSync(join(tmpdir(), 'onnxd-outage-'))
    const first = await facade(dataDir)
    const told = await streamsThroughAnOutage(first.url)
    expect(await metric(first.url, 'onnxd_facade_usage_spooled')).toBe(STREAMS)
    await first.close()
    facades.splice(facades.indexOf(first), 1)
    const spool = join(dataDir, SPOOL_DIR)
    expect(readdirSync(spool)).toHaveLength(1)

    // A facade does not start while its database cannot be reached (as before): the spool waits on disk.
    await expect(startFacade(options(dataDir))).rejects.toMatchObject({ code: 'config' })
    expect(readdirSync(spool)).toHaveLength(1)

    await pg!.up()
    const second = await facade(dataDir)
    await waitFor(async () => (await metric(second.url, 'onnxd_facade_usage_spooled')) === 0, 'the spool to be recorded')
    await waitFor(() => !existsSync(spool) || readdirSync(spool).length === 0, 'the spool file to go')
    await expectBilledAsTold(told)
  })
})
