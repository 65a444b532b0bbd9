// Issue #32, parts 4 and 5: a store outage through a real facade over SQLite whose calls are made to fail as an
// unreachable database fails them. Requests that need the store get 503 with Retry-After in the spec's error object;
// /health says not ready, the metrics count it, the log names it once; usage the store does not take is spooled on
// disk, sent again once it answers, billed exactly once (also when the first write did commit, and when the facade
// restarted meanwhile), and equal to what each client was told. The same against PostgreSQL: store-outage.int.test.ts.
import { existsSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { buildFacade } from '../../src/facade/app.js'
import { SPOOL_DIR } from '../../src/facade/billing/spool.js'
import { StoreHealth } from '../../src/facade/store-health.js'
import type { Store } from '../../src/store/interfaces.js'
import type { SqliteStore } from '../../src/store/sqlite.js'
import { bearer, chatBody, facadeFixture, sseEvents, type FacadeFixture } from '../helpers/facade.js'

let f: FacadeFixture | null = null
afterEach(async () => {
  await f?.close()
  f = null
})

/** What the SQLite driver (node:sqlite's API) throws when the disk fails under it: an outage (SqliteStore.isOutage). */
const ioError = (): Error => Object.assign(new Error('disk I/O error'), { code: 'ERR_SQLITE_ERROR', errcode: 10, errstr: 'disk I/O error' })

/**
 * The store with an outage switch: while `down` holds a method's name (or `*`), calls of it fail with `ioError`; a
 * name in `lostAck` commits, then fails as a connection lost before its answer would.
 */
function switchable() {
  const down = new Set<string>()
  const lostAck = new Set<string>()
  const wrap = (s: SqliteStore): Store =>
    new Proxy(s, {
      get(target, prop) {
        const v = Reflect.get(target, prop, target) as unknown
        if (typeof v !== 'function' || prop === 'isOutage' || prop === 'close') return typeof v === 'function' ? v.bind(target) : v
        return async (...args: unknown[]) => {
          if (down.has('*') || down.has(String(prop))) throw ioError()
          const out = (await (v as (...a: unknown[]) => Promise<unknown>).apply(target, args)) as unknown
          if (lostAck.has(String(prop))) throw ioError()
          return out
        }
      },
    })
  return { down, lostAck, wrap }
}

const PRICES = { 'tiny-llm': { prompt: 1000, completion: 2000 } } // micros per token

/** A log collector at `level`. */
function logLines() {
  const lines: { level: number; msg: string; err?: unknown }[] = []
  return { lines, stream: { write: (l: string) => lines.push(JSON.parse(l) as (typeof lines)[number]) } }
}

/** A streamed chat completion's content chunks and the usage chunk it ended with. */
function streamed(body: string): { chunks: number; usage: { prompt_tokens: number; completion_tokens: number } | null } {
  let chunks = 0
  let usage = null
  for (const e of sseEvents(body)) {
    if (e === '[DONE]') continue
    const d = JSON.parse(e) as { choices: { delta?: { content?: string } }[]; usage?: { prompt_tokens: number; completion_tokens: number } }
    if (d.choices[0]?.delta?.content) chunks++
    if (d.usage) usage = d.usage
  }
  return { chunks, usage }
}

const metric = (text: string, series: string): number => {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `))
  return line ? Number(line.slice(series.length + 1)) : NaN
}

describe('a store outage', () => {
  it('is a 503 with Retry-After for every request that needs the store; /health, metrics and the log say so once; then it recovers', async () => {
    const sw = switchable()
    const log = logLines()
    f = await facadeFixture({ wrapStore: sw.wrap, options: { logLevel: 'debug' }, deps: { logStream: log.stream } })
    const token = await f.token()
    expect((await f.app.inject({ method: 'GET', url: '/health' })).json()).toMatchObject({ status: 'ready', store: { status: 'up', usage_spooled: 0 } })

    sw.down.add('*')
    const asks = [
      () => f!.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f!.key), payload: chatBody() }),
      () => f!.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f!.key), payload: chatBody({ stream: true }) }),
      () => f!.app.inject({ method: 'GET', url: '/v1/usage', headers: bearer(f!.key) }),
      () => f!.app.inject({ method: 'GET', url: '/v1/account/billing', headers: bearer(token) }),
    ]
    for (let round = 0; round < 5; round++) {
      for (const ask of asks) {
        const res = await ask()
        expect(res.statusCode).toBe(503)
        expect(res.headers['retry-after']).toBe('1')
        expect(res.json()).toEqual({
          error: { message: 'The service is briefly unavailable (its database cannot be reached); retry with backoff', type: 'service_unavailable', code: 503 },
        })
      }
    }
    // An unknown key is still a 401 only once the store can say so: a 503 too, never a 401 for a key that may be good.
    expect((await f.app.inject({ method: 'GET', url: '/v1/models', headers: bearer('sk-svc-doesnotexistdoesnotexist00') })).statusCode).toBe(503)
    const health = await f.app.inject({ method: 'GET', url: '/health' })
    expect(health.statusCode).toBe(503)
    expect(health.json()).toMatchObject({ status: 'unavailable', store: { status: 'down' }, nodes: [{ status: 'ready' }] })
    const during = (await f.app.inject({ method: 'GET', url: '/metrics' })).body
    expect(metric(during, 'onnxd_facade_store_up')).toBe(0)
    expect(metric(during, 'onnxd_facade_store_errors_total{operation="findKeyByHash"}')).toBe(16)
    expect(metric(during, 'onnxd_facade_store_errors_total{operation="getAccount"}')).toBe(5)
    expect(metric(during, 'onnxd_facade_requests_total{endpoint="/v1/chat/completions",status="503",outcome="server_error"}')).toBe(10)

    // 21 refused requests: one warning that names the outage, nothing at error level, no stack.
    const warned = log.lines.filter((l) => l.level >= 40)
    expect(warned.map((l) => l.msg)).toEqual(['store unavailable: requests that need it are answered 503 until it answers again'])
    expect(JSON.stringify(log.lines)).not.toContain('"stack"')

    sw.down.clear()
    expect((await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody() })).statusCode).toBe(200)
    expect((await f.app.inject({ method: 'GET', url: '/health' })).statusCode).toBe(200)
    expect(metric((await f.app.inject({ method: 'GET', url: '/metrics' })).body, 'onnxd_facade_store_up')).toBe(1)
    expect(log.lines.filter((l) => l.msg === 'store reachable again')).toHaveLength(1)
  })

  it('keeps the usage of streams and answers that end during it, and bills each once, as its client was told, when the store is back', async () => {
    const sw = switchable()
    f = await facadeFixture({ wrapStore: sw.wrap, options: { prices: PRICES } })
    const node = f.nodes[0]!
    const credits = (await f.store.getAccount(f.account.id))!.balanceMicros
    // Three streams held mid-way, then a store that fails every call while they end, and a JSON answer that ends too.
    const holds = [1, 3, 5].map((after) => node.holdNext(after))
    const pending = holds.map(() =>
      f!.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f!.key), payload: chatBody({ stream: true, stream_options: { include_usage: true }, max_tokens: 7 }) }),
    )
    await Promise.all(holds.map((h) => h.reached))
    const jsonHold = node.holdNext(0)
    const json = f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody({ max_tokens: 5 }) })
    await jsonHold.reached
    sw.down.add('*')
    for (const h of [...holds, jsonHold]) h.release()

    const told: { prompt_tokens: number; completion_tokens: number }[] = []
    for (const res of await Promise.all(pending)) {
      expect(res.statusCode).toBe(200)
      const s = streamed(res.body)
      expect(s.chunks).toBe(7)
      expect(s.usage).not.toBeNull()
      told.push(s.usage!)
    }
    const answered = await json
    expect(answered.statusCode).toBe(200)
    told.push(answered.json<{ usage: { prompt_tokens: number; completion_tokens: number } }>().usage)

    // Kept in memory and on disk; nothing billed yet.
    expect(f.app.facade.meter.spooled).toBe(4)
    const spoolDir = join(f.options.dataDir, SPOOL_DIR)
    expect(readdirSync(spoolDir)).toHaveLength(1)
    expect(metric((await f.app.inject({ method: 'GET', url: '/metrics' })).body, 'onnxd_facade_usage_spooled')).toBe(4)
    expect((await f.app.inject({ method: 'GET', url: '/health' })).json()).toMatchObject({ store: { status: 'down', usage_spooled: 4 } })
    expect((await f.store.usage({ keyId: (await f.store.listKeys(f.account.id))[0]!.id }))).toEqual([])

    // Back: the first call that succeeds sends the spool at once.
    sw.down.clear()
    expect((await f.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(f.key) })).statusCode).toBe(200)
    await f.app.facade.meter.replay()
    expect(f.app.facade.meter.spooled).toBe(0)
    expect(readdirSync(spoolDir)).toEqual([])

    const keyId = (await f.store.listKeys(f.account.id))[0]!.id
    const prompt = told.reduce((n, u) => n + u.prompt_tokens, 0)
    const completion = told.reduce((n, u) => n + u.completion_tokens, 0)
    const cost = told.reduce((n, u) => n + u.prompt_tokens * 1000 + u.completion_tokens * 2000, 0)
    expect(await f.store.usage({ keyId })).toEqual([{ keyId, model: 'tiny-llm', requests: 4, promptTokens: prompt, completionTokens: completion, costMicros: cost }])
    expect((await f.store.getAccount(f.account.id))!.balanceMicros).toBe(credits - cost)
  })

  it('bills a completion once when its first write committed but its answer was lost', async () => {
    const sw = switchable()
    f = await facadeFixture({ wrapStore: sw.wrap, options: { prices: PRICES } })
    const credits = f.account.balanceMicros
    sw.lostAck.add('recordCompletion')
    const res = await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody({ max_tokens: 3 }) })
    expect(res.statusCode).toBe(200)
    expect(f.app.facade.meter.spooled).toBe(1)
    sw.lostAck.clear()
    await f.app.facade.meter.replay()
    expect(f.app.facade.meter.spooled).toBe(0)
    const { prompt_tokens, completion_tokens } = res.json<{ usage: { prompt_tokens: number; completion_tokens: number } }>().usage
    expect((await f.store.getAccount(f.account.id))!.balanceMicros).toBe(credits - prompt_tokens * 1000 - completion_tokens * 2000)
    expect((await f.store.usage({ accountId: f.account.id }))[0]).toMatchObject({ requests: 1, completionTokens: 3 })
  })

  it('a facade closed during it leaves its spool on disk; the next facade on that data directory sends it at start', async () => {
    const sw = switchable()
    f = await facadeFixture({ wrapStore: sw.wrap, options: { prices: PRICES } })
    const credits = f.account.balanceMicros
    const hold = f.nodes[0]!.holdNext(2)
    const stream = f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody({ stream: true, stream_options: { include_usage: true } }) })
    await hold.reached
    sw.down.add('*')
    hold.release()
    const told = streamed((await stream).body).usage!
    expect(f.app.facade.meter.spooled).toBe(1)
    await f.app.close()
    const spoolDir = join(f.options.dataDir, SPOOL_DIR)
    expect(readdirSync(spoolDir)).toHaveLength(1)
    expect(await f.store.usage({ accountId: f.account.id })).toEqual([])

    sw.down.clear()
    const again = await buildFacade(f.options, { store: sw.wrap(f.store), pollHealth: false })
    try {
      await again.facade.meter.replay()
      expect(again.facade.meter.spooled).toBe(0)
      expect(existsSync(spoolDir) ? readdirSync(spoolDir) : []).toEqual([])
      expect(await f.store.usage({ accountId: f.account.id })).toEqual([
        expect.objectContaining({ requests: 1, promptTokens: told.prompt_tokens, completionTokens: told.completion_tokens }),
      ])
      expect((await f.store.getAccount(f.account.id))!.balanceMicros).toBe(credits - told.prompt_tokens * 1000 - told.completion_tokens * 2000)
    } finally {
      await again.close()
    }
  })
})

describe('StoreHealth', () => {
  it('probes a store that is down until it answers, logs each transition once, and tells its listeners', async () => {
    vi.useFakeTimers()
    try {
      let reachable = false
      const inner = {
        isOutage: (e: unknown) => (e as { errcode?: number }).errcode === 10,
        ping: vi.fn(async () => {
          if (!reachable) throw ioError()
        }),
        getAccount: async () => {
          if (!reachable) throw ioError()
          return null
        },
        listAccounts: async () => {
          throw new Error('a refused operation')
        },
      } as unknown as Store
      const log = { warn: vi.fn(), info: vi.fn() }
      const h = new StoreHealth(inner, { log, probeMs: 100 })
      const recovered = vi.fn()
      h.onRecovered(recovered)
      // A refused operation is counted but is no outage, and passes through as it was.
      await expect(h.store.listAccounts()).rejects.toThrow('a refused operation')
      expect(h.up).toBe(true)
      for (let i = 0; i < 3; i++) await expect(h.store.getAccount('a')).rejects.toMatchObject({ code: 'store_unavailable', details: { retryAfterS: 1 } })
      expect(h.up).toBe(false)
      expect(log.warn).toHaveBeenCalledTimes(1)
      await vi.advanceTimersByTimeAsync(350)
      expect(inner.ping).toHaveBeenCalledTimes(3)
      expect(h.up).toBe(false)
      reachable = true
      await vi.advanceTimersByTimeAsync(100)
      expect(h.up).toBe(true)
      expect(recovered).toHaveBeenCalledTimes(1)
      expect(log.info).toHaveBeenCalledTimes(1)
      expect(log.info.mock.calls[0]![0]).toMatchObject({ failed_calls: 3 })
      expect(Object.fromEntries(h.errors())).toEqual({ listAccounts: 1, getAccount: 3 })
      await vi.advanceTimersByTimeAsync(1000)
      expect(inner.ping).toHaveBeenCalledTimes(4) // no probing while up
      h.close()
    } finally {
      vi.useRealTimers()
    }
  })
})
