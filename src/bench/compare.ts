// `onnxd bench compare A.json B.json`: the ratio B/A of every standard figure, matched by target and concurrency,
// and of the references, so two runs (two commits, two machines) compare at a glance. Pure over two reports.
import { readFileSync } from 'node:fs'
import { OnnxdError } from '../shared/errors.js'
import type { LevelFigures } from './metrics.js'
import { formatTable } from './format.js'
import { REPORT_KIND, isSkipped, type BenchReport } from './report.js'

/** Figures compared, with whether higher is better (for the verdict column). */
export const COMPARED: { key: keyof LevelFigures; higherIsBetter: boolean }[] = [
  { key: 'request_throughput', higherIsBetter: true },
  { key: 'output_throughput', higherIsBetter: true },
  { key: 'total_token_throughput', higherIsBetter: true },
  ...(['ttft', 'tpot', 'itl', 'e2el'] as const).flatMap((k) =>
    (['mean', 'median', 'p99'] as const).map((s) => ({ key: `${s}_${k}_ms` as keyof LevelFigures, higherIsBetter: false })),
  ),
]

export interface CompareRow {
  /** e.g. `onnxd c=16` or `ORT ceiling B=64`. */
  where: string
  figure: string
  a: number
  b: number
  /** b / a (null when a is 0). */
  ratio: number | null
  /** Whether B is better than A on this figure (null when equal or not comparable). */
  better: boolean | null
}

export function readReport(path: string): BenchReport {
  let r: BenchReport
  try {
    r = JSON.parse(readFileSync(path, 'utf8')) as BenchReport
  } catch (e) {
    throw new OnnxdError('config', `${path}: cannot read a report: ${(e as Error).message}`)
  }
  if (r.bench !== REPORT_KIND) throw new OnnxdError('config', `${path}: not an onnxd bench report (bench: ${JSON.stringify(r.bench)})`)
  return r
}

const row = (where: string, figure: string, a: number, b: number, higherIsBetter: boolean): CompareRow => {
  const ratio = a !== 0 && Number.isFinite(a) && Number.isFinite(b) ? b / a : null
  const better = ratio === null || ratio === 1 ? null : higherIsBetter ? ratio > 1 : ratio < 1
  return { where, figure, a, b, ratio, better }
}

/** Every figure present in both reports, as B/A. */
export function compareReports(a: BenchReport, b: BenchReport): CompareRow[] {
  const rows: CompareRow[] = []
  for (const sa of a.scenarios) {
    // Matched by target (`onnxd gqa/capi`); reports of schema 2 name one onnxd target 'onnxd'.
    const key = (s: (typeof a.scenarios)[number]): string => (isSkipped(s) ? s.name : (s.target ?? s.name))
    const sb = b.scenarios.find((s) => key(s) === key(sa)) ?? (a.baseline || b.baseline || sa.name !== 'onnxd' ? undefined : b.scenarios.find((s) => s.name === sa.name))
    if (isSkipped(sa) || !sb || isSkipped(sb)) continue
    for (const la of sa.levels) {
      const lb = sb.levels.find((l) => l.max_concurrency === la.max_concurrency)
      if (!lb) continue
      for (const { key, higherIsBetter } of COMPARED) rows.push(row(`${sa.target ?? sa.name} c=${la.max_concurrency}`, key, la[key] as number, lb[key] as number, higherIsBetter))
    }
  }
  const ca = a.references.ort_ceiling
  const cb = b.references.ort_ceiling
  if (!isSkipped(ca) && !isSkipped(cb)) {
    for (const da of ca.decode) {
      const db = cb.decode.find((d) => d.batch === da.batch)
      if (db) rows.push(row(`ORT ceiling B=${da.batch}`, 'tokens_per_s', da.tokens_per_s, db.tokens_per_s, true))
    }
  }
  const ma = a.references.matmul_peak
  const mb = b.references.matmul_peak
  if (!isSkipped(ma) && !isSkipped(mb)) rows.push(row('matmul peak', 'gflops', ma.gflops, mb.gflops, true))
  return rows
}

/**
 * What makes B/A more than the change under test: the runs were on different machines, providers, ONNX Runtime
 * versions or model builds, or a run's host moved while it ran (its drift warning).
 */
export function caveats(a: BenchReport, b: BenchReport): string[] {
  const out: string[] = []
  const differ = (what: string, x: unknown, y: unknown): void => {
    if (x !== y) out.push(`${what} differs: A ${String(x)}, B ${String(y)}; B/A mixes that with the change`)
  }
  differ('cpu', `${a.machine.cpu} x${a.machine.cores}`, `${b.machine.cpu} x${b.machine.cores}`)
  differ('provider', a.machine.provider, b.machine.provider)
  differ('onnxruntime-node', a.versions['onnxruntime-node'], b.versions['onnxruntime-node'])
  differ('model', `${a.model.id} (builder ${a.model.builder_version ?? '-'})`, `${b.model.id} (builder ${b.model.builder_version ?? '-'})`)
  // Reports of schema 1 carry no drift.
  for (const [name, r] of [['A', a], ['B', b]] as const) if (r.drift?.warning) out.push(`${name}: ${r.drift.warning}`)
  return out
}

/** The comparison as a printable table. */
export function formatComparison(rows: CompareRow[], a: string, b: string, notes: string[] = []): string {
  const body = rows.map((r) => ({
    where: r.where,
    figure: r.figure,
    A: r.a.toFixed(2),
    B: r.b.toFixed(2),
    'B/A': r.ratio === null ? 'n/a' : `${r.ratio.toFixed(3)}x`,
    '': r.better === null ? '' : r.better ? 'better' : 'worse',
  }))
  const caveatLines = notes.map((n) => `note: ${n}\n`).join('')
  return `A: ${a}\nB: ${b}\n${caveatLines}\n${formatTable(body)}`
}
