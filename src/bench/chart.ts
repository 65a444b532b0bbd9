// The report's chart: output throughput and TTFT p99 against concurrency for onnxd, the unbatched node, the
// transformers.js peer and llama.cpp, with the ORT decode ceiling and the matmul-peak bound drawn as references. A vega-lite
// spec, compiled and rendered to SVG headlessly by vega. Imports: vega and vega-lite (devDependencies, loaded by
// chartRenderer when a run starts: see dev-deps.ts), report types.
import type { TopLevelSpec } from 'vega-lite'
import { devDependency } from './dev-deps.js'
import { flopsPerToken, type ModelInfo } from './model-info.js'
import { isSkipped, type BenchReport, type Lengths } from './report.js'

interface Point {
  panel: 'throughput' | 'ttft'
  series: string
  concurrency: number
  value: number
  reference: boolean
  /** A TTFT p99 that includes requests cut at the deadline before their first token: a lower bound. */
  lowerBound: boolean
}

const SERIES = ['onnxd', 'unbatched node', 'transformers.js peer', 'ORT decode ceiling', 'matmul-peak bound']
const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#7f7f7f', '#d62728']
const NAMES: Record<string, string> = { onnxd: 'onnxd', unbatched: 'unbatched node', peer: 'transformers.js peer' }

/** The chart's data points, one per series and concurrency. */
export function chartPoints(r: BenchReport, model: ModelInfo | null, len: Lengths): Point[] {
  const pts: Point[] = []
  for (const s of r.scenarios) {
    if (isSkipped(s)) continue
    for (const l of s.levels) {
      // Several onnxd targets in one run: a line each, named by its form and runtime; a line per llama.cpp server.
      const series = (s.name === 'onnxd' && s.target && r.baseline) || s.name === 'llama.cpp' ? (s.target ?? s.name) : NAMES[s.name]
      const at = { series, concurrency: l.max_concurrency, reference: false, lowerBound: false }
      if (l.output_throughput > 0) pts.push({ ...at, panel: 'throughput', value: l.output_throughput })
      if (l.p99_ttft_ms > 0) pts.push({ ...at, panel: 'ttft', value: l.p99_ttft_ms, lowerBound: l.ttft_censored > 0 })
    }
  }
  const c = r.references.ort_ceiling
  if (!isSkipped(c)) for (const d of c.decode) pts.push({ panel: 'throughput', series: 'ORT decode ceiling', concurrency: d.batch, value: d.tokens_per_s, reference: true, lowerBound: false })
  const m = r.references.matmul_peak
  if (!isSkipped(m) && model) {
    // Decode tokens/s if every decode FLOP ran at the matmul peak: a compute roofline.
    const bound = (m.gflops * 1e9) / flopsPerToken(model, len.prompt + len.output / 2)
    const cs = [...new Set(pts.filter((p) => p.panel === 'throughput').map((p) => p.concurrency))]
    for (const cc of cs) pts.push({ panel: 'throughput', series: 'matmul-peak bound', concurrency: cc, value: bound, reference: true, lowerBound: false })
  }
  return pts
}

/** Colours past the fixed series' (one per extra onnxd target or llama.cpp server). */
const COLORS_ALL = [...COLORS, '#9467bd', '#8c564b', '#e377c2', '#bcbd22', '#17becf', '#393b79', '#637939', '#8c6d31', '#843c39', '#7b4173']
/** The fixed series in their order, then any onnxd targets. */
const seriesOf = (values: Point[]): string[] => [...SERIES, ...new Set(values.map((v) => v.series).filter((x) => !SERIES.includes(x)))]

/** One panel (a vega-lite unit spec): a line per series over concurrency, log-log, references dashed. */
function panel(values: Point[], which: Point['panel'], title: string, yTitle: string): Record<string, unknown> {
  return {
    title,
    width: 360,
    height: 260,
    data: { values: values.filter((p) => p.panel === which) },
    layer: [
      { mark: { type: 'line', clip: true } },
      // Points: a triangle marks a TTFT p99 that is a lower bound (requests cut at the level's deadline).
      { mark: { type: 'point', filled: true, size: 50, clip: true }, encoding: { shape: { field: 'lowerBound', type: 'nominal', scale: { domain: [false, true], range: ['circle', 'triangle-up'] }, legend: null } } },
    ],
    encoding: {
      x: { field: 'concurrency', type: 'quantitative', title: 'concurrent streams', scale: { type: 'log', base: 2 }, axis: { values: [...new Set(values.map((v) => v.concurrency))].sort((a, b) => a - b) } },
      y: { field: 'value', type: 'quantitative', title: yTitle, scale: { type: 'log' } },
      color: { field: 'series', type: 'nominal', scale: { domain: seriesOf(values), range: COLORS_ALL }, legend: { title: null, orient: 'bottom', columns: 3, labelLimit: 320 } },
      strokeDash: { field: 'reference', type: 'nominal', scale: { domain: [false, true], range: [[1, 0], [6, 4]] }, legend: null },
      tooltip: [{ field: 'series' }, { field: 'concurrency' }, { field: 'value', format: '.1f' }],
    },
  }
}

/** The vega-lite spec of the chart. */
export function chartSpec(r: BenchReport, model: ModelInfo | null, len: Lengths): TopLevelSpec {
  const pts = chartPoints(r, model, len)
  const m = r.machine
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: {
      text: `onnxd bench: ${r.model.id}`,
      subtitle: [`${m.cpu}, ${m.cores} cores, ${m.provider}; prompt ${len.prompt}, output ${len.output} tokens; ${r.created}`, 'dashed: references; triangle: a lower bound (requests cut at the level deadline)'],
    },
    background: 'white',
    hconcat: [panel(pts, 'throughput', 'Output throughput', 'output tokens/s (log)'), panel(pts, 'ttft', 'Time to first token, p99', 'TTFT p99, ms (log)')],
    resolve: { scale: { color: 'shared' } },
  } as unknown as TopLevelSpec
}

/**
 * The chart's renderer: vega-lite's compiler and vega's headless renderer (no canvas, no browser), loaded now. A run
 * gets it before it measures anything, so a missing package stops it at once rather than after the run.
 */
export async function chartRenderer(): Promise<(spec: TopLevelSpec) => Promise<string>> {
  const [vega, { compile }] = await Promise.all([devDependency('vega', () => import('vega')), devDependency('vega-lite', () => import('vega-lite'))])
  return async (spec) => {
    const view = new vega.View(vega.parse(compile(spec).spec), { renderer: 'none' })
    try {
      return await view.toSVG()
    } finally {
      view.finalize()
    }
  }
}

/** Renders the chart to SVG text. */
export async function renderSvg(spec: TopLevelSpec): Promise<string> {
  return (await chartRenderer())(spec)
}
