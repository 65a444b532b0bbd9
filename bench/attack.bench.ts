// Large-prompt attack: a bystander's streaming latency with and without eight clients sending ~1 MB prompts (issue
// #10). The real node (default model unless --model) and the real facade run in a child process; this process is
// the load generator. Phases alternate (quiet, attack, quiet, attack, ...) so a noisy host shows up in both.
//
//   npx tsx bench/attack.bench.ts [--model DIR] [--seconds S] [--rounds N] [--attackers N] [--max-tokens N]
//
// Prints a table of the bystander's TTFT and inter-token latency (p50, p99) per phase kind, the attackers'
// statuses and the node's /health statuses seen, and writes bench/results/attack-<stamp>.json.
import { fork } from 'node:child_process'
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'

const { values: args } = parseArgs({
  options: {
    role: { type: 'string' },
    model: { type: 'string' },
    seconds: { type: 'string', default: '10' },
    rounds: { type: 'string', default: '2' },
    attackers: { type: 'string', default: '8' },
    'max-tokens': { type: 'string', default: '32' },
  },
})

interface Served {
  facade: string
  node: string
  key: string
  model: string
}

async function serve(): Promise<void> {
  const { createEnginePool } = await import('../src/engine/pool/pool.js')
  const { buildNode } = await import('../src/node/app.js')
  const { loadNodeOptions } = await import('../src/node/options.js')
  const { loadFacadeOptions } = await import('../src/facade/options.js')
  const { startFacade } = await import('../src/facade/server.js')
  const { SqliteStore } = await import('../src/store/sqlite.js')
  const { createApiKey } = await import('../src/facade/accounts.js')
  const { ensureDefaultModel } = await import('../src/builder/index.js')
  const modelDir = args.model ? resolve(args.model) : await ensureDefaultModel(resolve('.cache/models/onnxd-tiny'), 'tiny')
  const nodeOpts = loadNodeOptions({}, { model: modelDir, port: 0, logLevel: 'warn' })
  const engine = createEnginePool({ modelDir, workers: 1 })
  const node = buildNode(nodeOpts, { engine })
  const nodeUrl = await node.listen({ port: 0, host: '127.0.0.1' })
  await engine.ready()
  const dataDir = mkdtempSync(join(tmpdir(), 'onnxd-attack-'))
  const store = new SqliteStore({ file: join(dataDir, 'onnxd.db') })
  const account = await store.createAccount({ name: 'bench', balanceMicros: 1e15, subscription: 'active' })
  const key = (await createApiKey(store, account.id, { rpmLimit: null })).key!
  const facade = await startFacade(loadFacadeOptions({}, { port: 0, nodes: [nodeUrl], dataDir, keyRpm: 0, fleetRpm: 0, logLevel: 'warn' }), { store })
  process.send!({ facade: facade.url, node: nodeUrl, key, model: engine.health().model } satisfies Served)
  process.on('message', () => {
    void facade.close().then(() => node.close()).then(() => engine.close()).then(() => process.exit(0))
  })
}

const pct = (xs: number[], p: number): number => {
  if (!xs.length) return NaN
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]
}

interface Phase {
  attack: boolean
  ttftMs: number[]
  itlMs: number[]
  streams: number
  failedStreams: number
  attackStatuses: Record<string, number>
  health: Record<string, number>
}

/** One streamed chat completion; records TTFT and the gaps between content chunks. */
async function bystanderStream(s: Served, maxTokens: number, phase: Phase): Promise<void> {
  const t0 = performance.now()
  const res = await fetch(`${s.facade}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${s.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: s.model, messages: [{ role: 'user', content: 'hello there' }], max_tokens: maxTokens, stream: true, ignore_eos: true }),
  })
  if (res.status !== 200 || !res.body) {
    await res.arrayBuffer()
    phase.failedStreams++
    return
  }
  let last = -1
  let buf = ''
  let finished = false
  const dec = new TextDecoder()
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true })
    let i: number
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const line = buf.slice(0, i)
      buf = buf.slice(i + 2)
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue
      const ev = JSON.parse(line.slice(6)) as { choices?: Array<{ delta?: { content?: string }; finish_reason?: string | null }> }
      const c = ev.choices?.[0]
      if (c?.finish_reason) finished = true
      if (!c?.delta?.content) continue
      const now = performance.now()
      if (last < 0) phase.ttftMs.push(now - t0)
      else phase.itlMs.push(now - last)
      last = now
    }
  }
  if (finished) phase.streams++
  else phase.failedStreams++
}

async function runPhase(s: Served, attack: boolean, seconds: number, attackers: number, maxTokens: number): Promise<Phase> {
  const phase: Phase = { attack, ttftMs: [], itlMs: [], streams: 0, failedStreams: 0, attackStatuses: {}, health: {} }
  const until = Date.now() + seconds * 1000
  const huge = JSON.stringify({ model: s.model, messages: [{ role: 'user', content: 'a'.repeat(1_000_000) }] })
  const attacker = async (): Promise<void> => {
    while (Date.now() < until) {
      const res = await fetch(`${s.facade}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${s.key}`, 'content-type': 'application/json' }, body: huge })
      await res.arrayBuffer()
      phase.attackStatuses[res.status] = (phase.attackStatuses[res.status] ?? 0) + 1
    }
  }
  const poller = async (): Promise<void> => {
    while (Date.now() < until) {
      const h = (await (await fetch(`${s.node}/health`)).json()) as { status: string }
      phase.health[h.status] = (phase.health[h.status] ?? 0) + 1
      await new Promise((r) => setTimeout(r, 200))
    }
  }
  const bystander = async (): Promise<void> => {
    while (Date.now() < until) await bystanderStream(s, maxTokens, phase)
  }
  await Promise.all([...(attack ? Array.from({ length: attackers }, attacker) : []), poller(), bystander()])
  return phase
}

async function main(): Promise<void> {
  const child = fork(fileURLToPath(import.meta.url), ['--role', 'serve', ...(args.model ? ['--model', args.model] : [])], {
    execArgv: process.execArgv,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  })
  const served = await new Promise<Served>((res, rej) => {
    child.once('message', (m) => res(m as Served))
    child.once('exit', (code) => rej(new Error(`server exited with ${code}`)))
  })
  const seconds = Number(args.seconds)
  const rounds = Number(args.rounds)
  const attackers = Number(args.attackers)
  const maxTokens = Number(args['max-tokens'])
  const phases: Phase[] = []
  for (let r = 0; r < rounds; r++) {
    for (const attack of [false, true]) {
      const p = await runPhase(served, attack, seconds, attackers, maxTokens)
      phases.push(p)
      process.stderr.write(`round ${r + 1} ${attack ? 'attack' : 'quiet '}: ${p.streams} streams, TTFT p50 ${pct(p.ttftMs, 50).toFixed(1)} ms\n`)
    }
  }
  child.send('exit')
  const merged = [false, true].map((attack) => {
    const ps = phases.filter((p) => p.attack === attack)
    const sum = (f: (p: Phase) => Record<string, number>): Record<string, number> => {
      const out: Record<string, number> = {}
      for (const p of ps) for (const [k, v] of Object.entries(f(p))) out[k] = (out[k] ?? 0) + v
      return out
    }
    const ttft = ps.flatMap((p) => p.ttftMs)
    const itl = ps.flatMap((p) => p.itlMs)
    return {
      phase: attack ? `attack (${attackers} x 1 MB prompts)` : 'quiet',
      streams: ps.reduce((n, p) => n + p.streams, 0),
      failed_streams: ps.reduce((n, p) => n + p.failedStreams, 0),
      ttft_p50_ms: pct(ttft, 50),
      ttft_p99_ms: pct(ttft, 99),
      itl_p50_ms: pct(itl, 50),
      itl_p99_ms: pct(itl, 99),
      attack_statuses: sum((p) => p.attackStatuses),
      health: sum((p) => p.health),
    }
  })
  console.log(`\nattack bench: ${served.model}, ${rounds} rounds x ${seconds} s per phase, bystander max_tokens ${maxTokens}; ${cpus()[0]?.model ?? 'cpu'} x ${cpus().length}`)
  console.table(
    merged.map((m) => ({
      phase: m.phase,
      streams: m.streams,
      failed: m.failed_streams,
      'TTFT p50 ms': m.ttft_p50_ms.toFixed(1),
      'TTFT p99 ms': m.ttft_p99_ms.toFixed(1),
      'ITL p50 ms': m.itl_p50_ms.toFixed(1),
      'ITL p99 ms': m.itl_p99_ms.toFixed(1),
      attackers: JSON.stringify(m.attack_statuses),
      health: JSON.stringify(m.health),
    })),
  )
  mkdirSync('bench/results', { recursive: true })
  const file = `bench/results/attack-${new Date().toISOString().replace(/[:.]/g, '-')}.json`
  writeFileSync(file, JSON.stringify({ bench: 'attack', params: { seconds, rounds, attackers, maxTokens, model: served.model }, cpu: cpus()[0]?.model, cores: cpus().length, results: merged }, null, 2))
  console.log(`wrote ${file}`)
}

if (args.role === 'serve') void serve()
else void main()
