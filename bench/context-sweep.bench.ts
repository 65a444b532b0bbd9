// Context sweep (issue 12): the decode step time and the bytes crossing JS<->ORT per step, for both graph forms of a
// preset (plain-op attention and GroupQueryAttention) and both step runtimes of DecoderSession ('js':
// onnxruntime-node's JS API, 'capi': ORT's C API through koffi), at each batch and context.
//
//   npx tsx bench/context-sweep.bench.ts [--preset 135m] [--forms plain,gqa] [--contexts 256,1024,4096]
//        [--batches 1,16] [--steps N] [--big-steps N] [--out DIR] [--models-dir .cache/models] [--threads 0]
//
// A step is driven the way the batcher's decodeStep drives it: a KvCache of `batch` rows, each holding context - 1
// tokens (random contents, appended in one go rather than prefilled), one new token per row (so the step attends
// over `context` positions), the graph's next-token output when it has one (else every row's logits), then the new
// rows appended to the cache. After each step the rows' lengths go back to context - 1, so every timed step runs at
// the same context. Per cell the runtimes alternate (js, capi, js, capi), each round a warm-up step then half the
// steps; ms/step is the median of the timed steps (the whole step: inputs, run, append).
//
// Bytes per step, from tensor sizes: `fed` = the inputs copied in (ids, attention mask, positions; the past KV is
// read in place over the KvCache's memory by both runtimes and not counted); `fetched` = the outputs JS receives:
// for 'js' every output onnxruntime-node returns (each a fresh copy: logits or next tokens, and every present);
// for 'capi' the outputs bound to the runner's reused buffers that JS then reads (next tokens or logits, and the
// presents unless they were bound onto the cache itself, as GroupQueryAttention's are when they fit). MB/step =
// (fed + fetched) / 1e6.
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { loadavg } from 'node:os'
import { parseArgs } from 'node:util'
import { buildModel, BUILDER_VERSION, type Attention } from '../src/builder/index.js'
import { loadModel, type LoadedModel } from '../src/engine/model/load.js'
import type { ForwardInput, KvTensor } from '../src/engine/model/session.js'
import type { Runtime } from '../src/engine/model/runtime.js'
import { KV_CHUNK, KvCache, kvShapeOf } from '../src/engine/scheduler/kv.js'
import { median, printSystem, rsd, systemInfo, writeReport, type SystemInfo } from './lib/report.js'

export const FORMS: readonly Attention[] = ['plain', 'gqa']
export const SWEEP_RUNTIMES: readonly Runtime[] = ['js', 'capi']

export interface SweepOptions {
  preset: string
  contexts: number[]
  batches: number[]
  /** The graph forms to sweep (default both). */
  forms?: Attention[]
  /** Timed steps per runtime and cell. */
  steps: number
  /** Timed steps for the cells at the largest batch and context (the slow ones); default `steps`. */
  bigSteps?: number
  modelsDir: string
  intraOpThreads?: number
  log?: (line: string) => void
}

export interface SweepCell {
  form: Attention
  runtime: Runtime
  batch: number
  context: number
  steps: number
  /** Median of the whole step (inputs, run, append), and of the session call alone. */
  msPerStep: number
  runMsPerStep: number
  /** The fastest step, and the relative standard deviation of the steps in percent (a shared host shows here). */
  minMs: number
  rsd: number
  /** The host's 1-minute load average when the cell ended (the sweep itself keeps about intraOpThreads busy). */
  load1: number
  /** Per step: inputs copied in, outputs JS receives (see the file's head), and their sum in MB. */
  bytes: { fed: number; fetched: number }
  mbPerStep: number
  /** Whether the capi step wrote its presents into the cache itself (GroupQueryAttention's shared buffer). */
  presentsShared: boolean
}

export interface SweepReport {
  kind: 'context-sweep'
  preset: string
  builderVersion: string
  system: SystemInfo
  options: { forms: Attention[]; contexts: number[]; batches: number[]; steps: number; bigSteps: number; intraOpThreads: number }
  cells: SweepCell[]
  /** Per form, runtime and batch: ms/step at the largest context over ms/step at the smallest. */
  growth: Array<{ form: Attention; runtime: Runtime; batch: number; from: number; to: number; ratio: number }>
}

/** The preset built in `form` under modelsDir/<preset>-<form>, built only when absent or of another builder version. */
export async function ensureForm(modelsDir: string, preset: string, form: Attention, log: (s: string) => void): Promise<string> {
  const dir = resolve(modelsDir, `${preset}-${form}`)
  const marker = join(dir, '.onnxd-bench-build.json')
  const want = { preset, form, builderVersion: BUILDER_VERSION }
  if (existsSync(marker)) {
    try {
      if (JSON.stringify(JSON.parse(readFileSync(marker, 'utf8'))) === JSON.stringify(want)) return dir
    } catch {
      // rebuilt below
    }
  }
  log(`building ${preset} (${form}) into ${dir} ...`)
  await buildModel({ preset, outDir: dir, seed: 0, attention: form })
  writeFileSync(marker, JSON.stringify(want) + '\n')
  return dir
}

const INT_BYTES = { int32: 4, int64: 8 } as const

/** A KvCache of `rows` rows holding `len` random tokens each, without running the model. */
function filledCache(m: LoadedModel, rows: number, len: number, chunk: number): KvCache {
  const sig = m.session.signature
  const kv = new KvCache(kvShapeOf(sig.kv), chunk)
  kv.reserve(rows, len + 1)
  kv.addRows(rows)
  const { heads, headDim, dtype, stacked } = sig.kv
  const n = rows * heads * len * headDim * (stacked ? 2 : 1)
  const data = dtype === 'float16' ? new Uint16Array(n) : new Float32Array(n)
  if (data instanceof Float32Array) for (let i = 0; i < n; i++) data[i] = Math.random() * 0.2 - 0.1
  else for (let i = 0; i < n; i++) data[i] = 0x2e66 // ~0.1 in fp16
  const dims = stacked ? [2, rows, heads, len, headDim] : [rows, heads, len, headDim]
  // append() reads a row's new tokens from slot 0 here whatever the layout: 'in-place' starts at the row's length
  // (0), 'new' and 'appended' at P - n (0).
  const present: KvTensor[] = sig.kv.pastNames.map(() => ({ data, dims }))
  kv.append(present, Array.from({ length: rows }, () => len))
  return kv
}

interface StepResult {
  ms: number
  runMs: number
  fed: number
  fetched: number
  shared: boolean
}

/** One decode step as the batcher's decodeStep makes it, then the rows back to `len` tokens. */
async function step(m: LoadedModel, kv: KvCache, len: number): Promise<StepResult> {
  const session = m.session
  const sig = session.signature
  const t0 = performance.now()
  const rows = kv.rows
  const P = kv.cap
  const x: ForwardInput = { rows, seq: 1, pastLen: P, ids: new Int32Array(rows), mask: new Uint8Array(rows * (P + 1)), positions: new Int32Array(rows), past: kv.past() }
  for (let r = 0; r < rows; r++) {
    x.ids[r] = 3 + ((r * 7919 + len) % (m.vocab - 3))
    x.positions[r] = kv.lens[r]
    kv.maskRow(x.mask, r, 1, 1)
  }
  const greedy = sig.nextToken !== null
  const t1 = performance.now()
  const out = greedy ? await session.forwardGreedy(x) : await session.forward(x, Array.from({ length: rows }, (_, r) => r))
  const t2 = performance.now()
  const shared = out.present.length > 0 && out.present.every((t, i) => t.data === x.past[i].data)
  kv.append(out.present, Array.from({ length: rows }, () => 1))
  for (let r = 0; r < rows; r++) kv.lens[r] = len
  const t3 = performance.now()

  // The mask the runtime copies in: the C runner narrows it to the longest row when the presents share the cache.
  const maskWidth = shared ? len + 1 : P + 1
  const int = (d: { dtype: 'int32' | 'int64' } | null, n: number): number => (d ? n * INT_BYTES[d.dtype] : 0)
  const fed = int(sig.ids, rows) + int(sig.mask, rows * maskWidth) + int(sig.positions, rows)
  const presents = out.present.reduce((s, t, i) => s + (t.data === x.past[i].data ? 0 : t.data.byteLength), 0)
  // The graph's next-token output is int64 [rows, 1]; else every row's logits.
  const outBytes = 'tokens' in out ? rows * 8 : out.logits.byteLength
  return { ms: t3 - t0, runMs: t2 - t1, fed, fetched: outBytes + presents, shared }
}

export async function runSweep(o: SweepOptions): Promise<SweepReport> {
  const log = o.log ?? ((s: string) => process.stdout.write(s + '\n'))
  const contexts = [...o.contexts].sort((a, b) => a - b)
  const batches = [...o.batches].sort((a, b) => a - b)
  const bigSteps = o.bigSteps ?? o.steps
  const threads = o.intraOpThreads ?? 0
  const forms = o.forms ?? [...FORMS]
  const cells: SweepCell[] = []
  for (const form of forms) {
    const dir = await ensureForm(o.modelsDir, o.preset, form, log)
    const models = new Map<Runtime, LoadedModel>()
    try {
      for (const rt of SWEEP_RUNTIMES) {
        const m = await loadModel(dir, { runtime: rt, intraOpThreads: threads })
        if (m.session.runtime !== rt) throw new Error(`runtime ${rt} did not load for ${dir} (it fell back to ${m.session.runtime})`)
        models.set(rt, m)
      }
      for (const batch of batches) {
        for (const context of contexts) {
          if (context < 2) throw new Error(`context ${context} is too short`)
          const big = batch === batches[batches.length - 1] && context === contexts[contexts.length - 1] && batches.length * contexts.length > 1
          const steps = Math.max(1, big ? bigSteps : o.steps)
          const len = context - 1
          // The batcher's chunk where the context is a multiple of it, so the cache is exactly `context` slots wide.
          const chunk = context % KV_CHUNK === 0 ? KV_CHUNK : context
          const res = new Map<Runtime, StepResult[]>(SWEEP_RUNTIMES.map((r) => [r, []]))
          const rounds = 2
          // One cache for both runtimes (the same graph, so the same signature): at 4,096 x 16 on 135m it is 3 GB.
          const kv = filledCache(models.get(SWEEP_RUNTIMES[0])!, batch, len, chunk)
          for (let round = 0; round < rounds; round++) {
            for (const rt of SWEEP_RUNTIMES) {
              const m = models.get(rt)!
              await step(m, kv, len) // warm-up (and the cache's layout settles)
              const n = Math.ceil(steps / rounds)
              for (let i = 0; i < n; i++) res.get(rt)!.push(await step(m, kv, len))
            }
          }
          for (const rt of SWEEP_RUNTIMES) {
            const rs = res.get(rt)!
            const fed = median(rs.map((r) => r.fed))
            const fetched = median(rs.map((r) => r.fetched))
            const cell: SweepCell = {
              form,
              runtime: rt,
              batch,
              context,
              steps: rs.length,
              msPerStep: median(rs.map((r) => r.ms)),
              runMsPerStep: median(rs.map((r) => r.runMs)),
              minMs: Math.min(...rs.map((r) => r.ms)),
              rsd: rsd(rs.map((r) => r.ms)),
              load1: loadavg()[0],
              bytes: { fed, fetched },
              mbPerStep: (fed + fetched) / 1e6,
              presentsShared: rs.every((r) => r.shared),
            }
            cells.push(cell)
            log(`${form.padEnd(5)} ${rt.padEnd(4)} batch ${String(batch).padStart(3)} context ${String(context).padStart(5)}: ${cell.msPerStep.toFixed(2)} ms/step, ${cell.mbPerStep.toFixed(3)} MB/step`)
          }
        }
      }
    } finally {
      for (const m of models.values()) await m.session.dispose()
    }
  }
  const growth: SweepReport['growth'] = []
  const lo = contexts[0]
  const hi = contexts[contexts.length - 1]
  for (const form of forms)
    for (const runtime of SWEEP_RUNTIMES)
      for (const batch of batches) {
        const at = (c: number): SweepCell | undefined => cells.find((x) => x.form === form && x.runtime === runtime && x.batch === batch && x.context === c)
        const a = at(lo)
        const b = at(hi)
        if (a && b) growth.push({ form, runtime, batch, from: lo, to: hi, ratio: b.msPerStep / a.msPerStep })
      }
  return {
    kind: 'context-sweep',
    preset: o.preset,
    builderVersion: BUILDER_VERSION,
    system: systemInfo(),
    options: { forms, contexts, batches, steps: o.steps, bigSteps, intraOpThreads: threads },
    cells,
    growth,
  }
}

export function formatTable(r: SweepReport): string {
  const lines = ['form   runtime  batch  context   ms/step    min ms   rsd   MB/step  shared']
  for (const c of r.cells) {
    lines.push(
      `${c.form.padEnd(6)} ${c.runtime.padEnd(7)} ${String(c.batch).padStart(5)} ${String(c.context).padStart(8)} ${c.msPerStep.toFixed(2).padStart(9)} ${c.minMs.toFixed(2).padStart(9)} ${c.rsd.toFixed(0).padStart(4)}% ${c.mbPerStep.toFixed(3).padStart(9)}  ${c.presentsShared ? 'yes' : 'no'}`,
    )
  }
  if (r.growth.length) {
    lines.push('', 'form   runtime  batch  step(hi)/step(lo)')
    for (const g of r.growth) lines.push(`${g.form.padEnd(6)} ${g.runtime.padEnd(7)} ${String(g.batch).padStart(5)}  ${g.ratio.toFixed(2)} (${g.to}/${g.from})`)
  }
  return lines.join('\n')
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      preset: { type: 'string', default: '135m' },
      forms: { type: 'string', default: FORMS.join(',') },
      contexts: { type: 'string', default: '256,1024,4096' },
      batches: { type: 'string', default: '1,16' },
      steps: { type: 'string', default: '10' },
      'big-steps': { type: 'string' },
      out: { type: 'string' },
      'models-dir': { type: 'string', default: '.cache/models' },
      threads: { type: 'string', default: '0' },
    },
  })
  const list = (s: string): number[] => s.split(',').map((x) => {
    const n = Number(x.trim())
    if (!Number.isInteger(n) || n < 1) throw new Error(`not a positive integer: ${x}`)
    return n
  })
  const forms = values.forms!.split(',').map((f) => f.trim())
  for (const f of forms) if (!FORMS.includes(f as Attention)) throw new Error(`--forms: ${f} is not one of ${FORMS.join(', ')}`)
  const sys = systemInfo()
  printSystem(sys)
  const report = await runSweep({
    preset: values.preset!,
    contexts: list(values.contexts!),
    batches: list(values.batches!),
    forms: forms as Attention[],
    steps: Number(values.steps),
    bigSteps: values['big-steps'] ? Number(values['big-steps']) : undefined,
    modelsDir: values['models-dir']!,
    intraOpThreads: Number(values.threads),
  })
  process.stdout.write('\n' + formatTable(report) + '\n')
  const path = writeReport('context-sweep', report, values.out ? resolve(values.out) : undefined)
  process.stdout.write(`\nwrote ${path}\n`)
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  main().catch((e: unknown) => {
    process.stderr.write(`${(e as Error).stack ?? String(e)}\n`)
    process.exit(1)
  })
}
