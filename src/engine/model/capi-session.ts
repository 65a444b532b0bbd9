// The C-API step runner behind DecoderSession (runtime 'capi'): the same graph bytes and inputs as the JS path,
// run through ORT's C API (ort-capi.ts) on an IoBinding whose outputs are bound to buffers this runner keeps and
// reuses across steps (grown when a step's outputs are larger), so a step makes no fresh JS buffer per output.
// Past KV inputs are bound in place over the engine's own KvCache memory (no copy in). The outputs a step returns
// are views over the reused buffers: valid until the next step, which the batcher honours (it reads logits and
// appends presents before it starts another step). Imports: ort-capi and engine model types only.
import { OnnxdError } from '../../shared/errors.js'
import { NativeBuffer, OrtCApi, type Binding, type CSession, type DeviceTensor, type ElementType, type RunOptions, type Tensor } from './ort-capi.js'
import { DeviceCaches, DeviceKv } from './device-kv.js'
import { CapturedStep, eagerRunOptions, type CapturedInputs } from './captured-step.js'
import { AttrType, DataType, encodeModel, type Node, type ValueInfo } from './onnx-proto.js'
import type { ForwardInput, KvData, Signature, StepTraffic } from './step-io.js'
import { MASK_INPUTS } from './decoder-graph.js'
import { rowLengths, seqlensK } from './step-lengths.js'

/** One output of a step, viewed over the runner's buffer (or the JS API's fresh one). */
export interface StepValue {
  data: KvData | BigInt64Array
  dims: number[]
}

export interface NativeGateLike {
  enter(): boolean
  exit(): void
}

/** This thread's C API by library path (undefined: onnxruntime-node's), or why it could not load. */
const apis = new Map<string | undefined, OrtCApi | string>()

/**
 * This thread's C API over `libraryPath` (default: onnxruntime-node's libonnxruntime), loaded at first use and kept
 * for the thread's life; null where it cannot load, with the reason emitted once (as a process warning) and
 * remembered, so later sessions fall back without trying again.
 */
export function loadCApi(libraryPath?: string): OrtCApi | null {
  const known = apis.get(libraryPath)
  if (known !== undefined) return typeof known === 'string' ? null : known
  try {
    const api = OrtCApi.load(libraryPath)
    apis.set(libraryPath, api)
    return api
  } catch (e) {
    const why = (e as Error).message
    apis.set(libraryPath, why)
    const lib = libraryPath ?? "onnxruntime-node's libonnxruntime"
    process.emitWarning(`runtime 'capi' unavailable (cannot load ${lib}), running steps through the JS API: ${why}`, { code: 'ONNXD_CAPI_UNAVAILABLE' })
    return null
  }
}

/**
 * A buffer reused across steps, replaced by a larger one when a step needs more. A replaced buffer may still be
 * pinned by a tensor bound last step: it is retired, and disposed once nothing pins it (sweep()).
 */
class Scratch {
  private buf: NativeBuffer | null = null
  constructor(private readonly retired: NativeBuffer[]) {}
  get(bytes: number): NativeBuffer {
    if (!this.buf || this.buf.bytes < bytes) {
      if (this.buf) this.retired.push(this.buf)
      // Half again as much, so a batch or context that grows a little each step reallocates rarely.
      this.buf = new NativeBuffer(Math.max(64, Math.ceil(bytes * 1.5)))
    }
    return this.buf
  }
  dispose(): void {
    this.buf?.dispose()
    this.buf = null
  }
}

/** Each row's first `width` mask slots (right-padded rows: its ones come first). */
function narrowMask(x: ForwardInput, width: number): Uint8Array {
  const full = x.pastLen + x.seq
  const m = new Uint8Array(x.rows * width)
  for (let r = 0; r < x.rows; r++) m.set(x.mask.subarray(r * full, r * full + width), r * width)
  return m
}

/** A tensor's name, element type and dims (a number, or a named dimension), as a graph's input or output. */
function valueInfo(name: string, type: number, dims: Array<number | string>): ValueInfo {
  return { name, type: { tensor_type: { elem_type: type, shape: { dim: dims.map((d) => (typeof d === 'number' ? { dim_value: d } : { dim_param: d })) } } } }
}

/**
 * A small graph over a device pool's tensors, run on the step session's provider: per past input i, `nodes(i)`
 * writes `out_i` from `cache_i` ([slots, heads, cap, headDim], bound as out_i too: ScatterND updates it in place),
 * `inputs(i, t)` (t: the cache's element type) and the `shared` inputs.
 */
function poolGraph(sig: Signature, name: string, nodes: (i: number) => Node[], inputs: (i: number, t: number) => ValueInfo[], shared: ValueInfo[]): Uint8Array {
  const t = sig.kv.dtype === 'float16' ? DataType.FLOAT16 : DataType.FLOAT
  const { heads: H, headDim: D } = sig.kv
  const ids = sig.kv.pastNames.map((_, i) => i)
  return encodeModel({
    ir_version: 8,
    opset_import: [{ domain: '', version: 18 }],
    producer_name: 'onnxd',
    producer_version: '1',
    graph: {
      name,
      node: ids.flatMap(nodes),
      initializer: [],
      input: [...shared, ...ids.flatMap((i) => [valueInfo(`cache_${i}`, t, ['slots', H, 'cap', D]), ...inputs(i, t)])],
      output: ids.map((i) => valueInfo(`out_${i}`, t, ['slots', H, 'cap', D])),
    },
  })
}

/**
 * The graph that copies a slot of one device pool into a slot of another (device-kv.ts: a prefilled staging row into
 * the running pool, a running slot's cached prompt into the staging row): per past input i,
 * out_i = ScatterND(cache_i, slot, Gather(row_i, from)), with out_i bound to cache_i itself, which ORT's ScatterND
 * updates in place (only the row's elements are written).
 */
function copyGraph(sig: Signature): Uint8Array {
  return poolGraph(
    sig,
    'onnxd_kv_copy',
    (i) => [
      { name: `pick_${i}`, op_type: 'Gather', input: [`row_${i}`, 'from'], output: [`picked_${i}`], attribute: [{ name: 'axis', type: AttrType.INT, i: 0 }] },
      { name: `copy_${i}`, op_type: 'ScatterND', input: [`cache_${i}`, 'slot', `picked_${i}`], output: [`out_${i}`] },
    ],
    (i, t) => [valueInfo(`row_${i}`, t, ['rows', sig.kv.heads, 'cap', sig.kv.headDim])],
    [valueInfo('slot', DataType.INT64, [1, 1]), valueInfo('from', DataType.INT64, [1])],
  )
}

/**
 * The graph that writes a plain-op graph's new keys and values into a device pool (device-kv.ts DeviceNewRows): per
 * present i, out_i = ScatterND(cache_i, index, rows_i), with out_i bound to cache_i itself (written in place, as
 * copyGraph's). `index` [rows, heads, seq, 3] holds each new row's (slot, head, position): slot s's token j goes to
 * position len_s + j, right after what the slot holds.
 */
function appendGraph(sig: Signature): Uint8Array {
  return poolGraph(
    sig,
    'onnxd_kv_append',
    (i) => [{ name: `append_${i}`, op_type: 'ScatterND', input: [`cache_${i}`, 'index', `rows_${i}`], output: [`out_${i}`] }],
    (i, t) => [valueInfo(`rows_${i}`, t, ['rows', sig.kv.heads, 'seq', sig.kv.headDim])],
    [valueInfo('index', DataType.INT64, ['rows', sig.kv.heads, 'seq', 3])],
  )
}

/** The positions a step computes logits at (ForwardInput.logitsAt; default its last), and how many. */
const logitsAt = (x: ForwardInput): Int32Array => x.logitsAt ?? Int32Array.of(x.seq - 1)
const logitsCount = (x: ForwardInput): number => x.logitsAt?.length ?? 1

const BYTES: Record<'int32' | 'int64' | 'float32' | 'float16', number> = { int32: 4, int64: 8, float32: 4, float16: 2 }

/**
 * A device step's output over slots [0, hi) (`per` elements a slot) as the step's rows in their order: the view
 * itself where row r is slot r and no other slot ran, else a copy.
 */
function inRowOrder(all: KvData | BigInt64Array, per: number, x: ForwardInput, kv: DeviceKv, hi: number): KvData | BigInt64Array {
  if (hi === x.rows && kv.slotOf.every((s, r) => s === r)) return all
  const rows = new (all.constructor as { new (n: number): KvData | BigInt64Array })(x.rows * per)
  for (let r = 0; r < x.rows; r++) {
    const s = kv.slotOf[r]
    ;(rows as Float32Array).set((all as Float32Array).subarray(s * per, (s + 1) * per), r * per)
  }
  return rows
}

const sameDims = (a: readonly number[], b: readonly number[]): boolean => a.length === b.length && a.every((d, i) => d === b[i])

export class CapiRunner {
  private binding: Binding | null = null
  /** Steps whose presents were written into the cache in place (what a test watches). */
  sharedSteps = 0
  /** The last step's bytes in and out (StepTraffic). */
  traffic: StepTraffic = { in: 0, out: 0 }
  /** Tensors made or bound by the steps so far (what a test watches: steady decode steps make none). */
  tensorsMade = 0
  /** The shapes the device steps ran so far, `${slots}x${tokens}` (what a test watches: none is new after a warm-up). */
  readonly deviceShapes = new Set<string>()
  private readonly scratch = new Map<string, Scratch>()
  private readonly retired: NativeBuffer[] = []
  /**
   * The tensor bound to each input and output name of `binding`, kept across steps: a step rebinds only the names
   * whose memory, offset or dims changed (the KvCache's buffers change only when it reallocates or re-lays out, in
   * KV_CHUNK steps; the scratch buffers when they grow). A shared present is the same Tensor as its past.
   */
  private readonly ins = new Map<string, Tensor>()
  private readonly outs = new Map<string, Tensor>()
  /** NativeBuffer wrappers over the KvCache's ArrayBuffers, kept while a bound tensor pins them. */
  private readonly wrappers = new Map<ArrayBufferLike, NativeBuffer>()
  /** The address an empty past's tensors point at (a zero-sized tensor still needs one). */
  private empty: NativeBuffer | null = null
  /** On a GPU provider: the KV cache's device tensors (device-kv.ts), shared by every cache this runner makes. */
  readonly pool: DeviceCaches | null = null
  /** The device tensors bound as past and present now, and the outputs bound beside them. */
  private deviceBound: DeviceTensor[] | null = null
  private deviceOutputs = ''
  /** The session that copies a prefilled row into the running pool (copyGraph), and its slot input. */
  private readonly copier: CSession | null = null
  private copyBinding: Binding | null = null
  private copySlot: Tensor<'int64'> | null = null
  private copyFrom: Tensor<'int64'> | null = null
  /** A plain-op graph's second step graph (appendGraph), its binding and its index input. */
  private readonly appender: CSession | null = null
  private appendBinding: Binding | null = null
  private appendIndex: Tensor<'int64'> | null = null
  /**
   * With WebGPU graph capture: the captured decode step (made at the first decode step over the running pool), and
   * the run options of every other run (gpu_graph_id -1).
   */
  private readonly capture: { api: OrtCApi; memory: string; eager: RunOptions } | null = null
  private captured: CapturedStep | null = null

  private constructor(
    private readonly session: CSession,
    private readonly sig: Signature,
    device?: { memory: string; copier: CSession; appender: CSession | null; capture: OrtCApi | null },
  ) {
    if (device) {
      this.appender = device.appender
      if (device.capture) this.capture = { api: device.capture, memory: device.memory, eager: eagerRunOptions(device.capture) }
      const copier = (this.copier = device.copier)
      this.pool = new DeviceCaches(session.deviceAllocator(device.memory), sig.kv, (from, fromSlot, to, slot) => {
        const b = (this.copyBinding ??= copier.binding())
        this.copySlot ??= copier.alloc('int64', [1, 1])
        this.copyFrom ??= copier.alloc('int64', [1])
        this.copySlot.data[0] = BigInt(slot)
        this.copyFrom.data[0] = BigInt(fromSlot)
        // Bound after they are written: ORT uploads a host input when it is bound.
        b.bindInput('slot', this.copySlot)
        b.bindInput('from', this.copyFrom)
        from.forEach((t, i) => {
          b.bindDeviceInput(`cache_${i}`, to[i])
          b.bindDeviceInput(`row_${i}`, t)
          b.bindDeviceOutput(`out_${i}`, to[i])
        })
        b.run()
      }, this.capture !== null)
    }
  }

  /** Decode steps that replayed the captured graph (WebGPU graph capture), the capturing one included. */
  get capturedSteps(): number {
    return this.captured?.runs ?? 0
  }

  /**
   * A runner over `model` (the graph bytes the JS session runs), with the JS session's `config` entries. Null when
   * the C API cannot load here (the caller keeps the JS path); throws when it loads but refuses the model.
   */
  static create(
    model: Uint8Array,
    sig: Signature,
    opts: {
      config: Readonly<Record<string, string>>
      intraOpThreads?: number
      libraryPath?: string
      /** A GPU execution provider by its C-API name ('WebGPU'), with its options. */
      ep?: { name: string; options?: Readonly<Record<string, string>> }
      /**
       * The provider's device memory (OrtMemoryInfo name, 'WebGPU_Buf'): the KV cache lives there (device-kv.ts). A
       * plain graph's `model` is then the one decoder-graph.ts maskFromLengths made, fed MASK_INPUTS.
       */
      deviceMemory?: string
      /**
       * WebGPU graph capture of the decode step (captured-step.ts): the provider is asked for it, the running pool is
       * allocated once at the model's context, and decode steps run over all of its slots. GroupQueryAttention graphs
       * on the device only.
       */
      graphCapture?: boolean
    },
  ): CapiRunner | null {
    const c = loadCApi(opts.libraryPath)
    if (!c) return null
    // Whether the graph and provider allow it is session.ts's decision (DecoderSession.create refuses the others).
    const capture = opts.graphCapture === true && opts.deviceMemory !== undefined && opts.ep !== undefined
    const ep = capture ? { name: opts.ep!.name, options: { ...opts.ep!.options, enableGraphCapture: '1' } } : opts.ep
    const session = c.createSession(model, {
      intraOpThreads: opts.intraOpThreads ?? 0,
      graphOptimization: 'all',
      config: opts.config,
      ep,
    })
    let copier: CSession | null = null
    let appender: CSession | null = null
    try {
      if (opts.deviceMemory) {
        copier = c.createSession(copyGraph(sig), { graphOptimization: 'all', ep: opts.ep })
        if (sig.kv.present === 'new') appender = c.createSession(appendGraph(sig), { graphOptimization: 'all', ep: opts.ep })
      }
      return new CapiRunner(session, sig, opts.deviceMemory && copier ? { memory: opts.deviceMemory, copier, appender, capture: capture ? c : null } : undefined)
    } catch (e) {
      appender?.dispose()
      copier?.dispose()
      session.dispose()
      throw e
    }
  }

  /**
   * A new cache of rows on this runner's device, in the running pool or (`prefill`) the staging pool; null on the CPU,
   * where the scheduler keeps a host cache.
   */
  deviceKv(prefill: boolean): DeviceKv | null {
    return this.pool ? new DeviceKv(prefill ? this.pool.staging : this.pool.running, this.pool) : null
  }

  private buffer(name: string, bytes: number): NativeBuffer {
    let s = this.scratch.get(name)
    if (!s) this.scratch.set(name, (s = new Scratch(this.retired)))
    return s.get(bytes)
  }

  /** A wrapper over the KvCache's memory `data` lives in (one per ArrayBuffer, kept while bound). */
  private wrap(data: KvData): NativeBuffer {
    if (data.byteLength === 0) return (this.empty ??= new NativeBuffer(0))
    const ab = data.buffer
    let nb = this.wrappers.get(ab)
    if (!nb) this.wrappers.set(ab, (nb = new NativeBuffer(ab.byteLength, ab as ArrayBuffer)))
    return nb
  }

  /**
   * The tensor bound to `name` (input or output) over `buf` from `offset` with `dims`: the one bound by an earlier
   * step when it matches, else a new one, bound in place of the old (which is released unless still bound elsewhere).
   */
  private bindOver(b: Binding, dir: 'in' | 'out', name: string, buf: NativeBuffer, type: ElementType, dims: readonly number[], offset = 0): Tensor {
    const map = dir === 'in' ? this.ins : this.outs
    const cur = map.get(name)
    if (cur && cur.buffer === buf && cur.byteOffset === offset && cur.type === type && sameDims(cur.dims, dims)) return cur
    const t = this.session.tensor(buf, type, dims, offset)
    this.tensorsMade++
    try {
      this.bindTensor(b, dir, name, t)
    } catch (e) {
      t.dispose()
      throw e
    }
    return t
  }

  /** Binds `t` to `name` unless it is bound there already; the tensor it replaces is released unless bound elsewhere. */
  private bindTensor(b: Binding, dir: 'in' | 'out', name: string, t: Tensor): void {
    const map = dir === 'in' ? this.ins : this.outs
    const cur = map.get(name)
    if (cur === t) return
    if (dir === 'in') b.bindInput(name, t)
    else b.bindOutput(name, t)
    map.set(name, t)
    if (cur) this.releaseIfUnbound(cur)
  }

  private releaseIfUnbound(t: Tensor): void {
    for (const m of [this.ins, this.outs]) for (const u of m.values()) if (u === t) return
    t.dispose()
  }

  /** Disposes the wrappers and retired scratch buffers no bound tensor pins any more. */
  private sweep(): void {
    for (const [ab, nb] of this.wrappers) {
      if (nb.pinned === 0) {
        nb.dispose()
        this.wrappers.delete(ab)
      }
    }
    for (let i = this.retired.length - 1; i >= 0; i--) {
      if (this.retired[i].pinned === 0) {
        this.retired[i].dispose()
        this.retired.splice(i, 1)
      }
    }
  }

  /** The dims of each output a step binds, by output name. */
  private outputDims(x: ForwardInput, name: string): number[] {
    const { kv, logits, nextToken } = this.sig
    if (name === nextToken) return [x.rows, logitsCount(x)]
    if (name === logits.name) return [x.rows, logits.at ? logitsCount(x) : x.seq, logits.vocab]
    const seq = kv.present === 'new' ? x.seq : x.pastLen + x.seq
    return kv.stacked ? [2, x.rows, kv.heads, seq, kv.headDim] : [x.rows, kv.heads, seq, kv.headDim]
  }

  /**
   * Runs one step and returns `fetches` (default: logits and the presents) as views over this runner's buffers.
   * `gate` is held from the first native call to the last, the run included.
   * Per step JS writes only ids, positions and lengths (or the mask, for graphs that still read it) into buffers
   * already bound; tensors are made and bound only where a buffer or its dims changed.
   */
  async run(x: ForwardInput, fetches: string[] | undefined, gate: NativeGateLike | null): Promise<Record<string, StepValue>> {
    const sig = this.sig
    const names = fetches ?? [sig.logits.name, ...sig.kv.presentNames]
    if (gate && !gate.enter()) throw new OnnxdError('not_ready', 'this engine replica is being stopped', { retryAfterS: 1 })
    try {
      const b = (this.binding ??= this.session.binding())
      if (x.cache instanceof DeviceKv) return this.runDevice(b, x, x.cache, names.filter((n) => !sig.kv.presentNames.includes(n)))
      const traffic = { in: 0, out: 0 }
      const int = (name: string, dtype: 'int32' | 'int64', src: ArrayLike<number>, dims: number[]): void => {
        const n = src.length
        traffic.in += n * BYTES[dtype]
        const buf = this.buffer(`in:${name}`, n * BYTES[dtype])
        if (dtype === 'int32') buf.view('int32', 0, n).set(src)
        else {
          const v = buf.view('int64', 0, n)
          for (let i = 0; i < n; i++) v[i] = BigInt(src[i])
        }
        this.bindOver(b, 'in', name, buf, dtype, dims)
      }
      int(sig.ids.name, sig.ids.dtype, x.ids, [x.rows, x.seq])
      // Sharing presents with the past: the step's total length only as long as its longest row, so that it stays
      // within the cache's cap, where GroupQueryAttention writes.
      const lengths = rowLengths(x)
      const share = this.sharesPresent(x, lengths)
      if (share) this.sharedSteps++
      const total = share || x.pastLen + x.seq
      if (sig.mask) int(sig.mask.name, sig.mask.dtype, share ? narrowMask(x, share) : x.mask, [x.rows, total])
      if (sig.lengths) {
        const buf = this.buffer(`in:${sig.lengths.seqlens}`, x.rows * 4)
        seqlensK(lengths, buf.view('int32', 0, x.rows))
        traffic.in += x.rows * 4
        this.bindOver(b, 'in', sig.lengths.seqlens, buf, 'int32', [x.rows])
        int(sig.lengths.total, 'int32', [total], [])
      }
      if (sig.positions) int(sig.positions.name, sig.positions.dtype, x.positions, [x.rows, x.seq])
      if (sig.logits.at) int(sig.logits.at, 'int64', logitsAt(x), [logitsCount(x)])
      const out: Record<string, StepValue> = {}
      // A different set of outputs than bound (a greedy step after a sampled one): ORT's binding has no unbind by
      // name, so every output is rebound.
      if (this.outs.size !== names.length || names.some((n) => !this.outs.has(n))) {
        b.clearOutputs()
        const old = [...this.outs.values()]
        this.outs.clear()
        for (const t of old) this.releaseIfUnbound(t)
      }
      sig.kv.pastNames.forEach((n, i) => {
        // In place over the cache's memory: no byte of it is copied, so the step's traffic leaves it out.
        const p = x.past[i]
        const t = this.bindOver(b, 'in', n, this.wrap(p.data), sig.kv.dtype, p.dims, p.data.byteLength > 0 ? p.data.byteOffset : 0)
        const present = sig.kv.presentNames[i]
        if (share && names.includes(present)) {
          // GroupQueryAttention writes each row's new tokens right after its length, into the cache itself.
          this.bindTensor(b, 'out', present, t)
          out[present] = { data: p.data, dims: p.dims }
        }
      })
      const views: Array<() => void> = []
      for (const name of names) {
        if (out[name]) continue
        const dims = this.outputDims(x, name)
        const type: ElementType = name === sig.nextToken ? 'int64' : name === sig.logits.name ? sig.logits.dtype : sig.kv.dtype
        const count = dims.reduce((a, c) => a * c, 1)
        const buf = this.buffer(`out:${name}`, count * BYTES[type as keyof typeof BYTES])
        traffic.out += count * BYTES[type as keyof typeof BYTES]
        this.bindOver(b, 'out', name, buf, type, dims)
        views.push(() => (out[name] = { data: buf.view(type, 0, count) as KvData | BigInt64Array, dims }))
      }
      this.sweep()
      // On this thread, blocking it: handing the run to koffi's thread pool and back costs two cross-thread wake-ups
      // a step (about 1.5 ms of a q4 135m decode step on 2 cores), and the engine acts on messages only between
      // steps anyway (its loop turns the event loop once a step).
      b.run()
      for (const v of views) v()
      this.traffic = traffic
      return out
    } catch (e) {
      // A failed bind or run may leave ORT's binding inconsistent: the next step makes a new one.
      this.dropBinding()
      if (e instanceof OnnxdError) throw e
      throw new OnnxdError('internal', `forward step failed: ${(e as Error).message}`)
    } finally {
      gate?.exit()
    }
  }

  /**
   * A step over a device cache: slots [0, hi) of the pool, the step's rows in their slots and every other slot as a
   * dummy row (its tokens written past its own length, never read). Only ids, positions, lengths or the mask go in,
   * and the wanted outputs (next tokens, or logits) come out, in the step's row order.
   *
   * A GroupQueryAttention graph binds the pool's tensors as both past and present: it appends in place. A plain-op
   * graph (presents holding only the new rows, decoder-graph.ts) reads the pool's tensors as its past, whole: every
   * slot's `cap` positions, masked past each slot's length, so its attention runs over cap columns each step, not
   * over the row's length. Its positions are fed (a row's are not its mask's count), its presents go to device
   * tensors (DeviceNewRows), and a second graph (appendGraph) scatters them into the pool after each slot's length.
   */
  private runDevice(b: Binding, x: ForwardInput, kv: DeviceKv, names: string[]): Record<string, StepValue> {
    const sig = this.sig
    const plain = sig.kv.present === 'new'
    // ORT copies a host input to the device when it is bound (IoBinding::BindInput), not at each run: every step
    // binds its inputs again, so that this step's values are the ones uploaded.
    const bindIn = (name: string, nb: NativeBuffer, type: ElementType, dims: number[]): void => {
      const t = this.bindOver(b, 'in', name, nb, type, dims)
      b.bindInput(name, t)
    }
    const pool = kv.pool
    // The step's rows in powers of two (free slots run as dummies): each new shape costs the provider its shaders'
    // compiles (on the H200, decode steps of a batch that changed every step took about a second each), so the
    // batch takes at most log2(slots) + 1 shapes.
    const seq = x.seq
    // With graph capture, a decode step over the running pool runs the captured graph, over every slot.
    const captured = this.capture !== null && seq === 1 && pool === this.pool!.running && logitsCount(x) === 1
    const hi = captured ? pool.slots : Math.min(pool.slots, 2 ** Math.ceil(Math.log2(Math.max(1, pool.hi))))
    this.deviceShapes.add(`${hi}x${seq}`)
    // Each slot's length before the step, and its real tokens after it.
    const lens = new Int32Array(hi)
    const totals = new Int32Array(hi)
    const idv = new Int32Array(hi * seq)
    const pos = new Int32Array(hi * seq)
    for (let s = 0; s < hi; s++) {
      const len = pool.lenAt(s)
      lens[s] = len
      totals[s] = len + seq
      for (let j = 0; j < seq; j++) pos[s * seq + j] = len + j
    }
    for (let r = 0; r < x.rows; r++) {
      const s = kv.slotOf[r]
      idv.set(x.ids.subarray(r * seq, (r + 1) * seq), s * seq)
      pos.set(x.positions.subarray(r * seq, (r + 1) * seq), s * seq)
      lens[s] = kv.lens[r]
      totals[s] = x.lengths ? x.lengths[r] : kv.lens[r] + seq
      // A plain graph's row is left-padded (step-plan.ts): its pads would be scattered before its tokens. On the device
      // a step carries one prompt, one token per row, or one row's token and draft (multiTokenRows is 1), so no row is
      // padded.
      const n = totals[s] - lens[s]
      if (plain && n !== seq && n !== 0) throw new OnnxdError('internal', `a device step over a plain graph feeds each row ${seq} tokens or none (row ${r}: ${n})`)
    }
    // Every slot's `seq` positions after its length are written (in place, or by the append graph): within cap.
    let total = 0
    for (let s = 0; s < hi; s++) total = Math.max(total, lens[s] + seq, totals[s])
    if (total > pool.cap) throw new OnnxdError('internal', `a device step of ${total} tokens over slots of ${pool.cap}`)
    if (captured) return this.runCaptured(x, kv, names, { ids: idv, positions: pos, totals })
    const traffic = { in: 0, out: 0 }
    const buf = (name: string, bytes: number): NativeBuffer => this.buffer(name, bytes)
    const ids = buf(`in:${sig.ids.name}`, hi * seq * BYTES[sig.ids.dtype])
    const posBuf = sig.positions ? buf(`in:${sig.positions.name}`, hi * seq * BYTES[sig.positions.dtype]) : null
    const write = (nb: NativeBuffer, dtype: 'int32' | 'int64', src: Int32Array): void => {
      if (dtype === 'int32') nb.view('int32', 0, src.length).set(src)
      else {
        const v = nb.view('int64', 0, src.length)
        for (let i = 0; i < src.length; i++) v[i] = BigInt(src[i])
      }
      traffic.in += src.length * BYTES[dtype]
    }
    write(ids, sig.ids.dtype, idv)
    bindIn(sig.ids.name, ids, sig.ids.dtype, [hi, seq])
    if (sig.positions && posBuf) {
      write(posBuf, sig.positions.dtype, pos)
      bindIn(sig.positions.name, posBuf, sig.positions.dtype, [hi, seq])
    }
    if (plain) {
      // The past is each slot's whole cap; the mask is 1 on what the slot holds, [0, len), and on the step's own
      // tokens, [cap, cap + seq); the graph's causal mask counts key k against query j as k <= cap + j.
      if (!sig.positions) throw new OnnxdError('internal', 'a device step over a plain graph needs its position ids')
      // A plain graph's step over an empty past (a MatMul of inner dimension 0) crashes ORT's WebGPU provider: a pool's
      // slots are never empty (DevicePool sizes them in steps of 64), and this keeps it so.
      if (pool.cap === 0) throw new OnnxdError('internal', 'a device step over a plain graph needs a past of at least one slot')
      // The graph builds that mask from the slots' lengths and its two edges: on the device, a plain graph's model is
      // maskFromLengths' rewrite (session.ts).
      const kept = buf(`in:${MASK_INPUTS.kept}`, hi * 4)
      kept.view('int32', 0, hi).set(lens)
      bindIn(MASK_INPUTS.kept, kept, 'int32', [hi, 1])
      const scalar = (name: string, value: number): void => {
        const nb = buf(`in:${name}`, 4)
        nb.view('int32', 0, 1)[0] = value
        bindIn(name, nb, 'int32', [])
      }
      scalar(MASK_INPUTS.width, pool.cap + seq)
      scalar(MASK_INPUTS.from, pool.cap)
      traffic.in += hi * 4 + 8
    } else {
      if (!sig.lengths) throw new OnnxdError('internal', 'a device step needs a graph fed its GroupQueryAttention lengths')
      const seqlens = buf(`in:${sig.lengths.seqlens}`, hi * 4)
      const sv = seqlens.view('int32', 0, hi)
      for (let s = 0; s < hi; s++) sv[s] = totals[s] - 1
      traffic.in += hi * 4
      bindIn(sig.lengths.seqlens, seqlens, 'int32', [hi])
      const tot = buf(`in:${sig.lengths.total}`, 4)
      tot.view('int32', 0, 1)[0] = total
      traffic.in += 4
      bindIn(sig.lengths.total, tot, 'int32', [])
      if (sig.mask) {
        const m = new Int32Array(hi * total)
        for (let s = 0; s < hi; s++) m.fill(1, s * total, s * total + totals[s])
        const mb = buf(`in:${sig.mask.name}`, m.length * BYTES[sig.mask.dtype])
        write(mb, sig.mask.dtype, m)
        bindIn(sig.mask.name, mb, sig.mask.dtype, [hi, total])
      }
    }
    // Outputs: the wanted ones to host buffers, the presents onto the pool's tensors (GroupQueryAttention) or the new
    // rows' (a plain graph), bound again only when the slots a step covers, its new tokens or the wanted outputs change.
    const key = names.join('\0')
    const tensors = pool.bound(hi)
    const presents = plain ? this.pool!.newRows!.bound(hi, seq) : tensors
    if (key !== this.deviceOutputs) {
      b.clearOutputs()
      const old = [...this.outs.values()]
      this.outs.clear()
      for (const t of old) this.releaseIfUnbound(t)
      this.deviceOutputs = key
      this.deviceBound = null
    }
    const bound = [...tensors, ...presents]
    if (this.deviceBound === null || this.deviceBound.length !== bound.length || this.deviceBound.some((t, i) => t !== bound[i])) {
      sig.kv.pastNames.forEach((n, i) => {
        b.bindDeviceInput(n, tensors[i])
        b.bindDeviceOutput(sig.kv.presentNames[i], presents[i])
      })
      this.deviceBound = bound
    }
    if (sig.logits.at) {
      const at = logitsAt(x)
      const ab = buf(`in:${sig.logits.at}`, at.length * 8)
      write(ab, 'int64', at)
      bindIn(sig.logits.at, ab, 'int64', [at.length])
    }
    const outs: Array<{ name: string; buf: NativeBuffer; type: ElementType; per: number; dims: number[] }> = []
    const n = sig.logits.at ? logitsCount(x) : seq
    for (const name of names) {
      const type: ElementType = name === sig.nextToken ? 'int64' : sig.logits.dtype
      const per = name === sig.nextToken ? n : n * sig.logits.vocab
      const dims = name === sig.nextToken ? [hi, n] : [hi, n, sig.logits.vocab]
      const nb = buf(`out:${name}`, hi * per * BYTES[type as keyof typeof BYTES])
      this.bindOver(b, 'out', name, nb, type, dims)
      traffic.out += hi * per * BYTES[type as keyof typeof BYTES]
      outs.push({ name, buf: nb, type, per, dims: [x.rows, ...dims.slice(1)] })
    }
    this.sweep()
    b.run(this.capture?.eager)
    if (plain) this.appendRows(pool.all, presents, lens, seq, traffic)
    this.traffic = traffic
    const out: Record<string, StepValue> = {}
    for (const o of outs) out[o.name] = { data: inRowOrder(o.buf.view(o.type, 0, hi * o.per) as KvData | BigInt64Array, o.per, x, kv, hi), dims: o.dims }
    return out
  }

  /**
   * A decode step over every slot of the running pool through the captured graph (captured-step.ts): made at the
   * first such step, over the pool's tensors, which stay where they are for the session's life (DevicePool.fixed).
   */
  private runCaptured(x: ForwardInput, kv: DeviceKv, names: string[], inputs: CapturedInputs): Record<string, StepValue> {
    const sig = this.sig
    const pool = kv.pool
    const c = this.capture!
    const step = (this.captured ??= new CapturedStep(c.api, this.session, c.memory, sig, pool.bound(pool.slots), pool.slots, pool.cap))
    if (step.slots !== pool.slots || step.cap !== pool.cap) {
      throw new OnnxdError('internal', `the captured step covers ${step.slots} slots of ${step.cap}; the pool has ${pool.slots} of ${pool.cap}`)
    }
    const S = pool.slots
    const got = step.run(inputs, names)
    const traffic = { in: step.bytesIn, out: 0, replayed: true }
    const out: Record<string, StepValue> = {}
    for (const name of names) {
      const t = got.get(name)!
      const per = t.dims.slice(1).reduce((a, d) => a * d, 1)
      traffic.out += t.data.byteLength
      out[name] = { data: inRowOrder(t.data as KvData | BigInt64Array, per, x, kv, S), dims: [x.rows, ...t.dims.slice(1)] }
    }
    this.traffic = traffic
    return out
  }

  /**
   * Writes a plain graph's new rows (`rows`, [hi, heads, seq, headDim]) into the pool's tensors `to`, slot s's from
   * position lens[s] on (appendGraph, on the device). Every slot below hi is written, a dummy's after what it keeps,
   * which later steps write over; only the index goes in, hi * heads * seq triples.
   */
  private appendRows(to: readonly DeviceTensor[], rows: readonly DeviceTensor[], lens: Int32Array, seq: number, traffic: StepTraffic): void {
    const appender = this.appender
    if (!appender) throw new OnnxdError('internal', 'a plain graph on the device has no append graph')
    const H = this.sig.kv.heads
    const hi = lens.length
    const dims = [hi, H, seq, 3]
    if (!this.appendIndex || !sameDims(this.appendIndex.dims, dims)) {
      // The old index is bound: its binding goes first.
      this.appendBinding?.dispose()
      this.appendBinding = null
      this.appendIndex?.dispose()
      this.appendIndex = null
      this.appendIndex = appender.alloc('int64', dims)
    }
    const v = this.appendIndex.data
    let k = 0
    for (let s = 0; s < hi; s++) {
      for (let h = 0; h < H; h++) {
        for (let j = 0; j < seq; j++) {
          v[k++] = BigInt(s)
          v[k++] = BigInt(h)
          v[k++] = BigInt(lens[s] + j)
        }
      }
    }
    traffic.in += v.length * 8
    const b = (this.appendBinding ??= appender.binding())
    try {
      // Bound after it is written: ORT uploads a host input when it is bound.
      b.bindInput('index', this.appendIndex)
      to.forEach((t, i) => {
        b.bindDeviceInput(`cache_${i}`, t)
        b.bindDeviceInput(`rows_${i}`, rows[i])
        b.bindDeviceOutput(`out_${i}`, t)
      })
      b.run()
    } catch (e) {
      this.appendBinding = null
      b.dispose()
      throw e
    }
  }

  /**
   * The step's total length when its presents can be bound onto its past tensors (ORT's past_present_share_buffer),
   * else 0. They can for a GroupQueryAttention graph ('in-place' layout) over a non-empty cache [rows, heads, cap,
   * headDim] where every row's length (its new tokens included) fits in cap; the total is then the longest row's.
   * Otherwise the presents go to the runner's own buffers, [rows, heads, cap + seq, headDim], and the cache copies
   * the new rows from there.
   */
  private sharesPresent(x: ForwardInput, lengths: Int32Array): number {
    const kv = this.sig.kv
    if (kv.present !== 'in-place' || kv.stacked || x.pastLen === 0 || (!this.sig.mask && !this.sig.lengths)) return 0
    let widest = 0
    for (let r = 0; r < x.rows; r++) {
      if (lengths[r] > x.pastLen) return 0
      widest = Math.max(widest, lengths[r])
    }
    return widest
  }

  /**
   * Lets go of everything bound: the binding, its tensors and the wrappers over the KvCache's memory (which may then
   * be freed). The engine calls it when it goes idle; the next step binds afresh.
   */
  idle(): void {
    this.dropBinding()
    // The copy's and the append's bindings hold the pools' tensors too: let go of them, so that the pools' memory can
    // go back.
    this.copyBinding?.dispose()
    this.copyBinding = null
    this.appendBinding?.dispose()
    this.appendBinding = null
  }

  private dropBinding(): void {
    try {
      this.binding?.dispose()
    } catch {
      // A binding still running cannot be disposed; it goes with the session (its tensors then stay pinned).
      return
    }
    this.binding = null
    this.deviceBound = null
    this.deviceOutputs = ''
    const all = new Set([...this.ins.values(), ...this.outs.values()])
    this.ins.clear()
    this.outs.clear()
    for (const t of all) t.dispose()
    this.sweep()
  }

  dispose(): void {
    this.idle()
    this.captured?.dispose()
    this.capture?.eager.dispose()
    this.pool?.close()
    this.copier?.dispose()
    this.copySlot?.dispose()
    this.copyFrom?.dispose()
    this.appender?.dispose()
    this.appendIndex?.dispose()
    this.session.dispose()
    for (const s of this.scratch.values()) s.dispose()
    this.scratch.clear()
    this.empty?.dispose()
    this.empty = null
    this.sweep()
  }
}
