// onnxd's decode step against ORT alone, and weight forms against each other (issue 36): the batcher's decode
// forward (the context sweep's sweepStep over a filled cache, runtime capi) timed per form, alternating forms and
// rounds in one process, with the CPU milliseconds of the process per step beside the wall time (on a shared host
// the figure that load barely moves; with --threads 1 neither ORT nor anything else spins). --ort also times ORT
// alone on the same graph at the same batch and past (the bench's ceiling): on a GroupQueryAttention graph through the
// C API with presents on the past (refs/capi.ts), one ORT step after each of onnxd's, so that each pair sees the same
// moment of a shared host and the median of the pairs' ratios holds where the wall clock moves; on a plain graph
// through onnxruntime-node (refs/ort.ts), right after each form's cell. docs/benchmarks.md, "llama.cpp driven right,
// and the CPU lead", has its figures.
//
//   npx tsx bench/step.bench.ts [--batches 16,64] [--past 144] [--steps 3] [--threads 1] [--rounds 2] [--ort]
//     LABEL=DIR:DTYPE ...     (e.g. gqa-q4=.cache/models/onnxd-135m-gqa:q4 plain-int8=.cache/models/onnxd-135m:int8)
import { loadavg } from 'node:os'
import { parseArgs } from 'node:util'
import { KV_CHUNK, loadModel, readBundle, type LoadedModel } from '../src/engine/bench-surface.js'
import { filledCache, sweepStep, type Traffic } from '../src/bench/context.js'
import { measureCeiling } from '../src/bench/refs/ort.js'
import { openCapiSteps, usesGroupQueryAttention, type CapiSteps } from '../src/bench/refs/capi.js'
import type { Dtype } from '../src/shared/model.js'
import { median, writeReport } from './lib/report.js'

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    batches: { type: 'string', default: '16,64' },
    past: { type: 'string', default: '144' },
    steps: { type: 'string', default: '3' },
    threads: { type: 'string', default: '1' },
    rounds: { type: 'string', default: '2' },
    ort: { type: 'boolean', default: false },
  },
})
const batches = values.batches.split(',').map(Number)
const [past, steps, threads, rounds] = [values.past, values.steps, values.threads, values.rounds].map(Number)
const forms = positionals.map((p) => {
  const m = /^([^=]+)=(.+):(\w+)$/.exec(p)
  if (!m) throw new Error(`${p}: expected LABEL=DIR:DTYPE`)
  const dtype = m[3] as Dtype
  // The ONNX file the engine serves for that dtype, found by its own rule.
  return { label: m[1], dir: m[2], dtype, onnxPath: readBundle(m[2], { dtype }).onnxPath }
})
if (!forms.length || [past, steps, threads, rounds, ...batches].some((n) => !Number.isInteger(n) || n < 0)) {
  process.stderr.write('usage: npx tsx bench/step.bench.ts [--batches 16,64] [--past 144] [--steps 3] [--threads 1] [--rounds 2] [--ort] LABEL=DIR:DTYPE ...\n')
  process.exit(2)
}

const noTraffic = (): Traffic => ({ fed: {}, fetched: {}, shared: [] })

interface Cell {
  round: number
  form: string
  batch: number
  run_ms: number
  cpu_ms_per_step: number
  ort_ms?: number
  /** GroupQueryAttention: the median over the step pairs of ORT's step over onnxd's (run call against run call). */
  ort_over_onnxd?: number
  load1: number
}
const cells: Cell[] = []
const models = new Map<string, LoadedModel>()
const refs = new Map<string, CapiSteps>()
for (const f of forms) {
  models.set(f.label, await loadModel(f.dir, { runtime: 'capi', intraOpThreads: threads, dtype: f.dtype }))
  if (values.ort && usesGroupQueryAttention(f.onnxPath)) refs.set(f.label, openCapiSteps({ onnxPath: f.onnxPath, threads }))
}
try {
  for (let round = 0; round < rounds; round++) {
    for (const batch of batches) {
      for (const f of forms) {
        const m = models.get(f.label)!
        const kv = filledCache(m, batch, past, KV_CHUNK)
        const ort = refs.get(f.label)?.step({ batch, seq: 1, past, greedy: true })
        await sweepStep(m, kv, past, noTraffic) // warm-up
        ort?.run()
        const ms: number[] = []
        const ortMs: number[] = []
        let cpu = 0
        try {
          for (let i = 0; i < steps; i++) {
            const c0 = process.cpuUsage()
            ms.push((await sweepStep(m, kv, past, noTraffic)).runMs)
            const c = process.cpuUsage(c0)
            cpu += (c.user + c.system) / 1000
            if (!ort) continue
            const t0 = performance.now()
            ort.run()
            ortMs.push(performance.now() - t0)
          }
        } finally {
          ort?.dispose()
        }
        const cell: Cell = { round, form: f.label, batch, run_ms: median(ms), cpu_ms_per_step: cpu / steps, load1: loadavg()[0] }
        if (ort) {
          cell.ort_ms = median(ortMs)
          cell.ort_over_onnxd = median(ortMs.map((o, i) => o / ms[i]))
        } else if (values.ort) {
          const o = { onnxPath: f.onnxPath, batches: [batch], past, prompt: 8, prefillRows: 1, threads, provider: 'cpu', greedy: true, budget: { warmup: 1, minRuns: steps, minSeconds: 0, maxRuns: steps } }
          cell.ort_ms = (await measureCeiling(o)).decode[0].ms
        }
        cells.push(cell)
        console.log(JSON.stringify(cell))
      }
    }
  }
} finally {
  for (const m of models.values()) await m.session.dispose()
  for (const r of refs.values()) r.dispose()
}
console.log('\nform, batch: run ms per round | CPU ms per step per round' + (values.ort ? ' | ORT / onnxd per round (paired: median of the step pairs)' : ''))
for (const batch of batches) {
  for (const f of forms) {
    const mine = cells.filter((c) => c.form === f.label && c.batch === batch)
    const ratio = values.ort ? ' | ' + mine.map((c) => (c.ort_over_onnxd ?? c.ort_ms! / c.run_ms).toFixed(3)).join(' ') : ''
    console.log(`${f.label} B=${batch}: ${mine.map((c) => c.run_ms.toFixed(1)).join(' ')} | ${mine.map((c) => c.cpu_ms_per_step.toFixed(1)).join(' ')}${ratio}`)
  }
}
console.log(`report: ${writeReport('step', { bench: 'step', options: { batches, past, steps, threads, rounds, ort: values.ort }, forms, cells })}`)
