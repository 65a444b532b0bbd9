// The report as text: the per-level tables (throughput, latency, where the time goes), the reference lines, and a
// fixed-width table formatter shared with `onnxd bench compare`. Pure over a BenchReport.
import { besideStepMs, isSkipped, scenarioCeiling, type BenchReport, type CeilingReference, type Skipped } from './report.js'
import type { OpTime } from './refs/profile.js'

const f = (v: number, d = 1): string => (Number.isFinite(v) ? v.toFixed(d) : '-')

/** The per-level tables: throughput and errors, then latencies (ms), like vLLM's result block. */
export function tables(r: BenchReport): { throughput: Record<string, string | number>[]; latency: Record<string, string | number>[] } {
  const throughput: Record<string, string | number>[] = []
  const latency: Record<string, string | number>[] = []
  for (const s of r.scenarios) {
    if (isSkipped(s)) {
      throughput.push({ target: s.name, conc: '-', 'ok/fail/cut': `skipped: ${s.reason}` })
      continue
    }
    for (const l of s.levels) {
      const errs = Object.entries(l.errors_by_status).map(([k, n]) => `${k}:${n}`).join(' ')
      throughput.push({
        target: s.target ?? s.name,
        conc: l.max_concurrency,
        'ok/fail/cut': `${l.completed}/${l.failed}/${l.cut}`,
        'dur s': f(l.duration),
        'req/s': f(l.request_throughput, 2),
        'out tok/s': f(l.output_throughput),
        'total tok/s': f(l.total_token_throughput),
        errors: errs || '-',
      })
      latency.push({
        target: s.target ?? s.name,
        conc: l.max_concurrency,
        'TTFT mean': f(l.mean_ttft_ms),
        'TTFT p50': f(l.median_ttft_ms),
        'TTFT p90': f(l.p90_ttft_ms),
        'TTFT p99': `${l.ttft_censored ? '>=' : ''}${f(l.p99_ttft_ms)}`,
        'TPOT mean': f(l.mean_tpot_ms),
        'TPOT p50': f(l.median_tpot_ms),
        'TPOT p99': f(l.p99_tpot_ms),
        'ITL mean': f(l.mean_itl_ms),
        'ITL p99': f(l.p99_itl_ms),
        'E2EL mean': f(l.mean_e2el_ms, 0),
        'E2EL p99': f(l.p99_e2el_ms, 0),
      })
    }
  }
  return { throughput, latency }
}

/**
 * How long each target the bench started took to say ready (loading the model; an onnxd node on a GPU also runs its
 * warm-up first): one line, or null when the bench started none.
 */
export function readyLine(r: BenchReport): string | null {
  const started = r.scenarios.flatMap((s) => (isSkipped(s) || s.ready_s == null ? [] : [`${s.target ?? s.name} ${f(s.ready_s)} s`]))
  return started.length ? `ready after start (the model loaded; on a GPU, onnxd's warm-up run): ${started.join(', ')}` : null
}

/** Where each node level's wall time went (from the node's /metrics), next to the ORT step at the same batch. */
export function timeTable(r: BenchReport): Record<string, string | number>[] {
  const rows: Record<string, string | number>[] = []
  for (const s of r.scenarios) {
    if (isSkipped(s)) continue
    const ceil = scenarioCeiling(r.references, s)
    for (const l of s.levels) {
      const e = l.engine
      if (!e) continue
      // llama.cpp's peer reports its llama_decode calls in the same families (a step is one call); no ORT step beside it.
      // ORT alone beside the level when it was timed there (the mean before and after), else the ceiling's step.
      const ort = s.name === 'llama.cpp' ? null : (besideStepMs(l) ?? ceil?.decode.find((d) => d.batch === l.max_concurrency)?.ms ?? null)
      // The same step over rows of lengths spread as a continuous batch's are (timed beside the level only).
      const spread = s.name === 'llama.cpp' ? null : besideStepMs(l, true)
      rows.push({
        target: s.target ?? s.name,
        conc: l.max_concurrency,
        'wall s': f(l.duration),
        'in forward': `${(e.forward_fraction * 100).toFixed(0)}%`,
        'prefill s': f(e.prefill_seconds),
        'decode s': f(e.decode_seconds),
        'other s': f(e.other_seconds),
        'decode steps': e.decode_steps,
        'mean batch': f(e.mean_decode_batch),
        'step ms': f(e.mean_decode_step_ms),
        'ORT step ms (B=conc)': ort === null ? '-' : f(ort),
        'ORT, rows spread': spread === null ? '-' : f(spread),
      })
    }
  }
  return rows
}

/** The four costliest operator types with their ms per step and share of the kernels' time, then the rest together. */
export function opShares(ops: readonly OpTime[]): string {
  const total = ops.reduce((a, o) => a + o.ms, 0)
  if (total <= 0) return 'no kernel time recorded'
  const part = (what: string, ms: number): string => `${what} ${ms.toFixed(1)} ms (${((100 * ms) / total).toFixed(0)}%)`
  const rest = ops.slice(4).reduce((a, o) => a + o.ms, 0)
  return [...ops.slice(0, 4).map((o) => part(o.op, o.ms)), ...(ops.length > 4 ? [part(`${ops.length - 4} other types`, rest)] : [])].join(', ')
}

export function referenceLines(r: BenchReport): string[] {
  const out: string[] = []
  const ceilings: [string, CeilingReference | Skipped][] = r.references.ort_ceiling_by_form ? Object.entries(r.references.ort_ceiling_by_form).map(([f, c]) => [` (${f} graph)`, c]) : [['', r.references.ort_ceiling]]
  for (const [what, c] of ceilings) {
    if (isSkipped(c)) out.push(`ORT decode ceiling${what}: skipped (${c.reason})`)
    else {
      out.push(`ORT decode ceiling${what} (${c.file ? `${c.file}, ` : ''}${c.api ?? 'session.run'}, one decode step, past ${c.past}): ` + c.decode.map((d) => `B=${d.batch} ${d.ms.toFixed(1)} ms -> ${d.tokens_per_s.toFixed(1)} tok/s`).join('; '))
      out.push(`ORT prefill${what} of ${c.prefill.rows} x ${c.prefill.prompt}-token prompts in one run: ${c.prefill.ms.toFixed(1)} ms (${c.prefill.tokens_per_s.toFixed(0)} tok/s)`)
      for (const d of c.ops ?? []) out.push(`ORT decode step${what} at B=${d.batch} by operator (ORT's profiler): ${opShares(d.ops)}`)
    }
  }
  const m = r.references.matmul_peak
  if (isSkipped(m)) out.push(`matmul peak: skipped (${m.reason})`)
  else out.push(`matmul peak through ORT: ${m.gflops.toFixed(1)} GFLOP/s (` + m.points.map((p) => `${p.size}: ${p.gflops.toFixed(1)}`).join(', ') + ')')
  return out
}

/** Per level, each onnxd target's output tok/s, its ratio to the baseline and to ORT alone on its graph, and its
 * TTFT and TPOT beside them. Empty with one target. */
export function targetTable(r: BenchReport): Record<string, string | number>[] {
  const rows: Record<string, string | number>[] = []
  for (const t of r.target_ratios ?? []) {
    for (const [name, tps] of Object.entries(t.output_throughput)) {
      const s = r.scenarios.find((x) => !isSkipped(x) && x.target === name)
      const l = s && !isSkipped(s) ? s.levels.find((v) => v.max_concurrency === t.concurrency) : undefined
      const ratio = (v: number | null | undefined): string => (v == null ? '-' : `${v.toFixed(2)}x`)
      rows.push({
        conc: t.concurrency,
        target: name,
        'out tok/s': f(tps),
        [`vs ${t.baseline}`]: ratio(t.vs_baseline[name]),
        'vs ORT same work': ratio(t.vs_ort_same_work[name]),
        'TTFT mean': l ? `${l.ttft_censored ? '>=' : ''}${f(l.mean_ttft_ms)}` : '-',
        'TPOT mean': l ? f(l.mean_tpot_ms) : '-',
        'ok/cut': l ? `${l.completed}/${l.cut}` : '-',
      })
    }
  }
  return rows
}

/** Per level, each onnxd target against the llama.cpp server on its paired weights: output tok/s, their ratio, and
 * TTFT p50 and TPOT mean of both, and the share of each side's prompt tokens its cache gave. */
export function llamaCppTable(r: BenchReport): Record<string, string | number>[] {
  return (r.llama_cpp_ratios ?? []).map((p) => ({
    conc: p.concurrency,
    onnxd: p.onnxd,
    'llama.cpp': p.llama_cpp,
    'onnxd tok/s': f(p.onnxd_output_throughput),
    'llama tok/s': f(p.llama_cpp_output_throughput),
    ratio: p.output_throughput == null ? '-' : `${p.output_throughput.toFixed(2)}x`,
    'TTFT p50 onnxd': f(p.ttft_p50_ms.onnxd, 0),
    'TTFT p50 llama': f(p.ttft_p50_ms.llama_cpp, 0),
    'TPOT onnxd': f(p.tpot_mean_ms.onnxd),
    'TPOT llama': f(p.tpot_mean_ms.llama_cpp),
    'cached onnxd/llama': p.prompt_cached ? `${(p.prompt_cached.onnxd * 100).toFixed(0)}%/${(p.prompt_cached.llama_cpp * 100).toFixed(0)}%` : '-',
  }))
}

/** Rows as a fixed-width text table: text columns left-aligned, numeric ones right-aligned. */
export function formatTable(rows: Record<string, string | number>[]): string {
  if (!rows.length) return ''
  const cols = [...new Set(rows.flatMap((r) => Object.keys(r)))]
  const cell = (r: Record<string, string | number>, c: string): string => String(r[c] ?? '')
  const numeric = cols.map((c) => rows.every((r) => /^[-\d.>=x%]*$/.test(cell(r, c))))
  const w = cols.map((c) => Math.max(c.length, ...rows.map((r) => cell(r, c).length)))
  const line = (cells: string[]): string => cells.map((v, i) => (numeric[i] ? v.padStart(w[i]) : v.padEnd(w[i]))).join('  ').trimEnd()
  return [line(cols), line(w.map((n) => '-'.repeat(n))), ...rows.map((r) => line(cols.map((c) => cell(r, c))))].join('\n') + '\n'
}

