// Issue #15: a fleet, over HTTP. Two facades and two real nodes (the tiny default model) on one PostgreSQL and one
// Redis: a fleet-wide limit counts across facades; 200 concurrent completions over both facades (some streaming, some
// cancelled) leave usage and balance equal to what the clients received; a key revoked through one facade fails on
// the other at once; a node cut off mid-stream sends new traffic to the other; a facade restarted loses nothing; and
// requests sharing a long prompt prefix land on one node, whose prefix cache serves them. Skipped, with the reason,
// when no PostgreSQL or Redis can be had (CI always has both).
import { Agent, fetch } from 'undici'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { createApiKey } from '../../src/facade/accounts.js'
import { mintSessionToken } from '../../src/facade/auth/jwt.js'
import { loadFacadeOptions, type FacadeOptions } from '../../src/facade/options.js'
import { startFacade, type RunningFacade } from '../../src/facade/server.js'
import type { Account } from '../../src/store/interfaces.js'
import { PostgresStore } from '../../src/store/postgres.js'
import { freshDatabase as freshPg, startPostgres, startRedis } from '../helpers/servers.js'
import { defaultCostMicros, MODEL, startRealNode, waitFor, type RealNode } from './stack.js'

const pgServer = await startPostgres()
const redisServer = await startRedis()
const skip = pgServer.reason ?? redisServer.reason
if (skip) console.warn(`fleet suite skipped: ${skip}`)

const SECRET = 'fleet-test-secret-fleet-test-secret-0123'
const CREDITS = 1_000_000_000
const agent = new Agent({ connections: 512 })

const freshDatabase = (): Promise<string> => freshPg(pgServer.server!.url, 'onnxd_fleet_')

interface Received {
  status: number
  /** Usage the client was told (the JSON answer's, or a stream's final usage chunk); null if it was not told any. */
  usage: { prompt_tokens: number; completion_tokens: number } | null
  /** Content chunks read from a stream. */
  chunks: number
  error: string | null
}

/** One chat completion through a facade; a stream is abandoned after `cancelAfter` content chunks when given. */
async function chat(facade: string, key: string, o: { content?: string; system?: string; stream?: boolean; maxTokens?: number; cancelAfter?: number; onFirstChunk?: () => void; ignoreEos?: boolean } = {}): Promise<Received> {
  const messages = [...(o.system ? [{ role: 'system', content: o.system }] : []), { role: 'user', content: o.content ?? 'Say hello' }]
  const body = {
    model: MODEL,
    messages,
    max_tokens: o.maxTokens ?? 8,
    ...(o.ignoreEos ? { ignore_eos: true } : {}),
    ...(o.stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  }
  const abort = new AbortController()
  const res = await fetch(`${facade}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    dispatcher: agent,
    signal: abort.signal,
  })
  if (!o.stream || res.status !== 200) {
    const json = (await res.json()) as { usage?: Received['usage']; error?: { type: string } }
    return { status: res.status, usage: json.usage ?? null, chunks: 0, error: json.error?.type ?? null }
  }
  let chunks = 0
  let usage: Received['usage'] = null
  let error: string | null = null
  let buf = ''
  const decoder = new TextDecoder()
  try {
    for await (const part of res.body!) {
      buf += decoder.decode(part as Uint8Array, { stream: true })
      let i
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, i)
        buf = buf.slice(i + 2)
        if (!event.startsWith('data: ') || event === 'data: [DONE]') continue
        const data = JSON.parse(event.slice(6)) as { choices?: { delta?: { content?: string } }[]; usage?: Received['usage']; error?: { type: string } }
        if (data.error) error = data.error.type
        if (data.usage) usage = data.usage
        if (data.choices?.[0]?.delta?.content && chunks++ === 0) o.onFirstChunk?.()
        if (o.cancelAfter !== undefined && chunks >= o.cancelAfter) {
          abort.abort()
          return { status: 200, usage: null, chunks, error: null }
        }
      }
    }
  } catch (e) {
    error ??= (e as Error).message
  }
  return { status: 200, usage, chunks, error }
}

/** What the store holds for a key: its usage rows summed. */
async function usageOf(store: PostgresStore, keyId: string): Promise<{ requests: number; promptTokens: number; completionTokens: number; costMicros: number }> {
  const rows = await store.usage({ keyId })
  const sum = (f: (r: (typeof rows)[number]) => number): number => rows.reduce((s, r) => s + f(r), 0)
  return { requests: sum((r) => r.requests), promptTokens: sum((r) => r.promptTokens), completionTokens: sum((r) => r.completionTokens), costMicros: sum((r) => r.costMicros) }
}

async function metric(node: RealNode, name: string): Promise<number> {
  const text = await (await fetch(`${node.url}/metrics`, { dispatcher: agent })).text()
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `))
    .reduce((s, l) => s + Number(l.slice(l.lastIndexOf(' ') + 1)), 0)
}

describe.skipIf(skip !== null)('a fleet: two facades and two nodes on one PostgreSQL and one Redis', () => {
  let databaseUrl: string
  let store: PostgresStore
  const nodes: RealNode[] = []
  const facades: RunningFacade[] = []
  let account: Account

  const facadeOptions = (over: Partial<FacadeOptions> = {}): FacadeOptions =>
    loadFacadeOptions(
      {},
      {
        port: 0,
        nodes: nodes.map((n) => n.url),
        databaseUrl,
        redisUrl: redisServer.server!.url,
        jwtSecret: SECRET,
        dataDir: '/nonexistent-the-shared-stores-need-none',
        logLevel: 'silent',
        healthIntervalMs: 200,
        keyRpm: 0,
        fleetRpm: 0,
        ...over,
      },
    )
  const startFacadeReady = async (over: Partial<FacadeOptions> = {}): Promise<RunningFacade> => {
    const f = await startFacade(facadeOptions(over))
    await waitFor(() => f.app.facade.router.nodes.filter((n) => n.status === 'ready').length === nodes.length, 'the facade to see both nodes ready')
    return f
  }
  const newKey = async (rpmLimit: number | null = null): Promise<{ id: string; key: string }> => {
    const k = await createApiKey(store, account.id, { rpmLimit })
    return { id: k.id, key: k.key! }
  }

  beforeAll(async () => {
    databaseUrl = await freshDatabase()
    nodes.push(await startRealNode(), await startRealNode())
    facades.push(await startFacadeReady(), await startFacadeReady())
    store = await PostgresStore.open({ url: databaseUrl })
    account = await store.createAccount({ name: 'fleet', balanceMicros: CREDITS, subscription: 'active' })
  }, 120_000)

  afterAll(async () => {
    for (const f of facades) await f.close()
    await store?.close()
    for (const n of nodes) await n.close()
    await agent.close()
    await pgServer.server?.stop()
    await redisServer.server?.stop()
  })

  it('a fleet-wide limit of N per minute admits exactly N across both facades', async () => {
    // Two more facades with a fleet limit of 20, counting in their own Redis database.
    const redis = new URL(redisServer.server!.url)
    redis.pathname = '/1'
    const limited = [await startFacadeReady({ fleetRpm: 20, redisUrl: redis.toString() }), await startFacadeReady({ fleetRpm: 20, redisUrl: redis.toString() })]
    try {
      const { key } = await newKey()
      // The window is the clock's minute: start well inside one.
      await waitFor(() => new Date().getSeconds() < 45, 'a fresh part of the minute', 20_000)
      const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => chat(limited[i % 2]!.url, key, { maxTokens: 1 })))
      const byStatus = (s: number): number => answers.filter((a) => a.status === s).length
      expect(byStatus(200)).toBe(20)
      expect(byStatus(429)).toBe(40)
      expect(answers.filter((a) => a.status === 429).every((a) => a.error === 'rate_limit_error')).toBe(true)
    } finally {
      for (const f of limited) await f.close()
    }
  })

  it('200 concurrent completions over both facades, some streaming and some cancelled, leave usage and balance equal to what the clients received', async () => {
    const exact = await newKey()
    const cancelled = await newKey()
    const before = (await store.getAccount(account.id))!.balanceMicros
    const jobs = Array.from({ length: 200 }, (_, i) => {
      const facade = facades[i % 2]!.url
      if (i % 5 === 4) return { kind: 'cancelled' as const, p: chat(facade, cancelled.key, { stream: true, maxTokens: 48, ignoreEos: true, content: `story ${i}`, cancelAfter: 2 }) }
      return { kind: 'exact' as const, p: chat(facade, exact.key, { stream: i % 2 === 0, maxTokens: 4 + (i % 13), content: `question ${i}` }) }
    })
    const got = await Promise.all(jobs.map((j) => j.p))
    const done = got.filter((_, i) => jobs[i]!.kind === 'exact')
    const cut = got.filter((_, i) => jobs[i]!.kind === 'cancelled')
    // Every completion was answered (two nodes have room for all of them) and told its usage.
    expect(done.map((r) => r.status)).toEqual(done.map(() => 200))
    expect(done.every((r) => r.usage !== null && r.error === null)).toBe(true)
    expect(cut.every((r) => r.status === 200 && r.chunks === 2)).toBe(true)

    // Both facades wrote to the one store; what was delivered is billed once the cancelled streams have settled.
    const told = {
      requests: done.length,
      promptTokens: done.reduce((s, r) => s + r.usage!.prompt_tokens, 0),
      completionTokens: done.reduce((s, r) => s + r.usage!.completion_tokens, 0),
      costMicros: done.reduce((s, r) => s + defaultCostMicros(r.usage!), 0),
    }
    expect(await usageOf(store, exact.id)).toEqual(told)
    await waitFor(async () => (await usageOf(store, cancelled.id)).requests === cut.length, 'the cancelled streams to be billed')
    const cutUsage = await usageOf(store, cancelled.id)
    // A cancelled stream is billed for its prompt and at least the tokens its client read, never for the 48 asked.
    expect(cutUsage.completionTokens).toBeGreaterThanOrEqual(cut.length * 2)
    expect(cutUsage.completionTokens).toBeLessThan(cut.length * 48)
    const after = (await store.getAccount(account.id))!.balanceMicros
    expect(before - after).toBe(told.costMicros + cutUsage.costMicros)
    // The work was spread over both nodes.
    for (const n of nodes) expect(n.finishes.length).toBeGreaterThan(10)
  })

  it('a key revoked through one facade fails at once on the other', async () => {
    const k = await newKey()
    expect((await chat(facades[1]!.url, k.key, { maxTokens: 1 })).status).toBe(200)
    const token = await mintSessionToken({ secret: SECRET, accountId: account.id, ttlS: 600 })
    const revoked = await fetch(`${facades[0]!.url}/v1/account/keys/${k.id}`, { method: 'DELETE', headers: { authorization: `Bearer ${token}` }, dispatcher: agent })
    expect(revoked.status).toBe(200)
    const after = await chat(facades[1]!.url, k.key, { maxTokens: 1 })
    expect(after.status).toBe(401)
    // Lookups that arrive together share a statement: amid a flood of unknown keys, each request still gets its own
    // key's answer, the revoked one included.
    const live = await newKey()
    const keys = Array.from({ length: 120 }, (_, i) => (i % 3 === 0 ? live.key : i % 3 === 1 ? k.key : `sk-svc-unknown-key-of-the-flood-${i}`))
    const statements = vi.spyOn((facades[1]!.app.facade.store as PostgresStore).pool, 'query')
    const got = await Promise.all(keys.map((key) => chat(facades[1]!.url, key, { maxTokens: 1 })))
    expect(got.map((r) => r.status)).toEqual(keys.map((key) => (key === live.key ? 200 : 401)))
    expect(statements.mock.calls.filter(([q]) => (q as { name?: string }).name === 'onnxd_find_keys').length).toBeGreaterThan(0)
    statements.mockRestore()
  })

  it('requests sharing a 1,000-token prefix land on one node while it has capacity, and its prefix cache serves them', async () => {
    const k = await newKey()
    const system = `You are the fleet's assistant. ${Array.from({ length: 165 }, (_, i) => `rule ${i}.`).join(' ')}`
    // A worker's finish observations reach its node a moment after the response may have: each wave is waited for.
    const finishedSince = (before: readonly number[]): number => nodes.reduce((s, n, i) => s + n.finishes.length - before[i]!, 0)
    const waitFinished = (before: readonly number[], n: number): Promise<void> => waitFor(() => finishedSince(before) >= n, `${n} finish observations`, 2000)
    const beforeFirst = nodes.map((n) => n.finishes.length)
    const first = await chat(facades[0]!.url, k.key, { system, content: 'first', maxTokens: 2 })
    expect(first).toMatchObject({ status: 200, error: null })
    expect(first.usage!.prompt_tokens).toBeGreaterThanOrEqual(1000)
    await waitFinished(beforeFirst, 1)
    const hitsBefore = await Promise.all(nodes.map((n) => metric(n, 'onnxd_prefix_cache_hits_total')))
    const finishesBefore = nodes.map((n) => n.finishes.length)
    const rest = await Promise.all(Array.from({ length: 7 }, (_, i) => chat(facades[i % 2]!.url, k.key, { system, content: `question ${i}`, maxTokens: 2 })))
    expect(rest.every((r) => r.status === 200)).toBe(true)
    await waitFinished(finishesBefore, 7)
    const served = nodes.map((n, i) => n.finishes.length - finishesBefore[i]!)
    const home = served.indexOf(7)
    expect(served.sort()).toEqual([0, 7]) // all seven on one node, through both facades
    const hits = (await metric(nodes[home]!, 'onnxd_prefix_cache_hits_total')) - hitsBefore[home]!
    expect(hits).toBeGreaterThanOrEqual(7 * 960) // each reused (nearly) the whole shared prefix, in whole blocks
    for (const f of facades) expect(f.app.facade.router.snapshot().reduce((s, n) => s + n.affinity_routed, 0)).toBeGreaterThan(0)
  })

  it('a node cut off mid-stream moves new traffic to the other, and the cut stream is billed for what it delivered', async () => {
    const k = await newKey()
    let started = 0
    const streams = Array.from({ length: 6 }, (_, i) =>
      chat(facades[i % 2]!.url, k.key, { stream: true, maxTokens: 1500, ignoreEos: true, content: `long ${i}`, onFirstChunk: () => started++ }),
    )
    // Once every stream is under way, cut off the node serving the most of them (as both facades count their
    // requests in flight), as a crash would: every connection reset, then gone.
    await waitFor(() => started === 6, 'the streams to start')
    const inflight = (n: RealNode): number => facades.reduce((s, f) => s + f.app.facade.router.nodes.filter((r) => r.url === n.url).reduce((t, r) => t + r.inflight, 0), 0)
    const at = inflight(nodes[1]!) > inflight(nodes[0]!) ? 1 : 0
    const victim = nodes[at]!
    expect(inflight(victim)).toBeGreaterThan(0)
    const port = victim.port
    victim.app.server.closeAllConnections()
    await victim.close()
    const ended = await Promise.all(streams)
    expect(ended.some((r) => r.error !== null)).toBe(true) // the victim's streams ended with an error event
    const after = await Promise.all(Array.from({ length: 8 }, (_, i) => chat(facades[i % 2]!.url, k.key, { maxTokens: 2 })))
    expect(after.map((r) => r.status)).toEqual(Array(8).fill(200))
    // What each client was told or read is billed, the cut streams' partials included.
    await waitFor(async () => (await usageOf(store, k.id)).requests === 6 + 8, 'every request to be billed', 60_000)

    // Put a node back on the same port for the test that follows; the facades take it in at their next poll.
    nodes[at] = await startRealNode({ port })
    await waitFor(() => facades.every((f) => f.app.facade.router.nodes.every((n) => n.status === 'ready')), 'the facades to see the new node')
  })

  it('a facade restarted loses nothing: its streams in flight finish and are billed, and the other facade and its successor see one truth', async () => {
    const k = await newKey()
    const before = (await store.getAccount(account.id))!.balanceMicros
    const used = await usageOf(store, k.id)
    expect(used.requests).toBe(0)
    let started = 0
    const streams = Array.from({ length: 8 }, (_, i) =>
      chat(facades[1]!.url, k.key, { stream: true, maxTokens: 400, ignoreEos: true, content: `restart ${i}`, onFirstChunk: () => started++ }),
    )
    await waitFor(() => started === 8, 'the streams to start')
    await facades[1]!.close() // graceful: stops accepting, lets its streams finish, flushes billing
    const finished = await Promise.all(streams)
    expect(finished.every((r) => r.error === null && r.usage !== null)).toBe(true)
    facades[1] = await startFacadeReady()
    const more = await Promise.all([chat(facades[0]!.url, k.key), chat(facades[1]!.url, k.key)])
    const all = [...finished, ...more]
    expect(await usageOf(store, k.id)).toEqual({
      requests: all.length,
      promptTokens: all.reduce((s, r) => s + r.usage!.prompt_tokens, 0),
      completionTokens: all.reduce((s, r) => s + r.usage!.completion_tokens, 0),
      costMicros: all.reduce((s, r) => s + defaultCostMicros(r.usage!), 0),
    })
    expect(before - (await store.getAccount(account.id))!.balanceMicros).toBe(all.reduce((s, r) => s + defaultCostMicros(r.usage!), 0))
  })
})
