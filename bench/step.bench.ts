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
// --spread 0,16 spreads the rows' lengths over that many positions around the past, as a continuous batch's rows are
// (rows that joined at different steps), for onnxd and ORT alone alike, alternating with the other spreads in each
// round: ORT's GroupQueryAttention runs such a batch slower than one of equal rows.
//
//   npx tsx bench/step.bench.ts [--batches 16,64] [--past 144] [--spread 0] [--steps 3] [--threads 1] [--rounds 2] [--ort]
//     LABEL=DIR:DTYPE ...     (e.g. gqa-q4=.cache/models/onnxd-135m-gqa:q4 plain-int8=.cache/models/onnxd-135m:int8;
//                             DTYPE q4-as-int8 is the q4 file with --nbits-as-int8)
import { loadavg } from 'node:os'
import { parseArgs } from 'node:util'
import { KV_CHUNK, loadModel, readBundle, type LoadedModel } from '../src/engine/bench-surface.js'
import { filledCache, sweepStep, type Traffic } from '../src/bench/context.js'
import { spreadLengths } from '../src/bench/refs/ort.js'
import { measureCeiling } from '../src/bench/refs/ort.js'
import { openCapiSteps, usesGroupQueryAttention, type CapiSteps } from '../src/bench/refs/capi.js'
import type { Dtype } from '../src/shared/model.js'
import { servedFile, TARGET_DTYPES, type TargetDtype } from '../src/bench/options.js'
import { median, writeReport } from './lib/report.js'

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    batches: { type: 'string', default: '16,64' },
    past: { type: 'string', default: '144' },
    spread: { type: 'string', default: '0' },
    steps: { type: 'string', default: '3' },
    threads: { type: 'string', default: '1' },
    rounds: { type: 'string', default: '2' },
    ort: { type: 'boolean', default: false },
  },
})
const batches = values.batches.split(',').map(Number)
const [past, steps, threads, rounds] = [values.past, values.steps, values.threads, values.rounds].map(Number)
const spreads = values.spread.split(',').map(Number)
const forms = positionals.map((p) => {
  const m = /^([^=]+)=(.+):([\w-]+)$/.exec(p)
  if (!m || !(TARGET_DTYPES as readonly string[]).includes(m[3])) throw new Error(`${p}: expected LABEL=DIR:DTYPE, DTYPE one of ${TARGET_DTYPES.join(', ')}`)
  // A bench weight form: a bundle dtype, or q4-as-int8 (the q4 file with --nbits-as-int8).
  const { dtype, nbitsAsInt8 } = servedFile(m[3] as TargetDtype)
  // The ONNX file the engine serves for that dtype, found by its own rule.
  return { label: m[1], dir: m[2], dtype: dtype as Dtype, nbitsAsInt8, onnxPath: readBundle(m[2], { dtype }).onnxPath }
})
if (!forms.length || [past, steps, threads, rounds, ...batches, ...spreads].some((n) => !Number.isInteger(n) || n < 0) || spreads.some((w) => Math.floor(w / 2) > past)) {
  process.stderr.write('usage: npx tsx bench/step.bench.ts [--batches 16,64] [--past 144] [--spread 0] [--steps 3] [--threads 1] [--rounds 2] [--ort] LABEL=DIR:DTYPE ...\n')
  process.exit(2)
}

const noTraffic = (): Traffic => ({ fed: {}, fetched: {}, shared: [] })

/** Wall ms of one run of ORT alone's step. */
const timed = (step: { run(): void }): number => {
  const t0 = performance.now()
  step.run()
  return performance.now() - t0
}

interface Cell {
  round: number
  form: string
  batch: number
  /** Positions the rows' lengths spread over (0: every row at the past). */
  spread: number
  run_ms: number
  cpu_ms_per_step: number
  ort_ms?: number
  /** GroupQueryAttention: the median over the step pairs of ORT's step over onnxd's (run call against run call). */
  ort_over_onnxd?: number
  /**
   * GroupQueryAttention at a spread: ORT alone's steps over equal rows at the past and over the spread rows, timed
   * in turn after the cell's pairs (ORT after ORT: a step right after the other session's runs slower, its threads
   * still spinning), and the median over those pairs of the spread step over the equal one (ORT's own cost of rows of
   * different lengths). ort_equal_ms is the median of those equal steps.
   */
  ort_equal_ms?: number
  ort_spread_over_equal?: number
  load1: number
}
const cells: Cell[] = []
const models = new Map<string, LoadedModel>()
const refs = new Map<string, CapiSteps>()
for (const f of forms) {
  models.set(f.label, await loadModel(f.dir, { runtime: 'capi', intraOpThreads: threads, dtype: f.dtype, nbitsAsInt8: f.nbitsAsInt8 }))
  if (values.ort && usesGroupQueryAttention(f.onnxPath)) refs.set(f.label, openCapiSteps({ onnxPath: f.onnxPath, threads, nbitsAsInt8: f.nbitsAsInt8 }))
}
try {
  for (let round = 0; round < rounds; round++) {
    for (const batch of batches) {
      for (const spread of spreads) for (const f of forms) {
        const m = models.get(f.label)!
        const lens = spreadLengths(batch, past, spread)
        // The cache as wide as its longest row needs (onnxd's slot stride follows it), the rows at their lengths.
        const kv = filledCache(m, batch, Math.max(...lens), KV_CHUNK)
        lens.forEach((l, r) => (kv.lens[r] = l))
        const ort = refs.get(f.label)?.step({ batch, seq: 1, past, lens, greedy: true })
        const equal = spread > 0 ? refs.get(f.label)?.step({ batch, seq: 1, past, greedy: true }) : undefined
        // Warm-ups, ORT's first: onnxd's first timed step then follows one of its own, as every later one does.
        ort?.run()
        await sweepStep(m, kv, past, noTraffic)
        const ms: number[] = []
        const ortMs: number[] = []
        const equalMs: number[] = []
        const spreadMs: number[] = []
        let cpu = 0
        try {
          for (let i = 0; i < steps; i++) {
            // Each session's step right after the other's runs with the other's intra-op threads still spinning
            // (ORT's default), on the same cores: a step of ORT alone at batch 16 took about twice as long there as
            // after its own step. So each timed step follows an untimed one of its own session.
            if (ort && i > 0) await sweepStep(m, kv, past, noTraffic)
            const c0 = process.cpuUsage()
            ms.push((await sweepStep(m, kv, past, noTraffic)).runMs)
            const c = process.cpuUsage(c0)
            cpu += (c.user + c.system) / 1000
            if (!ort) continue
            ort.run()
            ortMs.push(timed(ort))
          }
          if (ort && equal) {
            equal.run()
            for (let i = 0; i < steps; i++) {
              equalMs.push(timed(equal))
              spreadMs.push(timed(ort))
            }
          }
        } finally {
          ort?.dispose()
          equal?.dispose()
        }
        const cell: Cell = { round, form: f.label, batch, spread, run_ms: median(ms), cpu_ms_per_step: cpu / steps, load1: loadavg()[0] }
        if (ort) {
          cell.ort_ms = median(ortMs)
          cell.ort_over_onnxd = median(ortMs.map((o, i) => o / ms[i]))
          if (equalMs.length) {
            cell.ort_equal_ms = median(equalMs)
            cell.ort_spread_over_equal = median(spreadMs.map((o, i) => o / equalMs[i]))
          }
        } else if (values.ort && spread > 0) {
          // onnxruntime-node's ceiling (refs/ort.ts) times rows of one length only.
          console.log(`${f.label}: no ORT alone figure at a spread of ${spread} (a plain graph's ORT timing takes equal rows only)`)
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
console.log('\nform, batch: run ms per round | CPU ms per step per round' + (values.ort ? ' | ORT alone ms per round | ORT / onnxd per round (paired: median of the step pairs)' : '') + (values.ort && spreads.some((w) => w > 0) ? ' | ORT alone over the spread rows / over equal rows per round (paired)' : ''))
for (const batch of batches) {
  for (const spread of spreads) for (const f of forms) {
    const mine = cells.filter((c) => c.form === f.label && c.batch === batch && c.spread === spread)
    const ortMs = mine.map((c) => (c.ort_ms === undefined ? '-' : c.ort_ms.toFixed(1))).join(' ')
    const ratio = values.ort ? ` | ${ortMs} | ` + mine.map((c) => (c.ort_ms === undefined ? '-' : (c.ort_over_onnxd ?? c.ort_ms / c.run_ms).toFixed(3))).join(' ') : ''
    const own = mine.some((c) => c.ort_spread_over_equal !== undefined) ? ' | ' + mine.map((c) => c.ort_spread_over_equal?.toFixed(3) ?? '-').join(' ') : ''
    console.log(`${f.label} B=${batch}${spreads.length > 1 || spread ? ` spread ${spread}` : ''}: ${mine.map((c) => c.run_ms.toFixed(1)).join(' ')} | ${mine.map((c) => c.cpu_ms_per_step.toFixed(1)).join(' ')}${ratio}${own}`)
  }
}
console.log(`report: ${writeReport('step', { bench: 'step', options: { batches, past, spreads, steps, threads, rounds, ort: values.ort }, forms, cells })}`)
