// The benchmark results kept in the repository as data: `bench/results/<date>-<name>.json`, each a report one of the
// benchmarks wrote (onnxd bench, bench/facade.bench.ts, bench/attack.bench.ts, bench/grammar.bench.ts), and the
// Markdown that docs/benchmarks.md shows of them: an index and a table per result, generated here from the JSON alone
// (scripts/bench-results.ts writes it into the page and renders each serving run's chart; test/docs holds the page to
// it). Runs write elsewhere (`onnxd-bench-<time>.json`, ...); a result is kept by copying its report under a dated
// name. Imports: the report's types and chart.ts's spec (vega itself loads only where a chart is rendered).
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { chartSpec } from './chart.js'
import { opShares } from './format.js'
import { isSkipped, ortSameWork, type BenchReport, type LevelResult, type ScenarioResult } from './report.js'

/** A kept result's file name: the day it was run, then what it is. */
export const RESULT_FILE = /^(\d{4}-\d{2}-\d{2})-[a-z0-9-]+\.json$/

export interface KeptResult {
  /** The file name, e.g. `2026-11-22-standard-135m.json`. */
  file: string
  date: string
  json: Record<string, unknown>
}

/** The kept results of `dir`, oldest first (by name: the date leads). */
export function readResults(dir: string): KeptResult[] {
  return readdirSync(dir)
    .filter((f) => RESULT_FILE.test(f))
    .sort()
    .map((file) => ({ file, date: RESULT_FILE.exec(file)![1]!, json: JSON.parse(readFileSync(join(dir, file), 'utf8')) as Record<string, unknown> }))
}

type Kind = 'serving' | 'facade' | 'attack' | 'grammar'

/** Which benchmark wrote a report. */
export function kindOf(json: Record<string, unknown>): Kind {
  if (json.bench === 'onnxd-bench') return 'serving'
  if (json.bench === 'facade') return 'facade'
  if (json.bench === 'attack') return 'attack'
  if (Array.isArray(json.rows) && typeof json.preset === 'string') return 'grammar'
  throw new Error(`not a report of onnxd's benchmarks (bench: ${String(json.bench)})`)
}

const COMMANDS: Record<Kind, string> = {
  serving: 'onnxd bench',
  facade: 'npx tsx bench/facade.bench.ts',
  attack: 'npx tsx bench/attack.bench.ts',
  grammar: 'npx tsx bench/grammar.bench.ts',
}

const f1 = (x: number): string => x.toFixed(1)
const f3 = (x: number): string => x.toFixed(3)
const row = (cells: (string | number)[]): string => `| ${cells.join(' | ')} |`
const table = (head: string[], rows: (string | number)[][], right: boolean[]): string =>
  [row(head), row(right.map((r) => (r ? '---:' : '---'))), ...rows.map(row)].join('\n')

/** The command line a serving report records (its argv; paths of --out and --name left out: they name the run's own files). */
function servingCommand(r: BenchReport): string {
  const argv = [...(r.config.argv as string[] | undefined ?? [])]
  const out: string[] = []
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--out' || argv[i] === '--name') i++
    else if (argv[i] !== '--no-progress') out.push(argv[i]!)
  }
  return ['onnxd bench', ...out].join(' ')
}

interface Machine {
  cpu: string
  cores: number
  /** The CPU's SIMD extensions (system.ts), in reports since schema 2: AVX2 and AVX-512 VNNI hosts of one model name
   * run ORT's integer kernels at very different speeds, so a result says which it ran on. */
  cpuFlags?: string[]
  provider?: string
  loadavg_start?: number[]
  loadavg_end?: number[]
}

export const hostOf = (m: Machine | undefined, cpu?: string, cores?: number): string => {
  const c = m?.cpu ?? cpu ?? 'unknown CPU'
  const n = m?.cores ?? cores
  const flags = m?.cpuFlags?.length ? ` (${m.cpuFlags.join(' ')})` : ''
  const load = m?.loadavg_start && m.loadavg_end ? `, load ${m.loadavg_start[0]} → ${m.loadavg_end[0]}` : ''
  return `${c.replace(/\(R\)/g, '')}${flags}, ${n ?? '?'} cores${m?.provider ? `, ${m.provider}` : ''}${load}`
}

/** ORT alone's decode step by operator, per graph form and batch, where the run profiled it (refs/profile.ts); else ''. */
function opsTable(r: BenchReport): string {
  const refs = r.references
  const ceilings = refs.ort_ceiling_by_form ? Object.entries(refs.ort_ceiling_by_form) : [['', refs.ort_ceiling] as const]
  const rows = ceilings.flatMap(([form, c]) => (isSkipped(c) ? [] : (c.ops ?? []).map((d) => [form || (c.file ?? "the baseline's graph"), d.batch, opShares(d.ops)])))
  return rows.length ? table(["ORT alone's decode step", 'batch', "by operator (ORT's profiler), ms per step"], rows, [false, true, false]) : ''
}

/** The serving run's figures: output tok/s of every series at every level, and the ORT decode ceiling's. */
function servingTable(r: BenchReport): string {
  const series = r.scenarios.filter((s): s is ScenarioResult => !isSkipped(s))
  const levels = [...new Set(series.flatMap((s) => s.levels.map((l) => l.max_concurrency)))].sort((a, b) => a - b)
  const rows = series.map((s) => [s.target ?? s.name, ...levels.map((c) => {
    const l = s.levels.find((x) => x.max_concurrency === c)
    return l ? f1(l.output_throughput) : ''
  })])
  const ceiling = r.references.ort_ceiling
  if (ceiling && !isSkipped(ceiling)) {
    rows.push([`ORT decode step alone at batch B (past ${ceiling.past})`, ...levels.map((c) => {
      const d = ceiling.decode.find((x) => x.batch === c)
      return d ? f1(d.tokens_per_s) : ''
    })])
  }
  // Each onnxd target's levels that had ORT alone timed beside them (report schema 5): ORT alone doing the same
  // work then, in output tok/s, and the target's ratio to it.
  const len = lengthsOf(r)
  for (const s of series) {
    if (!s.levels.some((l) => l.ort_beside)) continue
    const at = (c: number): { l: LevelResult; ort: number } | null => {
      const l = s.levels.find((x) => x.max_concurrency === c)
      const ort = l?.ort_beside ? ortSameWork(null, c, len, l) : null
      return l && ort ? { l, ort } : null
    }
    rows.push([`ORT alone, same work, beside ${s.target ?? s.name}`, ...levels.map((c) => {
      const x = at(c)
      return x ? `${f1(x.ort)} (${(x.l.output_throughput / x.ort).toFixed(2)}x)` : ''
    })])
  }
  return table(['output tok/s', ...levels.map((c) => `${c} stream${c === 1 ? '' : 's'}`)], rows, [false, ...levels.map(() => true)])
}

interface Spread {
  median: number
  min: number
  max: number
}

function facadeTable(json: Record<string, unknown>): string {
  const rows = (json.overhead as { config: string; node_ms: number; concurrency: number; p50_added_ms: Spread; p99_added_ms: Spread; facade_cpu_us?: Spread }[]).map((o) => [
    o.config,
    o.node_ms,
    o.concurrency,
    `${f3(o.p50_added_ms.median)} (${f3(o.p50_added_ms.min)} … ${f3(o.p50_added_ms.max)})`,
    f3(o.p99_added_ms.median),
    o.facade_cpu_us ? Math.round(o.facade_cpu_us.median) : '',
  ])
  const rejected = ((json.rejected ?? []) as { scenario: string; config: string; concurrency: number; rps: number }[]).map((r) => [r.scenario, r.config, r.concurrency, Math.round(r.rps)])
  return [
    table(['config', 'node ms', 'conc', 'p50 added, ms (lowest … highest round)', 'p99 added, ms', 'CPU µs/req'], rows, [false, true, true, false, true, true]),
    ...(rejected.length ? ['', table(['refused requests', 'config', 'conc', 'req/s'], rejected, [false, false, true, true])] : []),
  ].join('\n')
}

function attackTable(json: Record<string, unknown>): string {
  type Phase = { phase: string; streams: number; failed_streams: number; ttft_p50_ms: number; ttft_p99_ms: number; itl_p50_ms: number; itl_p99_ms: number; attack_statuses: Record<string, number>; health: Record<string, number> }
  const rows = (json.results as Phase[]).map((p) => [
    p.phase,
    p.streams,
    p.failed_streams,
    `${f1(p.ttft_p50_ms)} / ${f1(p.ttft_p99_ms)}`,
    `${f1(p.itl_p50_ms)} / ${f1(p.itl_p99_ms)}`,
    Object.entries(p.attack_statuses).map(([s, n]) => `${s} x ${n}`).join(', '),
    Object.entries(p.health).map(([s, n]) => `${s} ${n}`).join(', '),
  ])
  return table(['phase', 'bystander streams', 'failed', 'TTFT p50 / p99 ms', 'ITL p50 / p99 ms', "attackers' statuses", '/health seen'], rows, [false, true, true, true, true, false, false])
}

function grammarTable(json: Record<string, unknown>): string {
  const rows = (json.rows as { batch: number; mask_ms: number; step_ms: number; ratio: number }[]).map((g) => [g.batch, f3(g.mask_ms), f1(g.step_ms), `${f1(g.ratio * 100)} %`])
  return table(['batch', 'mask ms per step', 'decode step ms', 'mask / step'], rows, [true, true, true, true])
}

/** A serving run's chart file, beside its report. */
export const chartFile = (file: string): string => file.replace(/\.json$/, '.svg')

/** What one result says, as Markdown: a heading, the command and host, its table (and chart). */
export function resultMarkdown(k: KeptResult): string {
  const kind = kindOf(k.json)
  const stem = k.file.replace(/\.json$/, '')
  const lines = [`### ${stem}`, '']
  if (kind === 'serving') {
    const r = k.json as unknown as BenchReport
    const len = lengthsOf(r)
    const ops = opsTable(r)
    lines.push(
      `\`${servingCommand(r)}\` on ${r.model.id} (prompt ${len.prompt}, output ${len.output} tokens), report schema ${r.schema}, ${r.created}; ${hostOf(r.machine as Machine)}.`,
      '',
      servingTable(r),
      '',
      ...(ops ? [ops, ''] : []),
      `![${stem}](../bench/results/${chartFile(k.file)})`,
    )
  } else {
    const sys = (k.json.system ?? {}) as Machine
    const params = k.json.params ? `, \`${JSON.stringify(k.json.params)}\`` : ''
    const host = kind === 'attack' ? hostOf(undefined, k.json.cpu as string, k.json.cores as number) : hostOf(sys)
    const what = kind === 'grammar' ? `, preset ${String(k.json.preset)}` : ''
    lines.push(`\`${COMMANDS[kind]}\`${what}${params}; ${host}.`, '', kind === 'facade' ? facadeTable(k.json) : kind === 'attack' ? attackTable(k.json) : grammarTable(k.json))
  }
  lines.push('', `Data: [bench/results/${k.file}](../bench/results/${k.file}).`)
  return lines.join('\n')
}

/** The prompt and output lengths a serving report ran (the mean of a range). */
function lengthsOf(r: BenchReport): { prompt: number; output: number } {
  const mean = (v: unknown): number => {
    const [a, b] = String(v).split(':').map(Number)
    return b === undefined ? a! : (a! + b) / 2
  }
  return { prompt: mean(r.config.prompt_len), output: mean(r.config.output_len) }
}

/** The index of every kept result and a section per result: what docs/benchmarks.md shows under "Results". */
export function resultsMarkdown(results: KeptResult[]): string {
  const index = table(
    ['date', 'result', 'benchmark'],
    results.map((k) => [k.date, `[${k.file.replace(/\.json$/, '')}](#${k.file.replace(/\.json$/, '')})`, `\`${COMMANDS[kindOf(k.json)]}\``]),
    [false, false, false],
  )
  return [index, ...results.map(resultMarkdown)].join('\n\n')
}

/** The vega-lite spec of a serving result's chart (the matmul-peak bound is left out: the report keeps no model shape). */
export function resultChartSpec(k: KeptResult): ReturnType<typeof chartSpec> {
  const r = k.json as unknown as BenchReport
  return chartSpec(r, null, lengthsOf(r))
}

/** The markers around the generated part of docs/benchmarks.md. */
export const RESULTS_BEGIN = '<!-- results: generated by scripts/bench-results.ts from bench/results/*.json; do not edit by hand -->'
export const RESULTS_END = '<!-- /results -->'

/** `page` with the text between the markers replaced by `generated`. */
export function replaceResults(page: string, generated: string): string {
  const a = page.indexOf(RESULTS_BEGIN)
  const b = page.indexOf(RESULTS_END)
  if (a < 0 || b < a) throw new Error(`the page has no ${RESULTS_BEGIN} ... ${RESULTS_END} markers`)
  return `${page.slice(0, a + RESULTS_BEGIN.length)}\n\n${generated}\n\n${page.slice(b)}`
}

/** The generated text between the markers of `page`. */
export function generatedResults(page: string): string {
  const a = page.indexOf(RESULTS_BEGIN)
  const b = page.indexOf(RESULTS_END)
  if (a < 0 || b < a) throw new Error(`the page has no ${RESULTS_BEGIN} ... ${RESULTS_END} markers`)
  return page.slice(a + RESULTS_BEGIN.length, b).trim()
}
