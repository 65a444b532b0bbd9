// Facade overhead (issue #15): latency of a short completion through the facade vs. straight at a node, at 1 and 50
// concurrent requests, with each store configuration an operator can run: SQLite + in-process rate-limit counters
// ("sqlite+memory", the default) and PostgreSQL + Redis ("postgres+redis", ONNXD_DATABASE_URL + ONNXD_REDIS_URL);
// then the rate of rejected requests (401, 429) each sustains.
//
//   npx tsx bench/facade.bench.ts [--rounds N] [--requests N] [--seconds S] [--max-tokens N] [--node-ms LIST]
//                                 [--node-seconds S] [--pin] [--database-url URL] [--redis-url URL]
//                                 [--node URL --model ID] [--out DIR]
//
// The node, one facade per store configuration, a bare proxy (bench/lib/bare-proxy.ts: a node:http proxy doing none of
// the facade's work, the floor of any Node proxy on this host) and this load generator run as separate processes;
// the facades and the proxy front the same node. Without --node a fake node (test/helpers/fake-node.ts, canned tokens) stands in for a real
// one; it answers each completion after each of --node-ms (default 0,100): 0 answers at once, so that at 50
// concurrent the facade is CPU-bound and its added latency is its queue (about 50 x its CPU time per request, over
// the cores it gets: a throughput figure); 100 answers as late as a short real completion on a node of its own, the
// fleet's case, where 50 concurrent requests are 500 per second (a level with a node time measures
// min(--requests, concurrency x --node-seconds / node time) requests per load). The shared stores are
// --database-url / --redis-url, else ONNXD_DATABASE_URL / ONNXD_REDIS_URL, else throwaway
// servers (test/helpers/servers.ts: PostgreSQL via initdb + pg_ctl, redis-server); without them that configuration
// is skipped, with the reason in the table. A given database gets a "bench" account (its keys revoked at the end);
// a given Redis gets the facade's own counters (prefix onnxd:rl:, fleet bucket included), so point it at a
// throwaway or staging server, not a live fleet's.
//
// Both facades rate-limit every request (per-key and fleet-wide limits of 1e9 per minute: both counters hit per
// request, in one Lua script in Redis or in process), look the key up in their store and write the usage and debit of each completion,
// as an operator's facade does. Each round measures, per concurrency, the node directly, the bare proxy, then each
// facade (the facades' order alternates between rounds, so that drift on a shared machine falls on both); the table
// gives, per configuration and for the bare proxy, the median over rounds of the p50 and p99 added latency (facade − direct) and their range, and the
// difference shared − embedded (per round the shared facade's percentile minus the embedded one's: the node's time
// cancels). --pin (Linux, 2+ CPUs, taskset) runs the facades and the bare proxy on CPU 0 and everything else this run starts (the load
// generator, the node, PostgreSQL, Redis) on the others: the facade's own cost, with the stores' CPU off its core as
// on a fleet's own hosts. BENCH_LOG_LEVEL sets the facades' log level (default info, what an operator runs; the lines go to
// /dev/null). Writes bench/results/facade-<stamp>.json (--out DIR elsewhere).
import { fork, spawnSync, type ChildProcess, type Serializable } from 'node:child_process'
import { mkdtempSync } from 'node:fs'
import { cpus, freemem, hostname, loadavg, tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { Agent, request } from 'undici'
import type { Store } from '../src/store/interfaces.js'
import { median, printSystem, systemInfo, writeReport } from './lib/report.js'

const { values: args } = parseArgs({
  options: {
    role: { type: 'string' },
    node: { type: 'string' },
    model: { type: 'string', default: 'tiny-llm' },
    'data-dir': { type: 'string' },
    rounds: { type: 'string', default: '4' },
    requests: { type: 'string', default: '3000' },
    seconds: { type: 'string', default: '3' },
    'max-tokens': { type: 'string', default: '4' },
    'node-ms': { type: 'string' },
    'node-seconds': { type: 'string', default: '10' },
    pin: { type: 'boolean', default: false },
    'database-url': { type: 'string' },
    'redis-url': { type: 'string' },
    out: { type: 'string' },
  },
})

/** Per-key and fleet-wide requests per minute: never reached, but nonzero, so that every request hits the counters. */
const BENCH_RPM = 1_000_000_000
const CONCURRENCY = [1, 50] as const
const EMBEDDED = 'sqlite+memory'
const SHARED = 'postgres+redis'
type ConfigName = typeof EMBEDDED | typeof SHARED

// ---------------------------------------------------------------- child processes

async function runChild(role: string): Promise<void> {
  let close: () => Promise<void>
  if (role === 'node') {
    const { startFakeNode } = await import('../test/helpers/fake-node.js')
    const node = await startFakeNode({ models: [args.model], capacity: 1000 })
    close = node.close
    process.send!({ url: node.url })
    process.on('message', (m) => {
      if (typeof m === 'object' && m !== null && 'answerMs' in m) {
        node.answerMs = (m as { answerMs: number }).answerMs
        process.send!({ answerMs: node.answerMs })
      }
    })
  } else if (role === 'proxy') {
    const { startBareProxy } = await import('./lib/bare-proxy.js')
    const proxy = await startBareProxy(args.node!)
    close = proxy.close
    process.send!({ url: proxy.url })
  } else {
    // The store configuration comes from the environment (ONNXD_DATABASE_URL, ONNXD_REDIS_URL), as for an operator.
    const { loadFacadeOptions } = await import('../src/facade/options.js')
    const { startFacade } = await import('../src/facade/server.js')
    const facade = await startFacade(
      loadFacadeOptions(process.env, {
        port: 0,
        nodes: [args.node!],
        dataDir: args['data-dir'],
        keyRpm: BENCH_RPM,
        fleetRpm: BENCH_RPM,
        logLevel: process.env.BENCH_LOG_LEVEL ?? 'info',
      }),
    )
    close = facade.close
    process.send!({ url: facade.url })
  }
  process.on('message', (m) => {
    if (m === 'exit') void close().then(() => process.exit(0))
    // The process's CPU time so far (user + system, µs): the parent takes it before and after a load.
    if (m === 'cpu') {
      const u = process.cpuUsage()
      process.send!({ cpu: u.user + u.system })
    }
  })
}

/** Sets the CPUs every thread of `pid` may run on (taskset's list form, e.g. `0` or `1-3`). */
function pin(pid: number, list: string): void {
  if (process.platform !== 'linux' || cpus().length < 2) throw new Error('--pin needs Linux and at least 2 CPUs')
  const r = spawnSync('taskset', ['-a', '-pc', list, String(pid)], { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`--pin: taskset -a -pc ${list} ${pid} failed: ${r.error?.message ?? r.stderr.trim()}`)
}

/** The CPUs `pid` may run on, as taskset lists them. */
function cpusOf(pid: number): string {
  const r = spawnSync('taskset', ['-pc', String(pid)], { encoding: 'utf8' })
  return r.stdout.split(':').pop()!.trim()
}

/** Sends `message` to a child and resolves with the number under `key` in its first answer that has one. */
function ask(child: ChildProcess, message: Serializable, key: string): Promise<number> {
  return new Promise((resolve) => {
    const on = (m: unknown): void => {
      if (typeof m === 'object' && m !== null && key in m) {
        child.off('message', on)
        resolve((m as Record<string, number>)[key]!)
      }
    }
    child.on('message', on)
    child.send(message)
  })
}

/** A child's CPU time so far, µs. */
const cpuOf = (child: ChildProcess): Promise<number> => ask(child, 'cpu', 'cpu')

function spawn(role: string, extra: string[], env: NodeJS.ProcessEnv = process.env): Promise<{ child: ChildProcess; url: string }> {
  const child = fork(fileURLToPath(import.meta.url), ['--role', role, ...extra], {
    execArgv: process.execArgv,
    env,
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  })
  return new Promise((resolve, reject) => {
    child.once('message', (m) => resolve({ child, url: (m as { url: string }).url }))
    child.once('exit', (code) => reject(new Error(`${role} exited with ${code}`)))
  })
}

// ---------------------------------------------------------------- load generation

interface Target {
  url: string
  headers: Record<string, string>
  body: string
  /** Statuses that count as success for this scenario. */
  expect: number[]
  /** Answers with status 200 so far (warm-ups included): what the store should have recorded. */
  ok200: number
}

interface Result {
  scenario: string
  config?: ConfigName
  concurrency: number
  requests: number
  errors: number
  p50_ms: number
  p90_ms: number
  p99_ms: number
  mean_ms: number
  rps: number
  /** Through a facade or the bare proxy: that process's CPU time per request of the load, µs (a store's server not included). */
  facade_cpu_us?: number
}

const agent = new Agent({ connections: 256, keepAliveTimeout: 30_000, pipelining: 1 })
const r3 = (x: number): number => Math.round(x * 1000) / 1000

async function once(t: Target): Promise<{ ok: boolean; headers: Record<string, unknown> }> {
  const res = await request(t.url, { method: 'POST', headers: t.headers, body: t.body, dispatcher: agent })
  await res.body.dump()
  if (res.statusCode === 200) t.ok200++
  return { ok: t.expect.includes(res.statusCode), headers: res.headers }
}

/**
 * Closed loop: `concurrency` workers share `total` requests (or run for `seconds`); latency per request. With
 * `spreadMs`, worker i starts i x spreadMs / concurrency ms late: clients whose requests arrive spread over the node's
 * answer time, as independent users' do, rather than all at once and then in lockstep (a fixed answer time never
 * breaks up a burst that started together).
 */
async function load(t: Target, concurrency: number, limit: { total?: number; seconds?: number }, spreadMs = 0): Promise<Omit<Result, 'scenario'>> {
  const lat: number[] = []
  let errors = 0
  let started = 0
  const deadline = limit.seconds !== undefined ? performance.now() + limit.seconds * 1000 : Infinity
  const more = (): boolean => (limit.total !== undefined ? started < limit.total : performance.now() < deadline)
  const t0 = performance.now()
  await Promise.all(
    Array.from({ length: concurrency }, async (_, i) => {
      if (spreadMs > 0) await new Promise((res) => setTimeout(res, (i * spreadMs) / concurrency))
      while (more()) {
        started++
        const s = performance.now()
        const { ok } = await once(t)
        lat.push(performance.now() - s)
        if (!ok) errors++
      }
    }),
  )
  const elapsed = (performance.now() - t0) / 1000
  lat.sort((a, b) => a - b)
  const q = (p: number): number => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))]!
  return {
    concurrency,
    requests: lat.length,
    errors,
    p50_ms: r3(q(0.5)),
    p90_ms: r3(q(0.9)),
    p99_ms: r3(q(0.99)),
    mean_ms: r3(lat.reduce((a, b) => a + b, 0) / lat.length),
    rps: Math.round(lat.length / elapsed),
  }
}

// ---------------------------------------------------------------- store configurations

/** `host:port` of a URL, never its credentials. */
function safeHost(url: string): string {
  try {
    const u = new URL(url)
    return `${u.hostname}${u.port ? `:${u.port}` : ''}`
  } catch {
    return '(unparseable URL)'
  }
}

interface SharedUrls {
  databaseUrl: string
  redisUrl: string
  /** Where each came from (flag, environment, throwaway server) and its host: never the URL, which may hold a password. */
  source: { database: string; redis: string }
}

/** The shared stores' URLs, or why there are none; `stops` collects the throwaway servers to stop. */
async function sharedUrls(stops: (() => Promise<void>)[]): Promise<SharedUrls | { reason: string }> {
  const { startPostgres, startRedis } = await import('../test/helpers/servers.js')
  const pick = async (
    flag: string | undefined,
    envName: string,
    start: typeof startPostgres,
  ): Promise<{ url: string; source: string } | { reason: string }> => {
    if (flag) return { url: flag, source: `--${envName === 'ONNXD_DATABASE_URL' ? 'database' : 'redis'}-url` }
    const fromEnv = process.env[envName]
    if (fromEnv) return { url: fromEnv, source: envName }
    const s = await start()
    if (!s.server) return { reason: s.reason }
    stops.push(s.server.stop)
    return { url: s.server.url, source: 'throwaway server (test/helpers/servers.ts)' }
  }
  const db = await pick(args['database-url'], 'ONNXD_DATABASE_URL', startPostgres)
  const redis = await pick(args['redis-url'], 'ONNXD_REDIS_URL', startRedis)
  const reasons = [...('reason' in db ? [`PostgreSQL: ${db.reason}`] : []), ...('reason' in redis ? [`Redis: ${redis.reason}`] : [])]
  if ('reason' in db || 'reason' in redis) return { reason: reasons.join('; ') }
  return {
    databaseUrl: db.url,
    redisUrl: redis.url,
    source: { database: `${db.source}, ${safeHost(db.url)}`, redis: `${redis.source}, ${safeHost(redis.url)}` },
  }
}

/** A store configuration ready to measure: its store (for set-up and checks), the facade's environment, keys. */
interface Config {
  name: ConfigName
  open: () => Promise<Store>
  env: NodeJS.ProcessEnv
  dataDir: string
  source: Record<string, string>
  accountId: string
  keyId: string
  key: string
  limitedKeyId: string
  limited: string
}

/** The facade's environment without the shared stores: what the embedded facade runs with. */
function embeddedEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env }
  delete env.ONNXD_DATABASE_URL
  delete env.ONNXD_REDIS_URL
  return env
}

/** Opens the store, makes the bench account and its keys: one unlimited by its own (the defaults apply), one at 1/min. */
async function prepare(
  name: ConfigName,
  open: () => Promise<Store>,
  env: NodeJS.ProcessEnv,
  source: Record<string, string>,
  dataDir = mkdtempSync(join(tmpdir(), 'onnxd-bench-')),
): Promise<Config> {
  const { createApiKey } = await import('../src/facade/accounts.js')
  const store = await open()
  try {
    const account = await store.createAccount({ name: 'bench', balanceMicros: 1e12 })
    const main = await createApiKey(store, account.id, { name: 'bench' })
    const limited = await createApiKey(store, account.id, { name: 'bench over limit', rpmLimit: 1 })
    return { name, open, env, dataDir, source, accountId: account.id, keyId: main.id, key: main.key!, limitedKeyId: limited.id, limited: limited.key! }
  } finally {
    await store.close()
  }
}

/** Redis fails open: a hit that Redis did not answer must not pass for a fast one. */
async function checkRedis(url: string): Promise<string | null> {
  const { RedisRateLimitStore } = await import('../src/store/redis-rate-limit.js')
  const counters = new RedisRateLimitStore({ url, prefix: 'onnxd-bench:probe:', timeoutMs: 2000, warn: () => undefined })
  try {
    await counters.hits([{ bucket: 'probe', limit: 1 }], 1000, Date.now())
    return counters.failures === 0 ? null : 'Redis did not answer a probe hit'
  } finally {
    await counters.close()
  }
}

// ---------------------------------------------------------------- summary

interface Spread {
  median: number
  min: number
  max: number
}

const spread = (xs: number[]): Spread => ({ median: r3(median(xs)), min: r3(Math.min(...xs)), max: r3(Math.max(...xs)) })
const show = (s: Spread): string => `${s.median.toFixed(3)} (${s.min.toFixed(3)} … ${s.max.toFixed(3)})`

interface RoundResult {
  round: number
  /** The fake node's answer time, ms (0 with --node). */
  node_ms: number
  concurrency: number
  /** The facades' order in this round. */
  order: ConfigName[]
  direct: Result
  /** The bare proxy (bench/lib/bare-proxy.ts), measured right after the node. */
  proxy: Result
  facades: Result[]
}

/** The row of the bare proxy: the floor of a Node proxy on this host, beside the facades. */
const PROXY = 'bare proxy'

interface Overhead {
  config: ConfigName | 'shared − embedded' | typeof PROXY
  node_ms: number
  concurrency: number
  rounds: number
  p50_added_ms: Spread
  p99_added_ms: Spread
  /** The facade's (or the bare proxy's) process CPU time per request, µs (not for the difference row). */
  facade_cpu_us?: Spread
}

async function main(): Promise<void> {
  const total = Number(args.requests)
  const seconds = Number(args.seconds)
  const maxTokens = Number(args['max-tokens'])
  const rounds = Number(args.rounds)
  const nodeSeconds = Number(args['node-seconds'])
  const model = args.model
  for (const [flag, v] of Object.entries({ requests: total, seconds, 'max-tokens': maxTokens, rounds, 'node-seconds': nodeSeconds })) {
    if (!(v > 0)) throw new RangeError(`--${flag} must be a positive number. Given: ${args[flag as keyof typeof args]}`)
  }
  // A real node (--node) takes what its completions take: only the fake node has an answer time to set.
  if (args.node && args['node-ms'] !== undefined) throw new RangeError('--node-ms sets the fake node\'s answer time; a real node (--node) takes its own')
  const nodeMs = args.node ? [0] : (args['node-ms'] ?? '0,100').split(',').map(Number)
  if (nodeMs.some((x) => !(x >= 0))) throw new RangeError(`--node-ms must list numbers >= 0. Given: ${args['node-ms']}`)
  /** Requests per load: a level with a node time runs about --node-seconds, never more than --requests. */
  const requestsAt = (ms: number, c: number): number => (ms === 0 ? total : Math.min(total, Math.max(2 * c, Math.ceil((c * nodeSeconds * 1000) / ms))))
  // Pinned: this process (and so every child and server it starts) off CPU 0, then each facade onto it.
  if (args.pin) pin(process.pid, `1-${cpus().length - 1}`)
  const loadStart = loadavg().map((x) => Math.round(x * 100) / 100)

  const children: ChildProcess[] = []
  const stops: (() => Promise<void>)[] = []
  const configs: Config[] = []
  const skipped: { name: ConfigName; reason: string }[] = []
  try {
    // The stores, each with the bench account and keys.
    const { SqliteStore } = await import('../src/store/sqlite.js')
    const sqliteDir = mkdtempSync(join(tmpdir(), 'onnxd-bench-'))
    const sqliteSource = { database: `SQLite in ${sqliteDir}`, redis: 'none: counters in process' }
    configs.push(await prepare(EMBEDDED, async () => new SqliteStore({ dataDir: sqliteDir }), embeddedEnv(), sqliteSource, sqliteDir))
    process.stderr.write('  starting the shared stores\n')
    const urls = await sharedUrls(stops)
    if ('reason' in urls) skipped.push({ name: SHARED, reason: urls.reason })
    else {
      const { PostgresStore } = await import('../src/store/postgres.js')
      const env = { ...embeddedEnv(), ONNXD_DATABASE_URL: urls.databaseUrl, ONNXD_REDIS_URL: urls.redisUrl }
      const redisProblem = await checkRedis(urls.redisUrl)
      if (redisProblem) skipped.push({ name: SHARED, reason: `${redisProblem} (${urls.source.redis})` })
      else {
        try {
          configs.push(await prepare(SHARED, () => PostgresStore.open({ url: urls.databaseUrl }), env, urls.source))
        } catch (e) {
          skipped.push({ name: SHARED, reason: `PostgreSQL: ${(e as Error).message}` })
        }
      }
    }
    for (const s of skipped) process.stderr.write(`  ${s.name} skipped: ${s.reason}\n`)

    // The node, then one facade per configuration in front of it.
    let nodeUrl = args.node
    let fakeNode: ChildProcess | undefined
    if (!nodeUrl) {
      const n = await spawn('node', ['--model', model])
      children.push(n.child)
      nodeUrl = n.url
      fakeNode = n.child
    }
    // The bare proxy stands where the facades stand (on CPU 0 with --pin).
    const proxy = await spawn('proxy', ['--node', nodeUrl])
    children.push(proxy.child)
    if (args.pin) pin(proxy.child.pid!, '0')
    const facadeUrl = new Map<ConfigName, string>()
    const facadeChild = new Map<ConfigName, ChildProcess>()
    for (const c of configs) {
      const f = await spawn('facade', ['--node', nodeUrl, '--data-dir', c.dataDir], c.env)
      children.push(f.child)
      facadeUrl.set(c.name, f.url)
      facadeChild.set(c.name, f.child)
      if (args.pin) pin(f.child.pid!, '0')
    }
    const pinned = args.pin ? { bench: cpusOf(process.pid), facades: [...facadeChild.values()].map((c) => cpusOf(c.pid!)), proxy: cpusOf(proxy.child.pid!) } : null

    const messages = [{ role: 'user', content: 'Say hello in four words.' }]
    const json = { 'content-type': 'application/json' }
    const body = JSON.stringify({ model, messages, max_tokens: maxTokens })
    const direct: Target = { url: `${nodeUrl}/internal/v1/completions`, headers: json, body, expect: [200], ok200: 0 }
    const viaProxy: Target = { url: `${proxy.url}/v1/chat/completions`, headers: json, body, expect: [200], ok200: 0 }
    const via = new Map<ConfigName, Target>()
    for (const c of configs) {
      via.set(c.name, { url: `${facadeUrl.get(c.name)}/v1/chat/completions`, headers: { ...json, authorization: `Bearer ${c.key}` }, body, expect: [200], ok200: 0 })
    }

    // Every request is rate-limited: the limit headers show the counters were hit.
    const limitHeader: Record<string, unknown> = {}
    for (const c of configs) {
      const { ok, headers } = await once(via.get(c.name)!)
      limitHeader[c.name] = headers['x-ratelimit-limit-requests']
      if (!ok || headers['x-ratelimit-limit-requests'] !== String(BENCH_RPM)) {
        throw new Error(`${c.name}: a completion through the facade was not rate-limited (x-ratelimit-limit-requests: ${String(headers['x-ratelimit-limit-requests'])})`)
      }
    }

    // Warm-up (connections, JIT, store caches and pools), not recorded.
    const warm = Math.min(500, total)
    for (const c of CONCURRENCY) {
      await load(direct, c, { total: Math.max(warm, 2 * c) })
      await load(viaProxy, c, { total: Math.max(warm, 2 * c) })
      for (const t of via.values()) await load(t, c, { total: Math.max(warm, 2 * c) })
    }
    process.stderr.write('  warmed up\n')

    // Rounds: per node time and concurrency, the node directly, then each facade; the facades' order alternates
    // between rounds.
    const perRound: RoundResult[] = []
    for (let round = 1; round <= rounds; round++) {
      const order = configs.map((c) => c.name)
      if (round % 2 === 0) order.reverse()
      for (const ms of nodeMs) {
        if (fakeNode) await ask(fakeNode, { answerMs: ms }, 'answerMs')
        for (const c of CONCURRENCY) {
          const n = requestsAt(ms, c)
          const d = { scenario: 'direct to node', ...(await load(direct, c, { total: n }, ms)) }
          /** A load through `child`'s server, with that process's CPU time per request. */
          const through = async (t: Target, child: ChildProcess): Promise<Omit<Result, 'scenario'>> => {
            const cpu0 = await cpuOf(child)
            const r = await load(t, c, { total: n }, ms)
            return { ...r, facade_cpu_us: Math.round(((await cpuOf(child)) - cpu0) / r.requests) }
          }
          const p = { scenario: 'through the bare proxy', ...(await through(viaProxy, proxy.child)) }
          const facades: Result[] = []
          for (const name of order) {
            facades.push({ scenario: 'through facade', config: name, ...(await through(via.get(name)!, facadeChild.get(name)!)) })
          }
          perRound.push({ round, node_ms: ms, concurrency: c, order, direct: d, proxy: p, facades })
          const added = [p, ...facades].map((f) => `${f.config ?? PROXY} +${r3(f.p50_ms - d.p50_ms)} ms`).join(', ')
          process.stderr.write(`  round ${round}/${rounds} node ${ms} ms c=${c}: direct p50 ${d.p50_ms} ms; p50 added: ${added}\n`)
        }
      }
    }
    if (fakeNode) await ask(fakeNode, { answerMs: 0 }, 'answerMs')

    // Rejected requests: an unknown key (401: a key lookup) and a key over its limit (429: lookup and counter hit).
    const rejected: Result[] = []
    for (const c of configs) {
      const v = via.get(c.name)!
      const badKey: Target = { ...v, headers: { ...json, authorization: 'Bearer sk-svc-00000000000000000000000000000000' }, expect: [401], ok200: 0 }
      // A limit of 1 per minute: when the clock minute turns during the run, one request gets through (200).
      const overLimit: Target = { ...v, headers: { ...json, authorization: `Bearer ${c.limited}` }, expect: [429, 200], ok200: 0 }
      await once(overLimit) // use up the limited key's minute
      for (const [scenario, t] of [
        ['rejected 401 (unknown key)', badKey],
        ['rejected 429 (key over limit)', overLimit],
      ] as const) {
        await load(t, 50, { total: Math.min(500, total) })
        rejected.push({ scenario, config: c.name, ...(await load(t, 50, { seconds })) })
        process.stderr.write(`  ${c.name} ${scenario} done\n`)
      }
    }

    // Every answered completion is in the store, and Redis answered every hit (it fails open: a silent miss is fast).
    const checks: Record<string, { answered: number; recorded: number; rate_limit_fail_open: number | null }> = {}
    for (const c of configs) {
      const store = await c.open()
      try {
        const recorded = (await store.usage({ keyId: c.keyId })).reduce((n, u) => n + u.requests, 0)
        const health = (await (await request(`${facadeUrl.get(c.name)}/health`, { dispatcher: agent })).body.json()) as { rate_limit_fail_open?: number }
        checks[c.name] = { answered: via.get(c.name)!.ok200, recorded, rate_limit_fail_open: health.rate_limit_fail_open ?? null }
        // The bench's keys stop working: a given database keeps nothing usable.
        await store.revokeKey(c.accountId, c.keyId)
        await store.revokeKey(c.accountId, c.limitedKeyId)
        await store.setSubscription(c.accountId, 'inactive')
      } finally {
        await store.close()
      }
    }

    // Summary: per configuration and concurrency, the added latency's median over rounds and its range.
    const overhead: Overhead[] = []
    for (const ms of nodeMs) for (const c of CONCURRENCY) {
      const rs = perRound.filter((r) => r.node_ms === ms && r.concurrency === c)
      const added = (name: ConfigName, p: 'p50_ms' | 'p99_ms'): number[] =>
        rs.map((r) => r.facades.find((f) => f.config === name)![p] - r.direct[p])
      const proxyAdded = (p: 'p50_ms' | 'p99_ms'): number[] => rs.map((r) => r.proxy[p] - r.direct[p])
      overhead.push({
        config: PROXY,
        node_ms: ms,
        concurrency: c,
        rounds: rs.length,
        p50_added_ms: spread(proxyAdded('p50_ms')),
        p99_added_ms: spread(proxyAdded('p99_ms')),
        facade_cpu_us: spread(rs.map((r) => r.proxy.facade_cpu_us!)),
      })
      for (const cfg of configs) {
        const cpu = rs.map((r) => r.facades.find((f) => f.config === cfg.name)!.facade_cpu_us!)
        overhead.push({
          config: cfg.name,
          node_ms: ms,
          concurrency: c,
          rounds: rs.length,
          p50_added_ms: spread(added(cfg.name, 'p50_ms')),
          p99_added_ms: spread(added(cfg.name, 'p99_ms')),
          facade_cpu_us: spread(cpu),
        })
      }
      if (configs.length === 2) {
        const diff = (p: 'p50_ms' | 'p99_ms'): number[] => added(SHARED, p).map((x, i) => x - added(EMBEDDED, p)[i]!)
        overhead.push({ config: 'shared − embedded', node_ms: ms, concurrency: c, rounds: rs.length, p50_added_ms: spread(diff('p50_ms')), p99_added_ms: spread(diff('p99_ms')) })
      }
    }

    const loadEnd = loadavg().map((x) => Math.round(x * 100) / 100)
    const system = {
      ...systemInfo(),
      host: hostname(),
      free_memory_gb: Math.round(freemem() / 2 ** 30),
      loadavg_start: loadStart,
      loadavg_end: loadEnd,
      backend: args.node ? `node at ${args.node}` : 'fake node (test/helpers/fake-node.ts)',
      cpus: pinned ?? 'not pinned',
    }
    printSystem(system)
    if (pinned) console.log(`pinned: facades on CPU ${pinned.facades.join(', ')}, the bare proxy on CPU ${pinned.proxy}; the load generator, node and stores on CPU ${pinned.bench}`)
    console.log(
      `facade benchmark: ${system.backend}, model ${model}, max_tokens ${maxTokens}; ${rounds} round${rounds === 1 ? '' : 's'} of up to ${total} requests per ` +
        `level (about ${nodeSeconds} s with a node time); load average ${loadStart.join(' ')} at start, ${loadEnd.join(' ')} at end`,
    )
    console.log('added latency (facade − direct), ms: median over rounds (min … max); the bare proxy, a node:http proxy doing none of the facade\'s work, is the floor of any Node proxy on this host')
    const rows: Record<string, string | number>[] = []
    for (const ms of nodeMs) for (const c of CONCURRENCY) {
      for (const o of overhead.filter((x) => x.node_ms === ms && x.concurrency === c)) {
        rows.push({
          config: o.config,
          'node ms': ms,
          concurrency: c,
          'p50 added': show(o.p50_added_ms),
          'p99 added': show(o.p99_added_ms),
          'facade CPU µs/req': o.facade_cpu_us ? o.facade_cpu_us.median : '',
        })
      }
      for (const s of skipped) rows.push({ config: s.name, 'node ms': ms, concurrency: c, 'p50 added': `skipped: ${s.reason}`, 'p99 added': '', 'facade CPU µs/req': '' })
    }
    console.table(rows)
    console.table(rejected.map((r) => ({ config: r.config, scenario: r.scenario, requests: r.requests, errors: r.errors, p50_ms: r.p50_ms, p99_ms: r.p99_ms, rps: r.rps })))
    for (const [name, ch] of Object.entries(checks)) {
      const failOpen = ch.rate_limit_fail_open === null ? '' : `; Redis requests failed open: ${ch.rate_limit_fail_open}`
      console.log(`store check, ${name}: ${ch.recorded} completions recorded of ${ch.answered} answered${failOpen}`)
    }
    const bad = Object.entries(checks).filter(([, ch]) => ch.recorded !== ch.answered || (ch.rate_limit_fail_open ?? 0) > 0)
    if (bad.length > 0) console.log(`WARNING: ${bad.map(([n]) => n).join(', ')}: the store check failed; those figures do not measure the stores`)
    // The issue's target, "at most 2 ms added at p50 with the shared stores", read both ways: what the shared stores
    // add over the embedded ones, and all the shared facade adds over the node (which the bare proxy's floor bounds).
    const check = (config: string): string => {
      const rows = overhead.filter((o) => o.config === config)
      return rows.length > 0
        ? rows.map((o) => `node ${o.node_ms} ms c=${o.concurrency} ${o.p50_added_ms.median <= 2 ? 'met' : 'NOT met'} (${o.p50_added_ms.median} ms)`).join(', ')
        : `not measured (${SHARED} skipped)`
    }
    console.log(`target (${SHARED} adds ≤ 2 ms at p50 over ${EMBEDDED}): ${check('shared − embedded')}`)
    console.log(`the ${SHARED} facade's whole added latency ≤ 2 ms at p50: ${check(SHARED)}`)

    const file = writeReport(
      'facade',
      {
        bench: 'facade',
        schema: 4,
        params: { rounds, total, seconds, maxTokens, model, nodeMs, nodeSeconds, pin: args.pin, concurrency: CONCURRENCY, keyRpm: BENCH_RPM, fleetRpm: BENCH_RPM },
        system,
        configs: [
          ...configs.map((c) => ({ name: c.name, skipped: false, source: c.source, rate_limit_header: limitHeader[c.name], check: checks[c.name] })),
          ...skipped.map((s) => ({ name: s.name, skipped: true, reason: s.reason })),
        ],
        overhead,
        rounds: perRound,
        rejected,
      },
      args.out ? resolve(args.out) : undefined,
    )
    console.log(`wrote ${file}`)
  } finally {
    await Promise.all(
      children.map(
        (c) =>
          new Promise<void>((res) => {
            if (c.exitCode !== null || !c.connected) return res()
            const kill = setTimeout(() => c.kill('SIGKILL'), 10_000)
            c.once('exit', () => {
              clearTimeout(kill)
              res()
            })
            c.send('exit')
          }),
      ),
    )
    await agent.close()
    for (const stop of stops) await stop()
  }
}

if (args.role) await runChild(args.role)
else await main()
