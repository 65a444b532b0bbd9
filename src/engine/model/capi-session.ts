// The C-API step runner behind DecoderSession (runtime 'capi'): the same graph bytes and inputs as the JS path,
// run through ORT's C API (ort-capi.ts) on an IoBinding whose outputs are bound to buffers this runner keeps and
// reuses across steps (grown when a step's outputs are larger), so a step makes no fresh JS buffer per output.
// Past KV inputs are bound in place over the engine's own KvCache memory (no copy in). The outputs a step returns
// are views over the reused buffers: valid until the next step, which the batcher honours (it reads logits and
// appends presents before it starts another step). Imports: ort-capi and engine model types only.
import { OnnxdError } from '../../shared/errors.js'
import { NativeBuffer, OrtCApi, type Binding, type CSession, type ElementType, type Tensor } from './ort-capi.js'
import type { ForwardInput, KvData, Signature } from './session.js'

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

/** A buffer reused across steps, replaced by a larger one when a step needs more. */
class Scratch {
  private buf: NativeBuffer | null = null
  get(bytes: number): NativeBuffer {
    if (!this.buf || this.buf.bytes < bytes) {
      this.buf?.dispose()
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

const BYTES: Record<'int32' | 'int64' | 'float32' | 'float16', number> = { int32: 4, int64: 8, float32: 4, float16: 2 }

export class CapiRunner {
  private binding: Binding | null = null
  /** Steps whose presents were written into the cache in place (what a test watches). */
  sharedSteps = 0
  private readonly scratch = new Map<string, Scratch>()

  private constructor(
    private readonly session: CSession,
    private readonly sig: Signature,
  ) {}

  /**
   * A runner over `model` (the graph bytes the JS session runs), its external data found in `externalDir`. Null when
   * the C API cannot load here (the caller keeps the JS path); throws when it loads but refuses the model.
   */
  static create(model: Uint8Array, sig: Signature, opts: { externalDir: string; intraOpThreads?: number; libraryPath?: string }): CapiRunner | null {
    const c = loadCApi(opts.libraryPath)
    if (!c) return null
    const session = c.createSession(model, {
      intraOpThreads: opts.intraOpThreads ?? 0,
      graphOptimization: 'all',
      config: { 'session.model_external_initializers_file_folder_path': opts.externalDir },
    })
    return new CapiRunner(session, sig)
  }

  private buffer(name: string, bytes: number): NativeBuffer {
    let s = this.scratch.get(name)
    if (!s) this.scratch.set(name, (s = new Scratch()))
    return s.get(bytes)
  }

  /** The dims of each output a step binds, by output name. */
  private outputDims(x: ForwardInput, name: string): number[] {
    const { kv, logits, nextToken } = this.sig
    if (name === nextToken) return [x.rows, 1]
    if (name === logits.name) return [x.rows, logits.lastOnly ? 1 : x.seq, logits.vocab]
    const seq = kv.present === 'new' ? x.seq : x.pastLen + x.seq
    return kv.stacked ? [2, x.rows, kv.heads, seq, kv.headDim] : [x.rows, kv.heads, seq, kv.headDim]
  }

  /**
   * Runs one step and returns `fetches` (default: logits and the presents) as views over this runner's buffers.
   * `gate` is held from the first native call to the last, including the whole of the run on koffi's thread pool.
   */
  async run(x: ForwardInput, fetches: string[] | undefined, gate: NativeGateLike | null): Promise<Record<string, StepValue>> {
    const sig = this.sig
    const names = fetches ?? [sig.logits.name, ...sig.kv.presentNames]
    if (gate && !gate.enter()) throw new OnnxdError('not_ready', 'this engine replica is being stopped', { retryAfterS: 1 })
    const tensors: Tensor[] = []
    const wrapped: NativeBuffer[] = []
    try {
      const s = this.session
      const b = (this.binding ??= s.binding())
      const int = (name: string, dtype: 'int32' | 'int64', src: ArrayLike<number>, dims: number[]): void => {
        const n = src.length
        const buf = this.buffer(`in:${name}`, n * BYTES[dtype])
        if (dtype === 'int32') buf.view('int32', 0, n).set(src)
        else {
          const v = buf.view('int64', 0, n)
          for (let i = 0; i < n; i++) v[i] = BigInt(src[i])
        }
        const t = s.tensor(buf, dtype, dims)
        tensors.push(t)
        b.bindInput(name, t)
      }
      int(sig.ids.name, sig.ids.dtype, x.ids, [x.rows, x.seq])
      // Sharing presents with the past: the mask only as wide as the longest row, so that the graph's total sequence
      // length (its width) stays within the cache's cap, where GroupQueryAttention writes.
      const share = this.sharesPresent(x)
      if (share) this.sharedSteps++
      if (sig.mask) int(sig.mask.name, sig.mask.dtype, share ? narrowMask(x, share) : x.mask, [x.rows, share || x.pastLen + x.seq])
      if (sig.positions) int(sig.positions.name, sig.positions.dtype, x.positions, [x.rows, x.seq])
      const out: Record<string, StepValue> = {}
      sig.kv.pastNames.forEach((n, i) => {
        // In place over the cache's memory; an empty past gets a one-byte buffer of its own (it needs an address).
        const p = x.past[i]
        const nb = p.data.byteLength > 0 ? new NativeBuffer(p.data.buffer.byteLength, p.data.buffer as ArrayBuffer) : new NativeBuffer(0)
        wrapped.push(nb)
        const t = s.tensor(nb, sig.kv.dtype, p.dims, p.data.byteLength > 0 ? p.data.byteOffset : 0)
        tensors.push(t)
        b.bindInput(n, t)
        const present = sig.kv.presentNames[i]
        if (share && names.includes(present)) {
          // GroupQueryAttention writes each row's new tokens right after its length, into the cache itself.
          b.bindOutput(present, t)
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
        const t = s.tensor(buf, type, dims)
        tensors.push(t)
        b.bindOutput(name, t)
        views.push(() => (out[name] = { data: buf.view(type, 0, count) as KvData | BigInt64Array, dims }))
      }
      await b.runAsync()
      for (const v of views) v()
      return out
    } catch (e) {
      // A failed bind or run may leave ORT's binding inconsistent: the next step makes a new one.
      this.dropBinding()
      if (e instanceof OnnxdError) throw e
      throw new OnnxdError('internal', `forward step failed: ${(e as Error).message}`)
    } finally {
      if (this.binding) {
        this.binding.clearInputs()
        this.binding.clearOutputs()
      }
      for (const t of tensors) t.dispose()
      for (const nb of wrapped) nb.dispose()
      gate?.exit()
    }
  }

  /**
   * The mask width when this step's presents can be bound onto its past tensors (ORT's past_present_share_buffer),
   * else 0. They can for a GroupQueryAttention graph ('in-place' layout) over a non-empty cache [rows, heads, cap, headDim] where every row's
   * length plus its new tokens (the ones of its right-padded mask row) fits in cap. Otherwise the presents go to the
   * runner's own buffers, [rows, heads, cap + seq, headDim], and the cache copies the new rows from there.
   */
  private sharesPresent(x: ForwardInput): number {
    const kv = this.sig.kv
    if (kv.present !== 'in-place' || kv.stacked || x.pastLen === 0 || !this.sig.mask) return 0
    const width = x.pastLen + x.seq
    let widest = 0
    for (let r = 0; r < x.rows; r++) {
      let n = 0
      for (let k = r * width; k < (r + 1) * width; k++) n += x.mask[k]
      if (n > x.pastLen) return 0
      widest = Math.max(widest, n)
    }
    return widest
  }

  private dropBinding(): void {
    try {
      this.binding?.dispose()
    } catch {
      // A binding still running cannot be disposed; it goes with the session.
    }
    this.binding = null
  }

  dispose(): void {
    this.dropBinding()
    this.session.dispose()
    for (const s of this.scratch.values()) s.dispose()
    this.scratch.clear()
  }
}
