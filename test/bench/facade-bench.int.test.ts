// bench/facade.bench.ts (issue #15) on tiny counts: both store configurations in one run, alternating over two
// rounds, in front of a fake node that answers at once and one that takes 20 ms, with the rejected-request rates and
// the bare proxy (the floor of a Node proxy) measured beside them.
// Checks the JSON report: the added latency of each configuration at each node time and at 1 and 50 concurrent, the difference shared − embedded, and that each facade rate-limited and recorded every completion it
// answered. The postgres+redis half is skipped, with the bench's reason, where PostgreSQL or Redis cannot start.
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { beforeAll, describe, expect, it } from 'vitest'

interface Spread {
  median: number
  min: number
  max: number
}

interface Report {
  bench: string
  schema: number
  params: { rounds: number; nodeMs: number[]; pin: boolean; keyRpm: number; fleetRpm: number }
  system: { cpus: { bench: string; facades: string[]; proxy: string } | string }
  configs: (
    | { name: string; skipped: false; rate_limit_header: string; check: { answered: number; recorded: number; rate_limit_fail_open: number | null } }
    | { name: string; skipped: true; reason: string }
  )[]
  overhead: { config: string; node_ms: number; concurrency: number; rounds: number; p50_added_ms: Spread; p99_added_ms: Spread; facade_cpu_us?: Spread }[]
  rounds: {
    round: number
    node_ms: number
    concurrency: number
    order: string[]
    direct: { requests: number; p50_ms: number }
    proxy: { requests: number; errors: number; facade_cpu_us: number }
    facades: { config: string; requests: number; errors: number }[]
  }[]
  rejected: { config: string; scenario: string; requests: number; errors: number }[]
}

/** The levels the run measures: [node time ms, concurrency]. */
const LEVELS = [
  [0, 1],
  [0, 50],
  [20, 1],
  [20, 50],
] as const

/** --pin where it can work: Linux with taskset and 2+ CPUs (CI's machines). */
const PIN = process.platform === 'linux' && cpus().length >= 2 && spawnSync('taskset', ['-pc', String(process.pid)]).status === 0

let report: Report
let stdout = ''

beforeAll(() => {
  const out = mkdtempSync(join(tmpdir(), 'onnxd-facade-bench-'))
  const env = { ...process.env }
  // The shared stores come from throwaway servers, not from whatever the environment names.
  delete env.ONNXD_DATABASE_URL
  delete env.ONNXD_REDIS_URL
  const args = ['--import', 'tsx', 'bench/facade.bench.ts', '--rounds', '2', '--requests', '60', '--seconds', '0.3', '--node-ms', '0,20', '--node-seconds', '0.5', '--out', out, ...(PIN ? ['--pin'] : [])]
  const run = spawnSync(process.execPath, args, { env, encoding: 'utf8', timeout: 170_000 })
  stdout = run.stdout
  expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0)
  const files = readdirSync(out).filter((f) => f.startsWith('facade-') && f.endsWith('.json'))
  expect(files).toHaveLength(1)
  report = JSON.parse(readFileSync(join(out, files[0]!), 'utf8')) as Report
}, 180_000)

/** What a round's load at this level runs: at 20 ms and 1 concurrent about --node-seconds (25 requests), else all of --requests. */
const requestsOf = (r: { node_ms: number; concurrency: number }): number => (r.node_ms === 20 && r.concurrency === 1 ? 25 : 60)

function expectMeasured(name: string): void {
  const config = report.configs.find((c) => c.name === name)!
  expect(config.skipped).toBe(false)
  if (config.skipped) return
  // Rate limiting ran (the limit header of 1e9 per minute) and every answered completion was written to the store.
  expect(config.rate_limit_header).toBe(String(report.params.keyRpm))
  expect(config.check.recorded).toBe(config.check.answered)
  expect(config.check.answered).toBeGreaterThan(0)
  expect(config.check.rate_limit_fail_open ?? 0).toBe(0)
  for (const [ms, c] of LEVELS) {
    const o = report.overhead.find((x) => x.config === name && x.node_ms === ms && x.concurrency === c)!
    expect(o.rounds).toBe(2)
    for (const s of [o.p50_added_ms, o.p99_added_ms]) {
      expect(Number.isFinite(s.median)).toBe(true)
      expect(s.min).toBeLessThanOrEqual(s.median)
      expect(s.max).toBeGreaterThanOrEqual(s.median)
    }
  }
  for (const r of report.rounds) {
    const f = r.facades.find((x) => x.config === name)!
    expect(f, `round ${r.round} node ${r.node_ms} ms c=${r.concurrency}`).toMatchObject({ requests: requestsOf(r), errors: 0 })
  }
  expect(report.rejected.filter((r) => r.config === name).map((r) => r.scenario)).toEqual(['rejected 401 (unknown key)', 'rejected 429 (key over limit)'])
  for (const r of report.rejected.filter((x) => x.config === name)) expect(r.errors, r.scenario).toBe(0)
}

describe('bench/facade.bench.ts', () => {
  it('measures both store configurations in one run, alternating their order between rounds', () => {
    expect(report).toMatchObject({ bench: 'facade', schema: 4, params: { rounds: 2 } })
    expect(report.configs.map((c) => c.name).sort()).toEqual(['postgres+redis', 'sqlite+memory'])
    expect(report.params.nodeMs).toEqual([0, 20])
    expect(report.rounds.map((r) => [r.round, r.node_ms, r.concurrency])).toEqual([1, 2].flatMap((round) => LEVELS.map((l) => [round, ...l])))
    const measured = report.configs.filter((c) => !c.skipped).map((c) => c.name)
    expect(report.rounds[0]!.order).toEqual(measured)
    expect(report.rounds[4]!.order).toEqual([...measured].reverse())
    // The node's answer time is what a direct request waits at least.
    for (const r of report.rounds.filter((x) => x.node_ms === 20)) {
      expect(r.direct.p50_ms, `round ${r.round} c=${r.concurrency}`).toBeGreaterThanOrEqual(20)
    }
    expect(stdout).toMatch(/added latency \(facade − direct\)/)
    // The target read both ways, each at every level: over the embedded stores, and the whole facade over the node;
    // where the bench skipped postgres+redis (no PostgreSQL or Redis here), each line says so instead of a figure.
    const level = String.raw`node (0|20) ms c=(1|50) (met|NOT met) \(-?[\d.]+ ms\)`
    const read = measured.includes('postgres+redis') ? `${level}(, ${level}){3}` : String.raw`not measured \(postgres\+redis skipped\)`
    expect(stdout).toMatch(new RegExp(String.raw`target \(postgres\+redis adds ≤ 2 ms at p50 over sqlite\+memory\): ${read}\n`))
    expect(stdout).toMatch(new RegExp(String.raw`the postgres\+redis facade's whole added latency ≤ 2 ms at p50: ${read}\n`))
  })

  it('measures the bare proxy at every level beside the facades: the floor of a Node proxy on the host', () => {
    for (const r of report.rounds) {
      expect(r.proxy, `round ${r.round} node ${r.node_ms} ms c=${r.concurrency}`).toMatchObject({ requests: requestsOf(r), errors: 0 })
      expect(r.proxy.facade_cpu_us).toBeGreaterThan(0)
    }
    for (const [ms, c] of LEVELS) {
      const o = report.overhead.find((x) => x.config === 'bare proxy' && x.node_ms === ms && x.concurrency === c)!
      expect(o.rounds).toBe(2)
      expect(Number.isFinite(o.p50_added_ms.median)).toBe(true)
      expect(o.facade_cpu_us!.median).toBeGreaterThan(0)
    }
    expect(stdout).toMatch(/bare proxy/)
  })

  it('with --pin, runs the facades and the bare proxy on CPU 0 and itself (with the node and stores it starts) on the others', (ctx) => {
    if (!PIN) ctx.skip('--pin needs Linux, taskset and 2+ CPUs')
    expect(report.params.pin).toBe(true)
    expect(report.system.cpus).toEqual({ bench: `1-${cpus().length - 1}`.replace(/^1-1$/, '1'), facades: report.configs.filter((c) => !c.skipped).map(() => '0'), proxy: '0' })
  })

  it('measures sqlite+memory', () => {
    expectMeasured('sqlite+memory')
  })

  it('measures postgres+redis and its difference from sqlite+memory (or says why it could not)', (ctx) => {
    const shared = report.configs.find((c) => c.name === 'postgres+redis')!
    if (shared.skipped) {
      expect(shared.reason.length).toBeGreaterThan(0)
      ctx.skip(`postgres+redis skipped by the bench: ${shared.reason}`)
    }
    expectMeasured('postgres+redis')
    for (const [ms, c] of LEVELS) {
      expect(report.overhead.find((x) => x.config === 'shared − embedded' && x.node_ms === ms && x.concurrency === c)?.rounds).toBe(2)
    }
  })
})
