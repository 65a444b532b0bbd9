// `onnxd bench [options]`: the serving benchmark (src/bench): a concurrency sweep with the standard figures, the
// references in the same run, a table on stdout, JSON and an SVG chart on disk. `onnxd bench context [options]`:
// the context sweep (decode step time and bytes per step by form, runtime, batch and context). `onnxd bench compare
// A.json B.json [--json]` prints the ratios B/A.
import { CONTEXT_USAGE, contextOptions, formatSweep, runContextCommand } from '../bench/context.js'
import { caveats, compareReports, formatComparison, readReport } from '../bench/compare.js'
import { USAGE, benchConfig, parseFlags } from '../bench/options.js'
import { formatTable, llamaCppTable, readyLine, referenceLines, tables, targetTable, timeTable } from '../bench/format.js'
import type { BenchReport } from '../bench/report.js'
import { runBench } from '../bench/run.js'
import { systemLine } from '../bench/system.js'

function compare(argv: string[]): number {
  const json = argv.includes('--json')
  const files = argv.filter((a) => a !== '--json')
  if (files.length !== 2 || files.some((f) => f.startsWith('-'))) {
    process.stderr.write(`usage: onnxd bench compare A.json B.json [--json]\n`)
    return 2
  }
  const [a, b] = [readReport(files[0]), readReport(files[1])]
  const rows = compareReports(a, b)
  const notes = caveats(a, b)
  if (json) {
    process.stdout.write(JSON.stringify(rows, null, 2) + '\n')
    for (const n of notes) process.stderr.write(`note: ${n}\n`)
  } else process.stdout.write(formatComparison(rows, files[0], files[1], notes))
  return 0
}

function print(r: BenchReport): void {
  const out = process.stdout
  out.write(`\n${systemLine(r.machine)}; provider ${r.machine.provider}; load average ${r.machine.loadavg_start.join(' ')} -> ${r.machine.loadavg_end.join(' ')}\n`)
  const c = r.config
  out.write(`scenario ${r.scenario}; model ${r.model.id}${r.model.preset ? ` (preset ${r.model.preset})` : ''}; prompt ${c.shared_prefix_len ? `${c.shared_prefix_len} shared + ` : ''}${c.prompt_len ?? c.prompts_file} tokens, output ${c.output_len}${c.ignore_eos ? ' (ignore_eos)' : ''}; request rate ${c.request_rate}; seed ${c.seed}\n\n`)
  for (const l of referenceLines(r)) out.write(`${l}\n`)
  const t = tables(r)
  out.write(`\nthroughput\n${formatTable(t.throughput)}`)
  const ready = readyLine(r)
  if (ready) out.write(`${ready}\n`)
  out.write(`\nlatency, ms (vLLM's definitions; ">=" marks a TTFT lower bound from requests cut at the deadline)\n${formatTable(t.latency)}`)
  const byTarget = targetTable(r)
  if (byTarget.length) out.write(`\ntargets, per level (baseline ${r.baseline}; TTFT and TPOT mean, ms)\n${formatTable(byTarget)}`)
  const llama = llamaCppTable(r)
  if (llama.length) out.write(`\nonnxd vs llama.cpp on the same weights (F32-fp32, Q8_0-int8, Q4_0-q4), per level; TTFT p50 and TPOT mean, ms\n${formatTable(llama)}`)
  for (const n of r.notes) out.write(`note: ${n}\n`)
  const time = timeTable(r)
  if (time.length) out.write(`\nwhere the time goes (the node's /metrics: time inside forward passes, per level; ORT's step timed beside the level where it was)\n${formatTable(time)}`)
  out.write('\n')
  for (const l of r.summary) out.write(`${l}\n`)
  if (r.drift.warning) out.write(`warning: ${r.drift.warning}\n`)
  out.write('\ntargets\n')
  const idWidth = Math.max(22, ...r.targets.map((g) => g.id.length))
  for (const g of r.targets) {
    const bound = g.bound == null ? '' : `; ORT alone doing the same work would give ${g.bound.toFixed(2)}`
    const v = g.value === null ? `not measured (${g.reason})` : `${g.value.toFixed(2)} (${g.direction} ${g.threshold}): ${g.met ? 'met' : 'MISSED'}${bound}`
    out.write(`  ${g.id.padEnd(idWidth)} ${g.text}: ${v}\n`)
  }
  out.write(`\nJSON:  ${r.files.json}\nchart: ${r.files.chart}\n`)
}

async function context(argv: string[]): Promise<number> {
  const o = contextOptions(argv)
  if (!o) {
    process.stdout.write(CONTEXT_USAGE)
    return 0
  }
  const { report, path } = await runContextCommand({ ...o, log: o.quiet ? () => {} : undefined })
  process.stdout.write(`\n${systemLine(report.system)}\npreset ${report.preset} (builder ${report.builderVersion}), provider ${report.options.provider}\n\n${formatSweep(report)}\nJSON: ${path}\n`)
  return 0
}

export async function run(argv: string[]): Promise<number> {
  if (argv[0] === 'compare') return compare(argv.slice(1))
  if (argv[0] === 'context') return context(argv.slice(1))
  const { values, positionals } = parseFlags(argv)
  if (values.help) {
    process.stdout.write(USAGE)
    return 0
  }
  if (positionals.length) {
    process.stderr.write(`onnxd bench: unexpected argument '${positionals[0]}'\n\n${USAGE}`)
    return 2
  }
  const { report } = await runBench(benchConfig(argv))
  print(report)
  return 0
}
