// The benchmark's references measured through ONNX Runtime alone: the raw decode ceiling (one batched decode
// step at batch B over a past of the scenario's length, session.run and nothing else, giving B/step tokens/s;
// plus one prompt's prefill) and this machine's matrix-multiply peak (a one-node MatMul graph built in memory).
// In src/, this module and the engine's session.ts are the only importers of onnxruntime-node (the architecture
// test lists this exception; the script bench/engine.bench.ts is the one outside src/): the ceiling must be ORT
// without onnxd's wrapper, or it would measure onnxd against itself. It runs the same graph onnxd runs (the
// exported one with prepareDecoderGraph's rewrites) and fetches what the engine fetches (with greedy decoding,
// each row's next token rather than the logits), so the ceiling is the best this graph gives in ORT, not the
// export's slower full-cache outputs. profileDecode runs the same steps with ORT's profiler on (profile.ts).
import { readdirSync, rmSync } from 'node:fs'
import { basename, dirname, join } from 'node:path'
import * as ort from 'onnxruntime-node'
import { DataType, encodeModel, externalDataConfig, LOGITS_AT_INPUT, prepareDecoderFile } from '../../engine/bench-surface.js'
import { median, rsd } from '../stats.js'
import { decodeOpsOf, profilePrefix, PROFILE_WARMUP, PROFILED_STEPS, type DecodeOps } from './profile.js'

export interface StepTiming {
  /** Median milliseconds of one session.run. */
  ms: number
  /** Relative standard deviation of the timed runs, percent. */
  rsd: number
  runs: number
}

export interface DecodeCeiling extends StepTiming {
  batch: number
  past: number
  /** batch / step seconds. */
  tokens_per_s: number
}

export interface PrefillTiming extends StepTiming {
  prompt: number
  /** Prompts prefilled together in the timed run (as many as fit the engine's per-step token budget). */
  rows: number
  /** rows x prompt / step seconds. */
  tokens_per_s: number
}

export interface MatmulPoint extends StepTiming {
  size: number
  gflops: number
}

export interface TimingBudget {
  /** Untimed runs first. */
  warmup: number
  /** At least this many timed runs... */
  minRuns: number
  /** ...and more while the timed total is under this many seconds (at most `maxRuns`). */
  minSeconds: number
  maxRuns: number
}

export async function time(run: () => Promise<unknown>, b: TimingBudget): Promise<StepTiming> {
  for (let i = 0; i < b.warmup; i++) await run()
  const xs: number[] = []
  let total = 0
  while (xs.length < b.minRuns || (total < b.minSeconds * 1000 && xs.length < b.maxRuns)) {
    const t0 = performance.now()
    await run()
    const dt = performance.now() - t0
    xs.push(dt)
    total += dt
  }
  return { ms: median(xs), rsd: rsd(xs), runs: xs.length }
}

const sessionOptions = (threads: number, provider = 'cpu'): ort.InferenceSession.SessionOptions => ({
  executionProviders: [provider],
  graphOptimizationLevel: 'all',
  intraOpNumThreads: threads,
  interOpNumThreads: 1,
  executionMode: 'sequential',
  logSeverityLevel: 3,
})

type Meta = ort.InferenceSession.TensorValueMetadata

/** The decoder's cache layout, read from the session (past_key_values.<i>.key|value, or stacked past_<i>). */
interface Layout {
  pasts: { name: string; dims: (b: number, p: number) => number[]; fp16: boolean }[]
  ids: Meta['type']
  mask: Meta['type'] | null
  positions: Meta['type'] | null
  /** A GroupQueryAttention graph as the engine rewrites it: the fed row lengths (int32 [batch], each length - 1) and
   * total length (int32 scalar), by input name; null for a plain-op graph. */
  lengths: { seqlens: string; total: string } | null
  /** The input naming the positions whose logits the step computes (decoder-graph.ts positionLogits), or null. */
  logitsAt: string | null
}

function layout(s: ort.InferenceSession): Layout {
  const ins = new Map(s.inputMetadata.filter((m) => m.isTensor).map((m) => [m.name, m as Meta]))
  const pasts = [...ins.values()]
    .filter((m) => m.name.startsWith('past_'))
    .map((m) => {
      const sh = m.shape
      const [h, d] = [sh[sh.length - 3] as number, sh[sh.length - 1] as number]
      const stacked = sh.length === 5
      return { name: m.name, fp16: m.type === 'float16', dims: (b: number, p: number) => (stacked ? [2, b, h, p, d] : [b, h, p, d]) }
    })
  if (!pasts.length || !ins.has('input_ids')) throw new Error('not a decoder with a KV cache (input_ids, past_*)')
  const seqlens = [...ins.keys()].find((n) => n.endsWith('seqlens_k'))
  const total = [...ins.keys()].find((n) => n.endsWith('total_sequence_length'))
  const lengths = seqlens && total ? { seqlens, total } : null
  return { pasts, ids: ins.get('input_ids')!.type, mask: ins.get('attention_mask')?.type ?? null, positions: ins.get('position_ids')?.type ?? null, lengths, logitsAt: ins.has(LOGITS_AT_INPUT) ? LOGITS_AT_INPUT : null }
}

function intTensor(type: Meta['type'], n: number, value: (i: number) => number, dims: number[]): ort.Tensor {
  if (type === 'int32') return new ort.Tensor('int32', Int32Array.from({ length: n }, (_, i) => value(i)), dims)
  const a = new BigInt64Array(n)
  for (let i = 0; i < n; i++) a[i] = BigInt(value(i))
  return new ort.Tensor('int64', a, dims)
}

/** Feeds for one step of `batch` rows × `seq` new tokens on a past of `past` positions (cache values small, not zero);
 * the first `masked` past positions masked out (the engine's one dummy slot before a plain graph's prefill on webgpu). */
function feeds(l: Layout, batch: number, seq: number, past: number, masked = 0): Record<string, ort.Tensor> {
  const f: Record<string, ort.Tensor> = {}
  f.input_ids = intTensor(l.ids, batch * seq, (i) => 3 + ((i * 7919) % 251), [batch, seq])
  if (l.mask) f.attention_mask = intTensor(l.mask, batch * (past + seq), (i) => (i % (past + seq) < masked ? 0 : 1), [batch, past + seq])
  if (l.lengths) {
    f[l.lengths.seqlens] = new ort.Tensor('int32', new Int32Array(batch).fill(past + seq - 1), [batch])
    f[l.lengths.total] = new ort.Tensor('int32', Int32Array.of(past + seq), [])
  }
  if (l.positions) f.position_ids = intTensor(l.positions, batch * seq, (i) => past - masked + (i % seq), [batch, seq])
  // The engine's graph computes logits at the positions a step names: a step names its last.
  if (l.logitsAt) f[l.logitsAt] = intTensor('int64', 1, () => seq - 1, [1])
  for (const p of l.pasts) {
    const dims = p.dims(batch, past)
    const n = dims.reduce((a, b) => a * b, 1)
    if (p.fp16) f[p.name] = new ort.Tensor('float16', new Uint16Array(n).fill(0x2e66), dims) // 0.1 in fp16
    else f[p.name] = new ort.Tensor('float32', new Float32Array(n).fill(0.1), dims)
  }
  return f
}

/**
 * Row lengths of a continuous batch: `rows` rows spread evenly over `spread` positions around `past`, from
 * past - floor(spread / 2) (all `past` for a spread of 0). Rows that joined at different steps hold different lengths;
 * GroupQueryAttention on the CPU runs such a batch slower than one whose rows are all alike (docs/benchmarks.md).
 */
export function spreadLengths(rows: number, past: number, spread: number): number[] {
  return Array.from({ length: rows }, (_, r) => past - Math.floor(spread / 2) + Math.floor((r * spread) / rows))
}

export interface CeilingOptions {
  onnxPath: string
  batches: number[]
  /** Past length of the timed decode steps (the scenario's mean context while decoding). */
  past: number
  /** Prompt length of the timed prefill. */
  prompt: number
  /** Prompts per timed prefill run. */
  prefillRows: number
  threads: number
  /** Execution provider of the session (default cpu). */
  provider?: string
  /** Greedy decoding: decode steps fetch each row's next token (the graph's argmax) instead of the logits, as the
   * engine does when every row is greedy. */
  greedy: boolean
  budget: TimingBudget
  onStep?(what: string): void
  /** The file's 4-bit weights on int8 kernels, as a node with --nbits-as-int8 runs them. */
  nbitsAsInt8?: boolean
}

/**
 * A session over the graph onnxd runs for `onnxPath` (prepareDecoderFile's rewrites), with what a decode step fetches:
 * each row's next token when greedy and the graph has it, else every output.
 */
async function openCeiling(onnxPath: string, greedy: boolean, options: ort.InferenceSession.SessionOptions, nbitsAsInt8?: boolean): Promise<{ s: ort.InferenceSession; fetches: readonly string[] }> {
  const g = prepareDecoderFile(onnxPath, { nbitsAsInt8 })
  const s = g.rewritten ? await ort.InferenceSession.create(g.model, { ...options, extra: externalDataConfig(onnxPath) }) : await ort.InferenceSession.create(onnxPath, options)
  return { s, fetches: greedy && g.nextToken ? s.outputNames.filter((n) => n !== 'logits') : s.outputNames }
}

export async function measureCeiling(o: CeilingOptions): Promise<{ decode: DecodeCeiling[]; prefill: PrefillTiming }> {
  const provider = o.provider ?? 'cpu'
  const { s, fetches } = await openCeiling(o.onnxPath, o.greedy, sessionOptions(o.threads, provider), o.nbitsAsInt8)
  try {
    const l = layout(s)
    o.onStep?.(`prefill ${o.prefillRows} x ${o.prompt}`)
    // ORT's WebGPU provider crashes on a plain-op graph's step over an empty past; the engine feeds one masked slot
    // there (src/engine/model/empty-past.ts), and so does the ceiling.
    const slot = provider === 'webgpu' && !l.lengths ? 1 : 0
    const pf = feeds(l, o.prefillRows, o.prompt, slot, slot)
    const p = await time(() => s.run(pf), o.budget)
    const prefill: PrefillTiming = { prompt: o.prompt, rows: o.prefillRows, ...p, tokens_per_s: (o.prefillRows * o.prompt) / (p.ms / 1000) }
    const decode: DecodeCeiling[] = []
    for (const batch of o.batches) {
      o.onStep?.(`decode batch ${batch}`)
      const f = feeds(l, batch, 1, o.past)
      const t = await time(() => s.run(f, fetches), o.budget)
      decode.push({ batch, past: o.past, ...t, tokens_per_s: batch / (t.ms / 1000) })
    }
    return { decode, prefill }
  } finally {
    await s.release()
  }
}

/**
 * ORT alone's decode step at each of `o.batches` by operator type, through onnxruntime-node (plain-op graphs, whose
 * ceiling runs here), from a session of its own with ORT's profiler on. onnxruntime-node's endProfiling() names no
 * file: the trace is the one file under this process's prefix, removed after reading.
 */
export async function profileDecode(o: Pick<CeilingOptions, 'onnxPath' | 'threads' | 'batches' | 'past' | 'greedy' | 'nbitsAsInt8'>): Promise<DecodeOps[]> {
  const prefix = profilePrefix()
  const traces = (): string[] => readdirSync(dirname(prefix)).filter((f) => f.startsWith(basename(prefix))).map((f) => join(dirname(prefix), f))
  const { s, fetches } = await openCeiling(o.onnxPath, o.greedy, { ...sessionOptions(o.threads), enableProfiling: true, profileFilePrefix: prefix }, o.nbitsAsInt8)
  try {
    const l = layout(s)
    for (const batch of o.batches) {
      const f = feeds(l, batch, 1, o.past)
      for (let i = 0; i < PROFILE_WARMUP + PROFILED_STEPS; i++) await s.run(f, fetches)
    }
    s.endProfiling()
    const files = traces()
    if (files.length !== 1) throw new Error(`expected one ORT profile under ${prefix}, found ${files.length}`)
    return decodeOpsOf(files[0], o.batches)
  } finally {
    await s.release()
    // A run that failed left the profile to be written at release.
    for (const f of traces()) rmSync(f, { force: true })
  }
}

/** A one-node graph Y = MatMul(A, B), A [n, n], B [n, n] float32, serialized in memory. */
export function matmulModel(n: number): Uint8Array {
  const vi = (name: string): { name: string; type: { tensor_type: { elem_type: number; shape: { dim: { dim_value: number }[] } } } } => ({
    name,
    type: { tensor_type: { elem_type: DataType.FLOAT, shape: { dim: [{ dim_value: n }, { dim_value: n }] } } },
  })
  return encodeModel({
    ir_version: 8,
    opset_import: [{ domain: '', version: 17 }],
    producer_name: 'onnxd-bench',
    producer_version: '1',
    graph: { name: 'matmul', node: [{ name: 'mm', op_type: 'MatMul', input: ['A', 'B'], output: ['Y'] }], initializer: [], input: [vi('A'), vi('B')], output: [vi('Y')] },
  })
}

/** GFLOP/s of square float32 MatMuls through ORT at each size (2n³ flops per run); the peak is the best of them. */
export async function measureMatmulPeak(sizes: number[], threads: number, budget: TimingBudget, onStep?: (what: string) => void): Promise<{ gflops: number; points: MatmulPoint[] }> {
  const points: MatmulPoint[] = []
  for (const n of sizes) {
    onStep?.(`matmul ${n}`)
    const s = await ort.InferenceSession.create(matmulModel(n), sessionOptions(threads))
    try {
      const a = new Float32Array(n * n).map((_, i) => ((i % 97) - 48) / 97)
      const f = { A: new ort.Tensor('float32', a, [n, n]), B: new ort.Tensor('float32', a.slice(), [n, n]) }
      const t = await time(() => s.run(f), budget)
      points.push({ size: n, ...t, gflops: (2 * n ** 3) / (t.ms / 1000) / 1e9 })
    } finally {
      await s.release()
    }
  }
  return { gflops: Math.max(...points.map((p) => p.gflops)), points }
}

/** What one or more session.run calls moved: bytes of each input fed and of every output returned, by name. */
export interface JsTraffic {
  fed: Record<string, number>
  fetched: Record<string, number>
}

/**
 * Records what every onnxruntime-node session.run in this process feeds and gets back, until `restore()`: the
 * context sweep's count of the bytes crossing JS<->ORT on the JS path, taken from the call itself rather than from
 * a list of the inputs the engine is believed to feed.
 */
export function probeJsRuns(): { take(): JsTraffic; restore(): void } {
  // InferenceSession is a class at run time; its type only declares the factory.
  const proto = (ort.InferenceSession as unknown as { prototype: ort.InferenceSession }).prototype
  const orig = proto.run
  let t: JsTraffic = { fed: {}, fetched: {} }
  const bytes = (v: unknown): number => ((v as ort.Tensor | undefined)?.data as ArrayBufferView | undefined)?.byteLength ?? 0
  proto.run = async function (this: ort.InferenceSession, ...args: Parameters<typeof orig>) {
    for (const [name, v] of Object.entries(args[0])) t.fed[name] = (t.fed[name] ?? 0) + bytes(v)
    const out = await orig.apply(this, args)
    for (const [name, v] of Object.entries(out)) t.fetched[name] = (t.fetched[name] ?? 0) + bytes(v)
    return out
  } as typeof orig
  return {
    take: () => {
      const r = t
      t = { fed: {}, fetched: {} }
      return r
    },
    restore: () => void (proto.run = orig),
  }
}
