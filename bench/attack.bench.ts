// Attacks on a serving node: a bystander's streaming latency with and without eight clients attacking, one kind of
// attack per phase (--attacks, default all): `prompt`, ~1 MB prompts (issue #10); `schema`, structured outputs that
// a node must not compile on its step loop (issue #32: the 80 KB schema of 3,000 optional properties, 630 KB enums,
// and schemas within the bounds that compile for about a second each, each one new); `tools`, ~860 KB of tools or of
// tool-call arguments (issue #32). The real node (default model unless --model) and the real facade run in a child
// process; this process is the load generator. Each round runs a quiet phase, then each attack's, so a noisy host
// shows up in all of them.
//
//   npx tsx bench/attack.bench.ts [--model DIR] [--seconds S] [--rounds N] [--attackers N] [--max-tokens N]
//                                 [--attacks prompt,schema,tools]
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
    attacks: { type: 'string', default: 'prompt,schema,tools' },
  },
})

interface Served {
  facade: string
  node: string
  key: string
  model: string
}

async function serve(): Promise<void> {
  const { createEnginePool } = await import('../src/engine/bench-surface.js')
  const { buildNode } = await import('../src/node/app.js')
  const { loadNodeOptions } = await import('../src/node/options.js')
  const { loadFacadeOptions } = await import('../src/facade/options.js')
  const { startFacade } = await import('../src/facade/server.js')
  const { SqliteStore } = await import('../src/store/sqlite.js')
  const { createApiKey } = await import('../src/facade/accounts.js')
  const { ensureDefaultModel } = await import('../src/builder/index.js')
  const modelDir = args.model ? resolve(args.model) : await ensureDefaultModel(resolve('.cache/models/onnxd-tiny'), 'tiny', 'plain')
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

const ATTACKS = ['prompt', 'schema', 'tools'] as const
type Attack = (typeof ATTACKS)[number]

const ATTACK_NAMES: Record<Attack, string> = {
  prompt: '1 MB prompts',
  schema: 'schemas: 80 KB / 630 KB enums / 256 properties',
  tools: '860 KB of tools or tool-call arguments',
}

const props = (n: number, prefix: string): Record<string, unknown> => Object.fromEntries(Array.from({ length: n }, (_, i) => [`${prefix}${i}`, { type: 'integer' }]))

/** The i-th request body of an attacker of kind `kind` (schemas are new each time: no cache hit helps). */
function attackBody(kind: Attack, model: string, i: number): string {
  const messages = [{ role: 'user', content: 'hello there' }]
  if (kind === 'prompt') return JSON.stringify({ model, messages: [{ role: 'user', content: 'a'.repeat(1_000_000) }] })
  if (kind === 'schema') {
    const schema =
      i % 3 === 0
        ? { type: 'object', properties: props(3000, `h${i}_`) }
        : i % 3 === 1
          ? { type: 'object', properties: { a: { enum: Array.from({ length: 12_000 }, (_, j) => `v${i}-${j}-${'x'.repeat(40)}`) } } }
          : { type: 'object', properties: props(256, `s${i}_`) }
    return JSON.stringify({ model, messages, max_tokens: 8, response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } })
  }
  const description = 'd'.repeat(2000)
  if (i % 2 === 0) {
    const tools = Array.from({ length: 430 }, (_, j) => ({ type: 'function', function: { name: `f${j}`, description, parameters: { type: 'object', properties: {} } } }))
    return JSON.stringify({ model, messages, max_tokens: 8, tools })
  }
  const call = { id: 'call_1', type: 'function', function: { name: 'f', arguments: JSON.stringify({ x: 'y'.repeat(840_000) }) } }
  return JSON.stringify({
    model,
    max_tokens: 8,
    tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
    messages: [...messages, { role: 'assistant', content: null, tool_calls: [call] }, { role: 'tool', tool_call_id: 'call_1', content: 'ok' }],
  })
}

interface Phase {
  attack: Attack | null
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

let sent = 0

async function runPhase(s: Served, attack: Attack | null, seconds: number, attackers: number, maxTokens: number): Promise<Phase> {
  const phase: Phase = { attack, ttftMs: [], itlMs: [], streams: 0, failedStreams: 0, attackStatuses: {}, health: {} }
  const until = Date.now() + seconds * 1000
  const attacker = async (): Promise<void> => {
    while (Date.now() < until) {
      const body = attackBody(attack!, s.model, sent++)
      const res = await fetch(`${s.facade}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${s.key}`, 'content-type': 'application/json' }, body })
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
  const attacks = args.attacks!.split(',').map((a) => {
    if (!(ATTACKS as readonly string[]).includes(a)) throw new Error(`--attacks: ${a} is not one of ${ATTACKS.join(', ')}`)
    return a as Attack
  })
  const phases: Phase[] = []
  for (let r = 0; r < rounds; r++) {
    for (const attack of [null, ...attacks]) {
      const p = await runPhase(served, attack, seconds, attackers, maxTokens)
      phases.push(p)
      process.stderr.write(`round ${r + 1} ${attack ?? 'quiet'}: ${p.streams} streams, TTFT p50 ${pct(p.ttftMs, 50).toFixed(1)} ms, attackers ${JSON.stringify(p.attackStatuses)}\n`)
    }
  }
  child.send('exit')
  const merged = [null, ...attacks].map((attack) => {
    const ps = phases.filter((p) => p.attack === attack)
    const sum = (f: (p: Phase) => Record<string, number>): Record<string, number> => {
      const out: Record<string, number> = {}
      for (const p of ps) for (const [k, v] of Object.entries(f(p))) out[k] = (out[k] ?? 0) + v
      return out
    }
    const ttft = ps.flatMap((p) => p.ttftMs)
    const itl = ps.flatMap((p) => p.itlMs)
    return {
      phase: attack ? `${attack} (${attackers} x ${ATTACK_NAMES[attack]})` : 'quiet',
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
  writeFileSync(file, JSON.stringify({ bench: 'attack', params: { seconds, rounds, attackers, maxTokens, attacks, model: served.model }, cpu: cpus()[0]?.model, cores: cpus().length, results: merged }, null, 2))
  console.log(`wrote ${file}`)
}

if (args.role === 'serve') void serve()
else void main()
