// The benchmark report: its JSON shape, the efficiency ratios and issue targets derived from the figures, the
// one-line summaries, and the file on disk. Imports: metrics, refs and model types.
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { EngineTime } from './engine-metrics.js'
import type { LevelFigures } from './metrics.js'
import { flopsPerToken, type ModelInfo } from './model-info.js'
import type { DecodeCeiling, MatmulPoint, PrefillTiming } from './refs/ort.js'
import type { DecodeOps } from './refs/profile.js'
import type { SystemInfo } from './system.js'
import { GGUF_PAIR, type TargetDtype } from './options.js'

export const REPORT_KIND = 'onnxd-bench'
export const REPORT_SCHEMA = 5

export type ScenarioName = 'onnxd' | 'unbatched' | 'peer' | 'llama.cpp'

export interface Skipped {
  skipped: true
  reason: string
}

/** ORT alone timed as the ceiling is (a decode step at the level's batch over the ceiling's past, and its prefill), on
 * the file the target serves. */
export interface OrtTiming {
  decode: DecodeCeiling
  prefill: PrefillTiming
  /**
   * The same decode step over rows whose lengths spread over the output length around the past (refs/ort.ts
   * spreadLengths), as a continuous batch's rows are: GroupQueryAttention graphs through the C API only.
   */
  decode_spread?: DecodeCeiling
}

/**
 * ORT alone beside one level of an onnxd target: timed right before and right after the level, in this process while
 * the target's node sat idle. "ORT alone doing the same work" at that level reads these rather than the ceiling timed
 * minutes away, before or after the whole sweep: this host's speed moves by more than the ratio's margin over that
 * time (the same decode step at batch 64 took 143 ms in one run's ceiling, 172 ms in another's, 232 ms between them).
 */
export interface OrtBeside {
  /** The ONNX file ORT ran (the target's own: model_q4.onnx for a q4 target). */
  file: string
  before?: OrtTiming
  after?: OrtTiming
}

/** One level's figures, plus the node's own step accounting when it exposes /metrics, and ORT alone beside it. */
export type LevelResult = LevelFigures & { engine?: EngineTime; ort_beside?: OrtBeside }

export interface ScenarioResult {
  name: ScenarioName
  /** Which target: `onnxd <form>/<runtime>` for a node the bench started, else the name (reports of schema 2 lack it). */
  target?: string
  /** The graph form and the step runtime the node reported serving with (/health), for onnxd targets the bench started. */
  attention?: string | null
  runtime?: string | null
  /** The weight form the node served (--dtype), for onnxd targets the bench started. */
  dtype?: string
  /** False when the bench started the node with --no-prefix-caching. */
  prefix_caching?: boolean
  /** For llama.cpp servers: the GGUF weight type and llama.cpp's compute threads. */
  gguf_type?: string
  threads?: number
  /** For llama.cpp servers: false when the server ran with --no-prompt-cache (reports before it lack the field). */
  prompt_cache?: boolean
  /** What was driven, in words. */
  label: string
  url: string
  /** The execution provider the target reports in /health (null when it does not say). */
  provider: string | null
  /**
   * Seconds from starting the target to its /health saying ready (loading the model; on a GPU, onnxd's warm-up too);
   * null for a target reached at a URL (reports before it lack the field).
   */
  ready_s?: number | null
  /** Per-level deadline, seconds (null: every request ran to the end). */
  deadline_s: number | null
  levels: LevelResult[]
}

export interface CeilingReference {
  threads: number
  /** How the steps were run: onnxruntime-node's session.run, or ORT's C API with presents bound onto the past. */
  api?: string
  /** The ONNX file the steps ran (its name in the bundle: model.onnx, model_q4.onnx, ...). */
  file?: string
  /** The execution provider when not the CPU's (--provider). */
  provider?: string
  /** Past length of the timed decode steps: mean prompt + half the mean output (the mean context while decoding). */
  past: number
  /** The better of the measurements before and after the sweep, per figure. */
  decode: DecodeCeiling[]
  prefill: PrefillTiming
  /** Each measurement as taken. */
  runs: { before?: { decode: DecodeCeiling[]; prefill: PrefillTiming }; after?: { decode: DecodeCeiling[]; prefill: PrefillTiming } }
  /** ORT's decode step at each batch by operator type (ORT's profiler, once before the sweep, on the CPU). */
  ops?: DecodeOps[]
}

export interface MatmulReference {
  threads: number
  /** The better of the measurements before and after the sweep; `points` are that measurement's. */
  gflops: number
  points: MatmulPoint[]
  runs: { before?: number; after?: number }
}

export interface Efficiency {
  concurrency: number
  output_throughput: number
  /** onnxd output tok/s over the ORT decode ceiling at batch = concurrency. */
  vs_ceiling: number | null
  /** Output tok/s of ORT alone doing this level's work: `concurrency` prompts prefilled (as many per run as the
   * engine's token budget holds), then `output` decode steps at batch = concurrency; timed beside the level when it
   * was (ort_beside), else from the ceiling. The most any server gets from ORT for this scenario on this machine. */
  ort_same_work: number | null
  /** Where ort_same_work's timings come from: ORT alone beside this level, or the ceiling (null: not measured). */
  ort_same_work_from: 'beside' | 'ceiling' | null
  /** onnxd output tok/s over ort_same_work. */
  vs_ceiling_with_prefill: number | null
  vs_peer: number | null
  vs_unbatched: number | null
  /** Model FLOP/s achieved (prompt and output tokens) and its fraction of the matmul peak (MFU). */
  achieved_gflops: number
  vs_matmul_peak: number | null
  /** onnxd mean TPOT over the peer's (below 1 is faster). */
  tpot_vs_peer: number | null
  /** ort_same_work over the peer's and the unbatched node's output tok/s and over the decode ceiling: the best
   * ratio any scheduler could reach against each with this model on this machine (a target above it cannot be met
   * here). */
  bound_vs_peer: number | null
  bound_vs_unbatched: number | null
  bound_vs_ceiling: number | null
  /** The ORT decode ceiling at batch = concurrency over the ceiling at batch 1: what batching itself gains in ORT. */
  ceiling_batch_gain: number | null
}

export interface TargetCheck {
  id: string
  text: string
  /** The measured ratio, or null when the run did not measure it (then `reason` says why). */
  value: number | null
  threshold: number
  direction: '>=' | '<='
  met: boolean | null
  reason?: string
  /** For throughput targets: the same ratio with ORT alone doing the same prefill and decode work in place of
   * onnxd (what this machine and model allow at best); null where not measured. */
  bound?: number | null
}

/** Per level, every onnxd target's output tok/s over the baseline target's, and over ORT alone on its own graph. */
export interface TargetRatios {
  concurrency: number
  baseline: string
  output_throughput: Record<string, number>
  /** Output tok/s over the baseline target's at this level (1 for the baseline itself). */
  vs_baseline: Record<string, number | null>
  /** Output tok/s over ORT alone doing this level's prefill and decode work on the target's graph form (its ceiling). */
  vs_ort_same_work: Record<string, number | null>
}

/** One onnxd target against one llama.cpp server on the same weights in their paired forms, at one level. */
export interface LlamaCppRatio {
  concurrency: number
  onnxd: string
  llama_cpp: string
  dtype: string
  gguf_type: string
  threads: number
  /** onnxd output tok/s over llama.cpp's (above 1: onnxd is faster). */
  output_throughput: number | null
  onnxd_output_throughput: number
  llama_cpp_output_throughput: number
  /** Median TTFT and mean TPOT of each, ms. */
  ttft_p50_ms: { onnxd: number; llama_cpp: number }
  tpot_mean_ms: { onnxd: number; llama_cpp: number }
  /** Prefix caching on the onnxd side and the prompt cache on llama.cpp's (the pair has both on or both off), and the
   * fraction of each side's prompt tokens its cache gave (reports before the llama.cpp prompt cache lack both). */
  prompt_cache?: boolean
  prompt_cached?: { onnxd: number; llama_cpp: number }
}

export interface BenchReport {
  bench: typeof REPORT_KIND
  schema: typeof REPORT_SCHEMA
  /** standard: prompt 128 / output 128 and every reference; long: issue 12's long-prompt serving run. */
  scenario: string
  /** The target the ratios divide by (null with one target). */
  baseline: string | null
  target_ratios: TargetRatios[]
  /** Per level, each onnxd target against each llama.cpp server on the paired weights (GGUF_PAIR). */
  llama_cpp_ratios: LlamaCppRatio[]
  /** The order the onnxd targets ran in at each level (one after another, reversed from level to level). */
  run_order: { concurrency: number; targets: string[] }[]
  /** What the reader must know to read the figures: per-level cuts, how throughput counts unfinished requests. */
  notes: string[]
  created: string
  config: Record<string, unknown>
  machine: SystemInfo & { provider: string; loadavg_start: number[]; loadavg_end: number[] }
  versions: Record<string, string | null>
  model: { id: string; dir: string | null; preset: string | null; builder_version: string | null; vocab: number | null; matmul_params: number | null; flops_per_output_token: number | null }
  scenarios: (ScenarioResult | (Skipped & { name: ScenarioName; target?: string; label: string }))[]
  /** ort_ceiling is the baseline target's graph form and weights'; ort_ceiling_by_form has every graph form and
   * weight dtype the targets serve, keyed by ceilingKey (a GroupQueryAttention form's through ORT's C API with
   * presents on the past, refs/capi.ts). */
  references: { ort_ceiling: CeilingReference | Skipped; matmul_peak: MatmulReference | Skipped; ort_ceiling_by_form?: Record<string, CeilingReference | Skipped> }
  efficiency: Efficiency[]
  targets: TargetCheck[]
  summary: string[]
  drift: Drift
  files: { json: string; chart: string | null }
}

/**
 * How much the host's speed moved during the run, read off work that is the same every time: the unbatched node's
 * batch-1 decode step at each of its levels, and the ORT decode steps timed before and after the sweep. Ratios
 * between scenarios measured minutes apart carry this error.
 */
export interface Drift {
  /** Slowest over fastest mean decode step of the unbatched node across its levels. */
  unbatched_step: number | null
  /** Slowest over fastest of the ORT decode ceiling's before and after timings, worst batch. */
  ceiling_step: number | null
  /** Slowest over fastest of ORT alone's decode step right before and right after an onnxd level, worst level (reports
   * before ORT alone was timed beside the levels lack it). */
  beside_step?: number | null
  /** Set when any moved by more than DRIFT_WARN: what to distrust in this run. */
  warning: string | null
}

/** Above this spread (slowest / fastest of the same work) the run warns that its cross-scenario ratios are unreliable. */
export const DRIFT_WARN = 1.15

export const isSkipped = <T extends object>(x: T | Skipped): x is Skipped => 'skipped' in x && x.skipped === true

export function scenario(r: BenchReport, name: ScenarioName): ScenarioResult | null {
  const s = r.scenarios.find((x) => x.name === name)
  return s && !isSkipped(s) ? s : null
}

const level = (s: ScenarioResult | null, c: number): LevelResult | null => s?.levels.find((l) => l.max_concurrency === c) ?? null
/** The key of a graph form's ORT ceiling over one weight dtype in references.ort_ceiling_by_form: `gqa` (float32),
 * `gqa/q4`. A target is held against ORT alone running its own file: a q4 target against a q4 ceiling. */
export const ceilingKey = (form: string, dtype?: string | null): string => (!dtype || dtype === 'fp32' ? form : `${form}/${dtype}`)

/** The ORT ceiling a scenario is held against: ORT alone running the scenario's graph form and weight dtype (with
 * one target, the run's only ceiling). Null when it was skipped or not measured. */
export function scenarioCeiling(refs: BenchReport['references'], s: { attention?: string | null; dtype?: string }): CeilingReference | null {
  const c = refs.ort_ceiling_by_form ? (s.attention ? refs.ort_ceiling_by_form[ceilingKey(s.attention, s.dtype)] : undefined) : refs.ort_ceiling
  return c && !isSkipped(c) ? c : null
}

const ratio = (a: number | undefined | null, b: number | undefined | null): number | null => (a != null && b != null && b > 0 && Number.isFinite(a) ? a / b : null)

export interface Lengths {
  prompt: number
  output: number
}

/** Each reference figure from the better of two measurements (the faster step, the higher peak); keeps both. */
export function bestOf(a: BenchReport['references'], b: BenchReport['references']): BenchReport['references'] {
  let ort_ceiling = a.ort_ceiling
  if (!isSkipped(a.ort_ceiling) && !isSkipped(b.ort_ceiling)) {
    const x = a.ort_ceiling
    const y = b.ort_ceiling
    ort_ceiling = {
      ...x,
      decode: x.decode.map((d) => {
        const e = y.decode.find((z) => z.batch === d.batch)
        return e && e.ms < d.ms ? e : d
      }),
      prefill: y.prefill.ms < x.prefill.ms ? y.prefill : x.prefill,
      runs: { ...x.runs, ...y.runs },
      ...(x.ops ?? y.ops ? { ops: x.ops ?? y.ops } : {}),
    }
  }
  let matmul_peak = a.matmul_peak
  if (!isSkipped(a.matmul_peak) && !isSkipped(b.matmul_peak)) {
    const best = b.matmul_peak.gflops > a.matmul_peak.gflops ? b.matmul_peak : a.matmul_peak
    matmul_peak = { ...best, runs: { ...a.matmul_peak.runs, ...b.matmul_peak.runs } }
  }
  const forms = { ...a.ort_ceiling_by_form }
  for (const [f, y] of Object.entries(b.ort_ceiling_by_form ?? {})) {
    const x = forms[f]
    forms[f] = x ? bestOf({ ort_ceiling: x, matmul_peak: a.matmul_peak }, { ort_ceiling: y, matmul_peak: a.matmul_peak }).ort_ceiling : y
  }
  return { ort_ceiling, matmul_peak, ...(a.ort_ceiling_by_form || b.ort_ceiling_by_form ? { ort_ceiling_by_form: forms } : {}) }
}

/** Seconds ORT alone takes for a level's work: `c` prompts prefilled (`prefill.rows` per run), then `output` decode
 * steps of `decodeMs` at batch c. */
const sameWorkSeconds = (decodeMs: number, prefill: PrefillTiming, c: number, len: Lengths): number => ((c * prefill.ms) / prefill.rows + len.output * decodeMs) / 1000

/** The timings of ORT alone beside a level (before, after, or both; none when it was not timed there). */
const besideTimings = (l: Pick<LevelResult, 'ort_beside'> | null | undefined): OrtTiming[] => [l?.ort_beside?.before, l?.ort_beside?.after].filter((t): t is OrtTiming => t !== undefined)

/**
 * ORT alone's decode step at a level's batch beside the level: the mean of the timings before and after it (with
 * `spread`, its step over rows of spread lengths; null where that was not timed).
 */
export function besideStepMs(l: Pick<LevelResult, 'ort_beside'> | null | undefined, spread = false): number | null {
  const ms = besideTimings(l).flatMap((t) => (spread ? (t.decode_spread ? [t.decode_spread.ms] : []) : [t.decode.ms]))
  return ms.length ? ms.reduce((a, m) => a + m, 0) / ms.length : null
}

/**
 * Output tok/s of ORT alone doing a level's work: `c` prompts prefilled (as many per run as the ceiling's prefill
 * rows), then `output` decode steps at batch c. From the timings beside the level when it has them (their mean
 * time), else from the ceiling. Null without a decode timing at batch c.
 */
export function ortSameWork(ceil: CeilingReference | null, c: number, len: Lengths, l?: Pick<LevelResult, 'ort_beside'> | null): number | null {
  const beside = besideTimings(l)
  if (beside.length) return (c * len.output) / (beside.reduce((a, t) => a + sameWorkSeconds(t.decode.ms, t.prefill, c, len), 0) / beside.length)
  const step = ceil?.decode.find((d) => d.batch === c) ?? null
  return step && ceil ? (c * len.output) / sameWorkSeconds(step.ms, ceil.prefill, c, len) : null
}

/** Per level, each onnxd target against the baseline and against ORT alone on its graph form. */
export function targetRatios(r: Pick<BenchReport, 'scenarios' | 'references'>, baseline: string | null, len: Lengths): TargetRatios[] {
  if (!baseline) return []
  const runs = r.scenarios.filter((s): s is ScenarioResult => s.name === 'onnxd' && !isSkipped(s))
  const base = runs.find((s) => s.target === baseline)
  if (!base) return []
  return base.levels.map((bl) => {
    const c = bl.max_concurrency
    const out: TargetRatios = { concurrency: c, baseline, output_throughput: {}, vs_baseline: {}, vs_ort_same_work: {} }
    for (const s of runs) {
      const l = level(s, c)
      const key = s.target ?? s.name
      if (!l) continue
      out.output_throughput[key] = l.output_throughput
      out.vs_baseline[key] = ratio(l.output_throughput, bl.output_throughput)
      out.vs_ort_same_work[key] = ratio(l.output_throughput, ortSameWork(scenarioCeiling(r.references, s), c, len, l))
    }
    return out
  })
}

/** The fraction of a level's prompt tokens the server's cache gave (0 with no prompt tokens). */
const cachedShare = (l: LevelResult): number => (l.total_input_tokens > 0 ? l.cached_input_tokens / l.total_input_tokens : 0)

/**
 * Each onnxd target against each llama.cpp server whose GGUF type is its weight form's pair (fp32-F32, int8-Q8_0,
 * q4-Q4_0) and whose prompt cache matches the target's prefix caching (on against on, off against off), at every
 * level both ran.
 */
export function llamaCppRatios(scenarios: BenchReport['scenarios']): LlamaCppRatio[] {
  const runs = scenarios.filter((s): s is ScenarioResult => !isSkipped(s))
  const out: LlamaCppRatio[] = []
  for (const o of runs.filter((s) => s.name === 'onnxd' && s.dtype)) {
    const pair = GGUF_PAIR[o.dtype as TargetDtype]
    const caching = o.prefix_caching !== false
    for (const l of runs.filter((s) => s.name === 'llama.cpp' && s.gguf_type === pair && (s.prompt_cache !== false) === caching)) {
      for (const ol of o.levels) {
        const ll = level(l, ol.max_concurrency)
        if (!ll) continue
        out.push({
          concurrency: ol.max_concurrency,
          onnxd: o.target ?? o.name,
          llama_cpp: l.target ?? l.name,
          dtype: o.dtype!,
          gguf_type: pair!,
          threads: l.threads ?? 0,
          output_throughput: ratio(ol.output_throughput, ll.output_throughput),
          onnxd_output_throughput: ol.output_throughput,
          llama_cpp_output_throughput: ll.output_throughput,
          ttft_p50_ms: { onnxd: ol.median_ttft_ms, llama_cpp: ll.median_ttft_ms },
          tpot_mean_ms: { onnxd: ol.mean_tpot_ms, llama_cpp: ll.mean_tpot_ms },
          prompt_cache: caching,
          prompt_cached: { onnxd: cachedShare(ol), llama_cpp: cachedShare(ll) },
        })
      }
    }
  }
  return out
}

/** Issue 13's targets against llama.cpp, per pair of onnxd target and llama.cpp server: output tok/s at least 1x at one
 * stream, and at least 2x at 16 streams and more (the lowest such level). */
export function llamaCppTargets(rs: LlamaCppRatio[]): TargetCheck[] {
  const pairs = [...new Set(rs.map((r) => `${r.onnxd}|${r.llama_cpp}`))]
  return pairs.flatMap((p) => {
    const of = rs.filter((r) => `${r.onnxd}|${r.llama_cpp}` === p && r.output_throughput !== null)
    const { onnxd, llama_cpp } = rs.find((r) => `${r.onnxd}|${r.llama_cpp}` === p)!
    const one = of.find((r) => r.concurrency === 1)
    const many = of.filter((r) => r.concurrency >= 16)
    const low = many.length ? many.reduce((a, r) => (r.output_throughput! < a.output_throughput! ? r : a)) : null
    const id = `llama_cpp:${onnxd.replace(/^onnxd /, '')}:${llama_cpp.replace(/^llama\.cpp /, '')}`
    const check = (suffix: string, text: string, threshold: number, v: number | null, reason: string): TargetCheck =>
      v === null ? { id: `${id}:${suffix}`, text, value: null, threshold, direction: '>=', met: null, reason } : { id: `${id}:${suffix}`, text, value: v, threshold, direction: '>=', met: v >= threshold }
    return [
      check('1', `${onnxd} output tok/s at 1 stream vs ${llama_cpp}`, 1, one?.output_throughput ?? null, 'no level at 1 stream in both'),
      check('16+', `${onnxd} output tok/s at >= 16 streams vs ${llama_cpp} (lowest level)`, 2, low?.output_throughput ?? null, 'no level at >= 16 streams in both'),
    ]
  })
}

/** Efficiency of each onnxd level against every reference measured. */
export function efficiency(r: Pick<BenchReport, 'scenarios' | 'references'>, model: ModelInfo | null, len: Lengths): Efficiency[] {
  const on = scenario(r as BenchReport, 'onnxd')
  if (!on) return []
  const peer = scenario(r as BenchReport, 'peer')
  const unb = scenario(r as BenchReport, 'unbatched')
  const ceil = isSkipped(r.references.ort_ceiling) ? null : r.references.ort_ceiling
  const peak = isSkipped(r.references.matmul_peak) ? null : r.references.matmul_peak
  return on.levels.map((l) => {
    const c = l.max_concurrency
    const step = ceil?.decode.find((d) => d.batch === c) ?? null
    const withPrefill = ortSameWork(ceil, c, len, l)
    const inputRate = l.total_input_tokens / l.duration
    const gflops = model
      ? (l.output_throughput * flopsPerToken(model, len.prompt + len.output / 2) + inputRate * flopsPerToken(model, len.prompt / 2)) / 1e9
      : 0
    return {
      concurrency: c,
      output_throughput: l.output_throughput,
      vs_ceiling: ratio(l.output_throughput, step?.tokens_per_s),
      ort_same_work: withPrefill,
      ort_same_work_from: withPrefill === null ? null : besideStepMs(l) !== null ? 'beside' : 'ceiling',
      vs_ceiling_with_prefill: ratio(l.output_throughput, withPrefill),
      vs_peer: ratio(l.output_throughput, level(peer, c)?.output_throughput),
      vs_unbatched: ratio(l.output_throughput, level(unb, c)?.output_throughput),
      achieved_gflops: gflops,
      vs_matmul_peak: model ? ratio(gflops, peak?.gflops) : null,
      tpot_vs_peer: ratio(l.mean_tpot_ms, level(peer, c)?.mean_tpot_ms),
      bound_vs_peer: ratio(withPrefill, level(peer, c)?.output_throughput),
      bound_vs_unbatched: ratio(withPrefill, level(unb, c)?.output_throughput),
      // Both from the ceiling's own timings, so that the share does not mix two moments of the host.
      bound_vs_ceiling: ratio(ortSameWork(ceil, c, len), step?.tokens_per_s),
      ceiling_batch_gain: ratio(step?.tokens_per_s, ceil?.decode.find((d) => d.batch === 1)?.tokens_per_s),
    }
  })
}

export function hostDrift(r: Pick<BenchReport, 'scenarios' | 'references'>): Drift {
  const spread = (xs: number[]): number | null => (xs.length >= 2 && Math.min(...xs) > 0 ? Math.max(...xs) / Math.min(...xs) : null)
  const steps = (scenario(r as BenchReport, 'unbatched')?.levels ?? []).flatMap((l) => (l.engine?.decode_steps ? [l.engine.mean_decode_step_ms] : []))
  const unbatched_step = spread(steps)
  const c = isSkipped(r.references.ort_ceiling) ? null : r.references.ort_ceiling
  const pairs = (c?.runs.before?.decode ?? []).flatMap((b) => {
    const a = c?.runs.after?.decode.find((d) => d.batch === b.batch)
    return a ? [spread([a.ms, b.ms])!] : []
  })
  const ceiling_step = pairs.length ? Math.max(...pairs) : null
  const around = r.scenarios.flatMap((s) => (isSkipped(s) ? [] : s.levels.flatMap((l) => (l.ort_beside?.before && l.ort_beside.after ? [spread([l.ort_beside.before.decode.ms, l.ort_beside.after.decode.ms])!] : []))))
  const beside_step = around.length ? Math.max(...around) : null
  const moved: string[] = []
  if (unbatched_step !== null && unbatched_step > DRIFT_WARN) moved.push(`the unbatched node's batch-1 decode step ranged ${steps.map((x) => x.toFixed(1)).join(' / ')} ms across its levels`)
  if (ceiling_step !== null && ceiling_step > DRIFT_WARN) moved.push(`the ORT decode ceiling's steps differed up to ${pct(ceiling_step - 1)} between before and after the sweep`)
  if (beside_step != null && beside_step > DRIFT_WARN) moved.push(`ORT alone's decode step differed up to ${pct(beside_step - 1)} between right before and right after one level`)
  const warning = moved.length
    ? `the host's speed moved during this run (${moved.join('; ')}): ratios between scenarios carry that error; repeat the run before trusting them`
    : null
  return { unbatched_step, ceiling_step, beside_step, warning }
}

/** The issues' targets, as ratios from this run. */
export function targets(eff: Efficiency[], r: Pick<BenchReport, 'scenarios' | 'references'>): TargetCheck[] {
  const check = (id: string, text: string, threshold: number, direction: '>=' | '<=', value: number | null, reason: string): TargetCheck =>
    value === null
      ? { id, text, value, threshold, direction, met: null, reason }
      : { id, text, value, threshold, direction, met: direction === '>=' ? value >= threshold : value <= threshold }
  const at = (c: number): Efficiency | undefined => eff.find((e) => e.concurrency === c)
  const why = (what: string, c: string, skippedName: ScenarioName | 'ort_ceiling'): string => {
    const s = skippedName === 'ort_ceiling' ? r.references.ort_ceiling : r.scenarios.find((x) => x.name === skippedName)
    if (s && isSkipped(s)) return `${what} skipped: ${s.reason}`
    return `no level at ${c} concurrent streams in both onnxd and the ${what}`
  }
  const peer16 = eff.filter((e) => e.concurrency >= 16 && e.vs_peer !== null)
  const lowest = peer16.length ? peer16.reduce((a, e) => (e.vs_peer! < a.vs_peer! ? e : a)) : null
  return [
    { ...check('peer_throughput', 'output tok/s at >= 16 concurrent streams vs the transformers.js peer (lowest level)', 5, '>=', lowest?.vs_peer ?? null, why('peer', '>= 16', 'peer')), bound: lowest?.bound_vs_peer ?? null },
    check('peer_tpot', 'mean time per output token at 1 stream vs the transformers.js peer', 1, '<=', at(1)?.tpot_vs_peer ?? null, why('peer', '1', 'peer')),
    { ...check('unbatched_throughput', 'output tok/s at 64 concurrent streams vs the unbatched node', 8, '>=', at(64)?.vs_unbatched ?? null, why('unbatched node', '64', 'unbatched')), bound: at(64)?.bound_vs_unbatched ?? null },
    { ...check('ceiling_throughput', 'output tok/s at 64 concurrent streams vs the raw ORT decode ceiling at batch 64', 0.8, '>=', at(64)?.vs_ceiling ?? null, why('ORT ceiling', '64', 'ort_ceiling')), bound: at(64)?.bound_vs_ceiling ?? null },
  ]
}

const x = (v: number | null, d = 1): string => (v === null ? 'n/a' : `${v.toFixed(d)}x`)
const pct = (v: number | null): string => (v === null ? 'n/a' : `${(v * 100).toFixed(0)}%`)
const met = (t: TargetCheck | undefined): string => (!t || t.met === null ? 'not measured' : t.met ? 'met' : 'MISSED')

/** One line each: onnxd vs the ceiling, vs the peer, vs unbatched. */
export function summaryLines(eff: Efficiency[], tg: TargetCheck[], r: Pick<BenchReport, 'references'>): string[] {
  const top = eff[eff.length - 1]
  if (!top) return ['no onnxd levels measured']
  const ceil = isSkipped(r.references.ort_ceiling) ? null : r.references.ort_ceiling
  const step = ceil?.decode.find((d) => d.batch === top.concurrency)
  const t = (id: string): TargetCheck | undefined => tg.find((g) => g.id === id)
  const peerAt = eff.filter((e) => e.concurrency >= 16 && e.vs_peer !== null)
  const bound = (v: number | null | undefined): string => (v == null ? '' : ` (ORT alone, same work: ${x(v)})`)
  const peerLine = peerAt.length ? peerAt.map((e) => `${x(e.vs_peer)} at ${e.concurrency}${bound(e.bound_vs_peer)}`).join(', ') : `n/a`
  const one = eff.find((e) => e.concurrency === 1)
  return [
    `onnxd vs ceiling: at ${top.concurrency} streams ${top.output_throughput.toFixed(1)} output tok/s = ${pct(top.vs_ceiling)} of the ORT decode ceiling` +
      (step ? ` (${step.tokens_per_s.toFixed(1)} tok/s at batch ${step.batch}, past ${step.past})` : '') +
      `, ${pct(top.vs_ceiling_with_prefill)} of ORT doing the same prefill + decode work${top.ort_same_work_from === 'beside' ? ' timed beside the level (that work from the ceiling\'s own timings: ' : ' (which is itself '}${pct(top.bound_vs_ceiling)} of the decode ceiling), ${pct(top.vs_matmul_peak)} of the matmul peak (MFU); target >= 80% at 64: ${met(t('ceiling_throughput'))}` +
      ((top.vs_ceiling ?? 0) > 1 ? ' (above 100%: the machine was busier while the ceiling was timed, or the node decoded a smaller batch or shorter past)' : ''),
    `onnxd vs peer (transformers.js): output tok/s ${peerLine} streams (target >= 5x: ${met(t('peer_throughput'))}); ` +
      `TPOT at 1 stream ${x(one?.tpot_vs_peer ?? null, 2)} the peer's (target <= 1x: ${met(t('peer_tpot'))})`,
    `onnxd vs unbatched: output tok/s ${eff.filter((e) => e.vs_unbatched !== null).map((e) => `${x(e.vs_unbatched)} at ${e.concurrency}${e.concurrency === 64 ? bound(e.bound_vs_unbatched) : ''}`).join(', ') || 'n/a'} streams (target >= 8x at 64: ${met(t('unbatched_throughput'))})` +
      (top.ceiling_batch_gain === null ? '' : `; ORT alone gains ${x(top.ceiling_batch_gain)} from batch 1 to batch ${top.concurrency}`),
  ]
}

/** Writes a report (this or the context sweep's) as JSON; returns the path. */
export function writeJson(r: object, path: string): string {
  mkdirSync(join(path, '..'), { recursive: true })
  writeFileSync(path, JSON.stringify(r, null, 2) + '\n')
  return path
}
