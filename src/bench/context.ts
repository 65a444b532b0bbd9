// `onnxd bench context`: the context sweep of issue 12. The decode step time and the bytes crossing JS<->ORT per
// step, for each graph form of a preset (plain-op attention, GroupQueryAttention) and each step runtime of
// DecoderSession ('js': onnxruntime-node's JS API, 'capi': ORT's C API), at each batch and context.
//
// A step is driven the way the batcher's decodeStep drives it: a KvCache of `batch` rows, each holding context - 1
// tokens (random contents, appended in one go rather than prefilled), one new token per row (so the step attends
// over `context` positions), the graph's next-token output when it has one (else every row's logits), then the new
// rows appended to the cache. After each step the rows' lengths go back to context - 1, so every timed step runs at
// the same context. Per cell the runtimes alternate (js, capi, js, capi), each round a warm-up step then half the
// steps; ms/step is the median of the timed steps (the whole step: inputs, run, append).
//
// Bytes per step are counted from what the session actually fed and fetched in that step, not from a list of inputs:
// on 'js' from each onnxruntime-node session.run (refs/ort.ts probeJsRuns), on 'capi' from the tensors bound to the
// runner's IoBinding when the step ran (probeBindings below; JS writes or reads each bound buffer every step). `fed` = every input but the past KV (both runtimes read the past in
// place over the KvCache's memory); `fetched` = every output JS receives: on 'js' each output onnxruntime-node
// returns (each a fresh copy), on 'capi' each output bound to a buffer JS then reads, but not a present bound onto
// its own past tensor (GroupQueryAttention's shared buffer: nothing crosses). MB/step = (fed + fetched) / 1e6.
// Imports: the builder (through bundles.ts), the engine's model loader, KV cache and C API binding (through its
// bench surface).
import { loadavg } from 'node:os'
import { join, resolve } from 'node:path'
import { parseArgs } from 'node:util'
import { ATTENTION_FORMS, BUILDER_VERSION, type Attention } from '../builder/index.js'
import { Binding, KV_CHUNK, KvCache, kvShapeOf, loadModel, RUNTIMES, type ForwardInput, type KvRows, type KvTensor, type LoadedModel, type Runtime, type Tensor } from '../engine/bench-surface.js'
import { OnnxdError } from '../shared/errors.js'
import { PROVIDERS, type Provider } from '../shared/model.js'
import { ensureBundle } from './bundles.js'
import { probeJsRuns } from './refs/ort.js'
import { writeJson } from './report.js'
import { median, rsd } from './stats.js'
import { stamp, systemInfo, type SystemInfo } from './system.js'

export interface SweepOptions {
  preset: string
  contexts: number[]
  batches: number[]
  forms: Attention[]
  runtimes: Runtime[]
  /** Timed steps per runtime and cell. */
  steps: number
  /** Timed steps for the cells at the largest batch and context (the slow ones); default `steps`. */
  bigSteps?: number
  modelsDir: string
  intraOpThreads?: number
  /** Execution provider of the sessions (default cpu); capi on webgpu keeps the cache on the device (cuda, tensorrt: js only). */
  provider?: Provider
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
  /** Per step, by input or output name (what the session fed and fetched). */
  fedByName: Record<string, number>
  fetchedByName: Record<string, number>
  mbPerStep: number
  /** Whether the step's presents were written into the cache itself (GroupQueryAttention's shared buffer). */
  presentsShared: boolean
}

export interface SweepReport {
  kind: 'context-sweep'
  created: string
  preset: string
  builderVersion: string
  system: SystemInfo
  options: { forms: Attention[]; runtimes: Runtime[]; contexts: number[]; batches: number[]; steps: number; bigSteps: number; intraOpThreads: number; provider: Provider }
  cells: SweepCell[]
  /** Per form, runtime and batch: ms/step at the largest context over ms/step at the smallest. */
  growth: Array<{ form: Attention; runtime: Runtime; batch: number; from: number; to: number; ratio: number }>
}

/** A KvCache of `rows` rows holding `len` random tokens each, without running the model. */
export function filledCache(m: LoadedModel, rows: number, len: number, chunk: number): KvCache {
  const sig = m.session.signature
  const kv = new KvCache(kvShapeOf(sig.kv), chunk)
  kv.reserve(rows, len + 1)
  kv.addRows(rows)
  const { heads, headDim, dtype, stacked } = sig.kv
  const n = rows * heads * len * headDim * (stacked ? 2 : 1)
  const data = dtype === 'float16' ? new Uint16Array(n) : new Float32Array(n)
  if (data instanceof Float32Array) for (let i = 0; i < n; i++) data[i] = Math.random() * 0.2 - 0.1
  else data.fill(0x2e66) // ~0.1 in fp16
  const dims = stacked ? [2, rows, heads, len, headDim] : [rows, heads, len, headDim]
  // append() reads a row's new tokens from slot 0 here whatever the layout: 'in-place' starts at the row's length
  // (0), 'new' and 'appended' at P - n (0).
  const present: KvTensor[] = sig.kv.pastNames.map(() => ({ data, dims }))
  kv.append(present, Array.from({ length: rows }, () => len))
  return kv
}

/**
 * A device cache (runtime 'capi' on a GPU provider) of `rows` rows holding `len` tokens each: their lengths set, their
 * device memory as allocated (contents undefined, which a step's time does not depend on).
 */
export function filledDeviceCache(m: LoadedModel, rows: number, len: number): KvRows {
  const kv = m.session.deviceKv({ budgetBytes: rows * (len + 64) * m.kvBytesPerToken, maxRows: rows, contextLength: len + 1 })
  if (!kv) throw new Error('this session keeps its cache in host memory')
  kv.reserve(rows, len + 1)
  kv.addRows(rows)
  kv.append([], Array.from({ length: rows }, () => len))
  return kv
}

export interface Traffic {
  fed: Record<string, number>
  fetched: Record<string, number>
  /** Outputs bound onto a tensor also bound as an input (nothing crossed). */
  shared: string[]
}

/**
 * Watches every C API IoBinding in this thread until `restore()`: which tensor is bound to each input and output
 * name (a runner may keep its bindings across steps and rebind only what changed), and at each run a snapshot of
 * what that binding holds. take() returns the last run's: every bound input, every bound output JS reads, and the
 * outputs bound onto one of the step's input tensors (nothing crosses for those).
 */
function probeBindings(): { take(): Traffic; restore(): void } {
  const proto = Binding.prototype
  const orig = { bindInput: proto.bindInput, bindOutput: proto.bindOutput, clearInputs: proto.clearInputs, clearOutputs: proto.clearOutputs, run: proto.run }
  const state = new WeakMap<Binding, { ins: Map<string, Tensor>; outs: Map<string, Tensor> }>()
  const of = (b: Binding): { ins: Map<string, Tensor>; outs: Map<string, Tensor> } => {
    let st = state.get(b)
    if (!st) state.set(b, (st = { ins: new Map(), outs: new Map() }))
    return st
  }
  let last: Traffic = { fed: {}, fetched: {}, shared: [] }
  const snapshot = (b: Binding): void => {
    const { ins, outs } = of(b)
    const bound = new Set(ins.values())
    last = { fed: {}, fetched: {}, shared: [] }
    for (const [n, t] of ins) last.fed[n] = t.bytes
    for (const [n, t] of outs) {
      if (bound.has(t)) last.shared.push(n)
      else last.fetched[n] = t.bytes
    }
  }
  proto.bindInput = function (this: Binding, name: string, t: Tensor) {
    const r = orig.bindInput.call(this, name, t)
    of(this).ins.set(name, t)
    return r
  }
  proto.bindOutput = function (this: Binding, name: string, t: Tensor) {
    const r = orig.bindOutput.call(this, name, t)
    of(this).outs.set(name, t)
    return r
  }
  proto.clearInputs = function (this: Binding) {
    orig.clearInputs.call(this)
    of(this).ins.clear()
  }
  proto.clearOutputs = function (this: Binding) {
    orig.clearOutputs.call(this)
    of(this).outs.clear()
  }
  proto.run = function (this: Binding) {
    snapshot(this)
    orig.run.call(this)
  }
  return {
    take: () => {
      const r = last
      last = { fed: {}, fetched: {}, shared: [] }
      return r
    },
    restore: () => void Object.assign(proto, orig),
  }
}

export interface StepResult {
  ms: number
  runMs: number
  fed: Record<string, number>
  fetched: Record<string, number>
  shared: boolean
}

const sum = (r: Record<string, number>): number => Object.values(r).reduce((a, b) => a + b, 0)

/** One decode step as the batcher's decodeStep makes it (`len` seeds the ids), then each row back to its length. */
export async function sweepStep(m: LoadedModel, kv: KvRows, len: number, probe: () => Traffic): Promise<StepResult> {
  const session = m.session
  const sig = session.signature
  const t0 = performance.now()
  const rows = kv.rows
  const lens = kv.lens.slice(0, rows)
  const P = kv.cap
  // As the batcher's decodeStep: each row's length once its new token is in, and a mask only for a graph that
  // reads one (a graph fed GroupQueryAttention's lengths may not).
  const masked = sig.mask !== null
  const lengths = new Int32Array(rows)
  const device = session.deviceResident
  const x: ForwardInput = { rows, seq: 1, pastLen: P, ids: new Int32Array(rows), mask: new Uint8Array(masked && !device ? rows * (P + 1) : 0), lengths, positions: new Int32Array(rows), past: kv.past(), cache: kv }
  for (let r = 0; r < rows; r++) {
    x.ids[r] = 3 + ((r * 7919 + len) % (m.vocab - 3))
    x.positions[r] = kv.lens[r]
    lengths[r] = kv.lens[r] + 1
    if (masked) kv.maskRow(x.mask, r, 1, 1)
  }
  const greedy = sig.nextToken !== null
  const t1 = performance.now()
  const out = greedy ? await session.forwardGreedy(x) : await session.forward(x, Array.from({ length: rows }, (_, r) => r))
  const t2 = performance.now()
  const probed = probe()
  // A device cache: the step's own count of what crossed (its inputs, its outputs); the cache never leaves the device.
  const traffic: Traffic = device ? { fed: { inputs: out.traffic.in }, fetched: { outputs: out.traffic.out }, shared: sig.kv.presentNames } : probed
  const shared = device || (out.present.length > 0 && out.present.every((t, i) => t.data === x.past[i].data))
  kv.append(out.present, Array.from({ length: rows }, () => 1))
  for (let r = 0; r < rows; r++) kv.lens[r] = lens[r]
  const t3 = performance.now()
  // The past is read in place over the cache by both runtimes: not a byte crosses for it.
  const past = new Set(sig.kv.pastNames)
  const fed = Object.fromEntries(Object.entries(traffic.fed).filter(([n]) => !past.has(n)))
  return { ms: t3 - t0, runMs: t2 - t1, fed, fetched: traffic.fetched, shared }
}

/** Per name, the median over the steps. */
function medianByName(rs: Record<string, number>[]): Record<string, number> {
  const names = [...new Set(rs.flatMap((r) => Object.keys(r)))]
  return Object.fromEntries(names.map((n) => [n, median(rs.map((r) => r[n] ?? 0))]))
}

export async function runSweep(o: SweepOptions): Promise<SweepReport> {
  const log = o.log ?? ((s: string) => process.stderr.write(s + '\n'))
  const created = new Date()
  const contexts = [...o.contexts].sort((a, b) => a - b)
  const batches = [...o.batches].sort((a, b) => a - b)
  const bigSteps = o.bigSteps ?? o.steps
  const threads = o.intraOpThreads ?? 0
  const cells: SweepCell[] = []
  const js = probeJsRuns()
  const capi = probeBindings()
  try {
    for (const form of o.forms) {
      const dir = await ensureBundle(o.modelsDir, o.preset, form, log)
      const models = new Map<Runtime, LoadedModel>()
      try {
        for (const rt of o.runtimes) {
          const m = await loadModel(dir, { runtime: rt, intraOpThreads: threads, provider: o.provider ?? 'cpu' })
          models.set(rt, m)
          if (m.session.runtime !== rt) throw new Error(`runtime ${rt} did not load for ${dir} (it fell back to ${m.session.runtime})`)
        }
        js.take()
        capi.take()
        const probe = (rt: Runtime) => (): Traffic => {
          const j = js.take()
          const c = capi.take()
          return rt === 'capi' ? c : { ...j, shared: [] }
        }
        for (const batch of batches) {
          for (const context of contexts) {
            const big = batch === batches[batches.length - 1] && context === contexts[contexts.length - 1] && batches.length * contexts.length > 1
            const steps = Math.max(1, big ? bigSteps : o.steps)
            const len = context - 1
            // The batcher's chunk where the context is a multiple of it, so the cache is exactly `context` slots wide.
            const chunk = context % KV_CHUNK === 0 ? KV_CHUNK : context
            const res = new Map<Runtime, StepResult[]>(o.runtimes.map((r) => [r, []]))
            const rounds = 2
            // One host cache for every runtime that reads one (the same graph, so the same signature): at 4,096 x 16
            // on 135m it is 3 GB. A runtime that keeps its cache on the device has its own there.
            const host = o.runtimes.some((rt) => !models.get(rt)!.session.deviceResident) ? filledCache(models.get(o.runtimes[0])!, batch, len, chunk) : null
            const caches = new Map<Runtime, KvRows>(o.runtimes.map((rt) => [rt, models.get(rt)!.session.deviceResident ? filledDeviceCache(models.get(rt)!, batch, len) : host!]))
            for (let round = 0; round < rounds; round++) {
              for (const rt of o.runtimes) {
                const m = models.get(rt)!
                const kv = caches.get(rt)!
                await sweepStep(m, kv, len, probe(rt)) // warm-up (and the cache's layout settles)
                const n = Math.ceil(steps / rounds)
                for (let i = 0; i < n; i++) res.get(rt)!.push(await sweepStep(m, kv, len, probe(rt)))
              }
            }
            for (const kv of caches.values()) {
              kv.clear()
              kv.release()
            }
            for (const rt of o.runtimes) {
              const rs = res.get(rt)!
              const fedByName = medianByName(rs.map((r) => r.fed))
              const fetchedByName = medianByName(rs.map((r) => r.fetched))
              const fed = sum(fedByName)
              const fetched = sum(fetchedByName)
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
                fedByName,
                fetchedByName,
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
  } finally {
    js.restore()
    capi.restore()
  }
  const growth: SweepReport['growth'] = []
  const lo = contexts[0]
  const hi = contexts[contexts.length - 1]
  for (const form of o.forms)
    for (const runtime of o.runtimes)
      for (const batch of batches) {
        const at = (c: number): SweepCell | undefined => cells.find((x) => x.form === form && x.runtime === runtime && x.batch === batch && x.context === c)
        const a = at(lo)
        const b = at(hi)
        if (a && b && hi !== lo) growth.push({ form, runtime, batch, from: lo, to: hi, ratio: b.msPerStep / a.msPerStep })
      }
  return {
    kind: 'context-sweep',
    created: created.toISOString(),
    preset: o.preset,
    builderVersion: BUILDER_VERSION,
    system: systemInfo(),
    options: { forms: o.forms, runtimes: o.runtimes, contexts, batches, steps: o.steps, bigSteps, intraOpThreads: threads, provider: o.provider ?? 'cpu' },
    cells,
    growth,
  }
}

export function formatSweep(r: SweepReport): string {
  const lines = ['form   runtime  batch  context   ms/step    min ms   rsd  load   MB/step     bytes/step  shared']
  for (const c of r.cells) {
    lines.push(
      `${c.form.padEnd(6)} ${c.runtime.padEnd(7)} ${String(c.batch).padStart(5)} ${String(c.context).padStart(8)} ${c.msPerStep.toFixed(2).padStart(9)} ${c.minMs.toFixed(2).padStart(9)} ${c.rsd.toFixed(0).padStart(4)}% ${c.load1.toFixed(1).padStart(5)} ${c.mbPerStep.toFixed(3).padStart(9)} ${String(c.bytes.fed + c.bytes.fetched).padStart(14)}  ${c.presentsShared ? 'yes' : 'no'}`,
    )
  }
  if (r.growth.length) {
    lines.push('', 'form   runtime  batch  step(hi)/step(lo)')
    for (const g of r.growth) lines.push(`${g.form.padEnd(6)} ${g.runtime.padEnd(7)} ${String(g.batch).padStart(5)}  ${g.ratio.toFixed(2)} (${g.to}/${g.from})`)
  }
  return lines.join('\n') + '\n'
}

export const CONTEXT_USAGE = `usage: onnxd bench context [options]

The context sweep: decode step time (median, min, RSD) and bytes crossing JS<->ORT per step, for each graph form
of a preset and each step runtime, at each batch and context; step(hi)/step(lo) per form, runtime and batch. Prints
a table and writes bench/results/context-<time>.json (see docs/benchmarks.md).

  --preset NAME          builder preset (default 135m), built once per form into --models-dir
  --forms LIST           graph forms: plain, gqa (default plain,gqa)
  --runtimes LIST        step runtimes: js, capi (default js,capi; js on cuda and tensorrt)
  --provider NAME        execution provider: cpu (default), webgpu, cuda, tensorrt (capi runs on cpu and webgpu,
                         where it keeps the cache on the device)
  --contexts LIST        contexts in tokens, each >= 2 (default 256,1024,4096)
  --batches LIST         batch sizes (default 1,16)
  --steps N              timed steps per runtime and cell (default 10)
  --big-steps N          timed steps at the largest batch and context (default --steps)
  --threads N            ORT intra-op threads (default 0: all cores)
  --models-dir DIR       where presets are built (default .cache/models, shared with onnxd bench)
  --out DIR              report directory (default bench/results)
  --quiet, -q            no per-cell lines on stderr
`

/** Reads `onnxd bench context` flags; lists every problem at once. Null for --help. */
export function contextOptions(argv: string[]): (SweepOptions & { outDir: string; quiet: boolean }) | null {
  let v
  try {
    v = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        preset: { type: 'string', default: '135m' },
        forms: { type: 'string', default: ATTENTION_FORMS.join(',') },
        runtimes: { type: 'string' },
        provider: { type: 'string', default: 'cpu' },
        contexts: { type: 'string', default: '256,1024,4096' },
        batches: { type: 'string', default: '1,16' },
        steps: { type: 'string', default: '10' },
        'big-steps': { type: 'string' },
        threads: { type: 'string', default: '0' },
        'models-dir': { type: 'string', default: '.cache/models' },
        out: { type: 'string', default: 'bench/results' },
        quiet: { type: 'boolean', short: 'q' },
        help: { type: 'boolean', short: 'h' },
      },
    }).values
  } catch (e) {
    throw new OnnxdError('config', `${(e as Error).message}\n\n${CONTEXT_USAGE}`)
  }
  if (v.help) return null
  const problems: string[] = []
  const ints = (flag: string, text: string, min: number): number[] => {
    const xs = text.split(',').map((s) => Number(s.trim()))
    if (xs.some((x) => !Number.isInteger(x) || x < min)) problems.push(`--${flag} must be a comma-separated list of integers >= ${min}. Given: ${text.slice(0, 64)}`)
    return xs
  }
  const names = <T extends string>(flag: string, text: string, allowed: readonly T[]): T[] => {
    const xs = [...new Set(text.split(',').map((s) => s.trim()))]
    if (xs.some((x) => !allowed.includes(x as T))) problems.push(`--${flag} must be a comma-separated list of ${allowed.join(', ')}. Given: ${text.slice(0, 64)}`)
    return xs as T[]
  }
  const one = (flag: string, text: string | undefined, min: number): number | undefined => (text === undefined ? undefined : ints(flag, text, min)[0])
  const provider = names('provider', v.provider!, PROVIDERS)[0]
  const capiHere = provider === 'cpu' || provider === 'webgpu'
  const runtimes = names('runtimes', v.runtimes ?? (capiHere ? RUNTIMES.join(',') : 'js'), RUNTIMES)
  if (!capiHere && runtimes.includes('capi')) problems.push(`--runtimes capi runs on the cpu and webgpu providers only (--provider ${provider} runs js)`)
  const o = {
    preset: v.preset!,
    forms: names('forms', v.forms!, ATTENTION_FORMS),
    runtimes,
    provider,
    contexts: ints('contexts', v.contexts!, 2),
    batches: ints('batches', v.batches!, 1),
    steps: one('steps', v.steps, 1)!,
    bigSteps: one('big-steps', v['big-steps'], 1),
    intraOpThreads: one('threads', v.threads, 0),
    modelsDir: resolve(v['models-dir']!),
    outDir: resolve(v.out!),
    quiet: v.quiet === true,
  }
  if (problems.length) throw new OnnxdError('config', `invalid bench context options:\n  - ${problems.join('\n  - ')}`)
  return o
}

/** Runs the sweep, writes <outDir>/context-<time>.json; returns the report and the path. */
export async function runContextCommand(o: SweepOptions & { outDir: string }): Promise<{ report: SweepReport; path: string }> {
  const report = await runSweep(o)
  const path = join(o.outDir, `context-${stamp(new Date(report.created))}.json`)
  writeJson(report, path)
  return { report, path }
}

