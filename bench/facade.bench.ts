// Facade overhead: latency of a short completion through the facade vs. straight at a node, at 1 and 50
// concurrent requests, and the rate of rejected requests (401, 429) the facade sustains.
//
//   npx tsx bench/facade.bench.ts [--node URL --model ID] [--requests N] [--seconds S] [--max-tokens N]
//
// BENCH_LOG_LEVEL sets the facade's log level (default info, what an operator runs; the lines go to /dev/null).
// The node, the facade and this load generator run as three processes. Without --node a fake node
// (test/helpers/fake-node.ts, canned tokens) stands in for a real one. Prints a table and writes
// bench/results/facade-<stamp>.json.
import { fork, type ChildProcess } from 'node:child_process'
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import { cpus, freemem, hostname, release, tmpdir, totalmem } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { Agent, request } from 'undici'

const { values: args } = parseArgs({
  options: {
    role: { type: 'string' },
    node: { type: 'string' },
    model: { type: 'string', default: 'tiny-llm' },
    'data-dir': { type: 'string' },
    requests: { type: 'string', default: '3000' },
    seconds: { type: 'string', default: '3' },
    'max-tokens': { type: 'string', default: '4' },
  },
})

// ---------------------------------------------------------------- child processes

async function runChild(role: string): Promise<void> {
  let close: () => Promise<void>
  if (role === 'node') {
    const { startFakeNode } = await import('../test/helpers/fake-node.js')
    const node = await startFakeNode({ models: [args.model], capacity: 1000 })
    close = node.close
    process.send!({ url: node.url })
  } else {
    const { loadFacadeOptions } = await import('../src/facade/options.js')
    const { startFacade } = await import('../src/facade/server.js')
    const facade = await startFacade(
      loadFacadeOptions(process.env, {
        port: 0,
        nodes: [args.node!],
        dataDir: args['data-dir'],
        keyRpm: 0,
        fleetRpm: 0,
        logLevel: process.env.BENCH_LOG_LEVEL ?? 'info',
      }),
    )
    close = facade.close
    process.send!({ url: facade.url })
  }
  process.on('message', (m) => {
    if (m === 'exit') void close().then(() => process.exit(0))
  })
}

function spawn(role: string, extra: string[]): Promise<{ child: ChildProcess; url: string }> {
  const child = fork(fileURLToPath(import.meta.url), ['--role', role, ...extra], {
    execArgv: process.execArgv,
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
}

interface Result {
  scenario: string
  concurrency: number
  requests: number
  errors: number
  p50_ms: number
  p90_ms: number
  p99_ms: number
  mean_ms: number
  rps: number
}

const agent = new Agent({ connections: 256, keepAliveTimeout: 30_000, pipelining: 1 })

async function once(t: Target): Promise<boolean> {
  const res = await request(t.url, { method: 'POST', headers: t.headers, body: t.body, dispatcher: agent })
  await res.body.dump()
  return t.expect.includes(res.statusCode)
}

/** Closed loop: `concurrency` workers share `total` requests (or run for `seconds`); latency per request. */
async function load(t: Target, concurrency: number, limit: { total?: number; seconds?: number }): Promise<Omit<Result, 'scenario'>> {
  const lat: number[] = []
  let errors = 0
  let started = 0
  const deadline = limit.seconds !== undefined ? performance.now() + limit.seconds * 1000 : Infinity
  const more = (): boolean => (limit.total !== undefined ? started < limit.total : performance.now() < deadline)
  const t0 = performance.now()
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (more()) {
        started++
        const s = performance.now()
        const ok = await once(t)
        lat.push(performance.now() - s)
        if (!ok) errors++
      }
    }),
  )
  const elapsed = (performance.now() - t0) / 1000
  lat.sort((a, b) => a - b)
  const q = (p: number): number => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))]!
  const r3 = (x: number): number => Math.round(x * 1000) / 1000
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

async function main(): Promise<void> {
  const total = Number(args.requests)
  const seconds = Number(args.seconds)
  const maxTokens = Number(args['max-tokens'])
  const model = args.model
  const dataDir = mkdtempSync(join(tmpdir(), 'onnxd-bench-'))

  // Accounts and keys first, in the facade's data directory.
  const { SqliteStore } = await import('../src/store/sqlite.js')
  const { createApiKey } = await import('../src/facade/accounts.js')
  const store = new SqliteStore({ dataDir })
  const account = await store.createAccount({ name: 'bench', balanceMicros: 1e12 })
  const key = (await createApiKey(store, account.id, { rpmLimit: 0 })).key!
  const limited = (await createApiKey(store, account.id, { rpmLimit: 1 })).key!
  await store.close()

  const children: ChildProcess[] = []
  try {
    let nodeUrl = args.node
    if (!nodeUrl) {
      const n = await spawn('node', ['--model', model])
      children.push(n.child)
      nodeUrl = n.url
    }
    const f = await spawn('facade', ['--node', nodeUrl, '--data-dir', dataDir])
    children.push(f.child)

    const messages = [{ role: 'user', content: 'Say hello in four words.' }]
    const json = { 'content-type': 'application/json' }
    const direct: Target = {
      url: `${nodeUrl}/internal/v1/completions`,
      headers: json,
      body: JSON.stringify({ model, messages, max_tokens: maxTokens }),
      expect: [200],
    }
    const chat = JSON.stringify({ model, messages, max_tokens: maxTokens })
    const viaFacade: Target = { url: `${f.url}/v1/chat/completions`, headers: { ...json, authorization: `Bearer ${key}` }, body: chat, expect: [200] }
    const badKey: Target = { ...viaFacade, headers: { ...json, authorization: 'Bearer sk-svc-00000000000000000000000000000000' }, expect: [401] }
    // A limit of 1 per minute: when the clock minute turns during the run, one request gets through (200).
    const overLimit: Target = { ...viaFacade, headers: { ...json, authorization: `Bearer ${limited}` }, expect: [429, 200] }

    const results: Result[] = []
    const run = async (scenario: string, t: Target, c: number, lim: { total?: number; seconds?: number }): Promise<void> => {
      await load(t, c, { total: Math.min(500, total) }) // warm-up: connections, JIT, SQLite caches
      results.push({ scenario, ...(await load(t, c, lim)) })
      process.stderr.write(`  ${scenario} c=${c} done\n`)
    }
    for (const c of [1, 50]) {
      await run('direct to node', direct, c, { total })
      await run('through facade', viaFacade, c, { total })
    }
    await once(overLimit) // use up the limited key's minute
    await run('rejected 401 (unknown key)', badKey, 50, { seconds })
    await run('rejected 429 (key over limit)', overLimit, 50, { seconds })

    const overhead = [1, 50].map((c) => {
      const d = results.find((r) => r.scenario === 'direct to node' && r.concurrency === c)!
      const v = results.find((r) => r.scenario === 'through facade' && r.concurrency === c)!
      return { concurrency: c, p50_added_ms: Math.round((v.p50_ms - d.p50_ms) * 1000) / 1000, p99_added_ms: Math.round((v.p99_ms - d.p99_ms) * 1000) / 1000 }
    })

    const system = {
      node: process.version,
      cpu: cpus()[0]?.model ?? 'unknown',
      cores: cpus().length,
      memory_gb: Math.round(totalmem() / 2 ** 30),
      free_memory_gb: Math.round(freemem() / 2 ** 30),
      os: `${process.platform} ${release()}`,
      host: hostname(),
      backend: args.node ? `node at ${args.node}` : 'fake node (test/helpers/fake-node.ts)',
    }
    console.log(`facade benchmark: ${system.backend}, model ${model}, max_tokens ${maxTokens}; ${system.cpu} × ${system.cores}, ${system.node}`)
    console.table(results.map((r) => ({ ...r })))
    console.table(overhead)
    const target = overhead[0]!.p50_added_ms <= 1
    console.log(`target (facade adds ≤ 1 ms at p50, 1 concurrent): ${target ? 'met' : 'NOT met'}`)

    const dir = fileURLToPath(new URL('./results/', import.meta.url))
    mkdirSync(dir, { recursive: true })
    const file = join(dir, `facade-${new Date().toISOString().replace(/[:.]/g, '-')}.json`)
    writeFileSync(file, JSON.stringify({ bench: 'facade', params: { total, seconds, maxTokens, model }, system, results, overhead }, null, 2))
    console.log(`wrote ${file}`)
  } finally {
    for (const c of children) c.send('exit')
    await agent.close()
  }
}

if (args.role) await runChild(args.role)
else await main()
