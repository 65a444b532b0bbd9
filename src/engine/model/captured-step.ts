// WebGPU graph capture for the device cache's decode step (issue #33): ORT's WebGPU provider records the kernels of
// one run (`enableGraphCapture`) and replays them afterwards without going through ORT's kernels again, which saves
// the CPU time of dispatching every kernel of every step. A replay reads and writes the buffers the captured run was
// bound to and reuses the shapes and scalar inputs it saw, so this step owns device tensors for all of its inputs
// and outputs, bound once: per step the host values are copied into the input tensors (CopyTensors), the session
// runs (replays), and the wanted outputs are copied back. Its shape never changes: every slot of the running pool
// (free ones as dummy rows), one token each, GroupQueryAttention's total length fixed at the pool's slot length (the
// kernel reads each row's own length from the device, seqlens_k). ORT 1.30's WebGPU provider keeps one captured graph
// per session, so every other step of the session runs as before with a `gpu_graph_id` of -1.
// Imports: ort-capi and engine model types only.
import type { Binding, CSession, DeviceTensor, ElementType, OrtCApi, RunOptions, Tensor } from './ort-capi.js'
import type { Signature } from './step-io.js'

/** The run option that names a run's graph for capture and replay (ORT's kOrtRunOptionsConfigCudaGraphAnnotation). */
const GRAPH_ID = 'gpu_graph_id'

/** An input or output of the captured step: its host tensor and the device tensor copied to or from it each run. */
interface Staged {
  readonly host: Tensor
  readonly dev: DeviceTensor
}

/** A captured step's values, one per slot: its token, its position, and its length after the step. */
export interface CapturedInputs {
  ids: Int32Array
  positions: Int32Array
  totals: Int32Array
}

export class CapturedStep {
  private readonly binding: Binding
  private readonly staged = new Map<string, Staged>()
  private readonly outputs = new Map<string, Staged>()
  private readonly owned: Array<{ dispose(): void }> = []
  private readonly replay: RunOptions
  /** Runs so far: the first one captures, the later ones replay. */
  runs = 0

  /**
   * Binds the step over `pool` (each past tensor, [slots, heads, cap, headDim], bound as past and present) for a
   * GroupQueryAttention graph fed its lengths.
   */
  constructor(
    private readonly api: OrtCApi,
    session: CSession,
    memory: string,
    private readonly sig: Signature,
    pool: readonly DeviceTensor[],
    readonly slots: number,
    readonly cap: number,
  ) {
    if (!sig.lengths) throw new Error('a captured step needs a graph fed its GroupQueryAttention lengths')
    const allocator = session.deviceAllocator(memory)
    this.owned.push(allocator)
    this.replay = api.runOptions({ [GRAPH_ID]: '1' })
    this.owned.push(this.replay)
    const b = (this.binding = session.binding())
    this.owned.push(b)
    // A host tensor and its device twin, for each input and output.
    const pair = (type: ElementType, dims: number[]): Staged => {
      const p = { host: session.alloc(type, dims), dev: allocator.alloc(type, dims) }
      this.owned.push(p.host, p.dev)
      return p
    }
    const stage = (name: string, type: ElementType, dims: number[]): void => {
      const p = pair(type, dims)
      b.bindDeviceInput(name, p.dev)
      this.staged.set(name, p)
    }
    const S = slots
    stage(sig.ids.name, sig.ids.dtype, [S, 1])
    if (sig.positions) stage(sig.positions.name, sig.positions.dtype, [S, 1])
    stage(sig.lengths.seqlens, 'int32', [S])
    if (sig.mask) stage(sig.mask.name, sig.mask.dtype, [S, cap])
    if (sig.logits.at) {
      stage(sig.logits.at, 'int64', [1])
      ;(this.host(sig.logits.at) as BigInt64Array)[0] = 0n
    }
    // The total length is read on the host by GroupQueryAttention (a CPU input): captured once, as the slot length.
    const total = session.alloc('int32', [])
    total.data[0] = cap
    this.owned.push(total)
    b.bindInput(sig.lengths.total, total)
    sig.kv.pastNames.forEach((n, i) => {
      b.bindDeviceInput(n, pool[i])
      b.bindDeviceOutput(sig.kv.presentNames[i], pool[i])
    })
    const out = (name: string, type: ElementType, dims: number[]): void => {
      const p = pair(type, dims)
      b.bindDeviceOutput(name, p.dev)
      this.outputs.set(name, p)
    }
    out(sig.logits.name, sig.logits.dtype, [S, 1, sig.logits.vocab])
    if (sig.nextToken) out(sig.nextToken, 'int64', [S, 1])
  }

  private host(name: string): Int32Array | BigInt64Array {
    const s = this.staged.get(name)
    if (!s) throw new Error(`the captured step has no input ${name}`)
    return s.host.data as Int32Array | BigInt64Array
  }

  /** Bytes copied to the device per step (what the step traffic counts). */
  get bytesIn(): number {
    let n = 0
    for (const s of this.staged.values()) n += s.dev.bytes
    return n
  }

  /**
   * Runs the step on `inputs` (one value per slot) and returns the `wanted` outputs (host views, [slots, 1] next
   * tokens or [slots, 1, vocab] logits), valid until the next run.
   */
  run(inputs: CapturedInputs, wanted: readonly string[]): Map<string, Tensor> {
    const sig = this.sig
    const write = (name: string, src: Int32Array, less = 0): void => {
      const h = this.host(name)
      if (h instanceof Int32Array) for (let i = 0; i < src.length; i++) h[i] = src[i] - less
      else for (let i = 0; i < src.length; i++) h[i] = BigInt(src[i] - less)
    }
    write(sig.ids.name, inputs.ids)
    if (sig.positions) write(sig.positions.name, inputs.positions)
    // GroupQueryAttention's seqlens_k: each slot's length after the step, less one.
    write(sig.lengths!.seqlens, inputs.totals, 1)
    if (sig.mask) {
      const m = this.host(sig.mask.name)
      const W = this.cap
      for (let s = 0; s < this.slots; s++) {
        const t = inputs.totals[s]
        if (m instanceof Int32Array) {
          m.fill(1, s * W, s * W + t)
          m.fill(0, s * W + t, (s + 1) * W)
        } else {
          m.fill(1n, s * W, s * W + t)
          m.fill(0n, s * W + t, (s + 1) * W)
        }
      }
    }
    this.api.copyTensors([...this.staged.values()].map((s) => [s.host, s.dev] as const))
    this.binding.run(this.replay)
    this.runs++
    const got = new Map<string, Tensor>()
    const pairs: Array<readonly [DeviceTensor, Tensor]> = []
    for (const name of wanted) {
      const o = this.outputs.get(name)
      if (!o) throw new Error(`the captured step has no output ${name}`)
      pairs.push([o.dev, o.host])
      got.set(name, o.host)
    }
    this.api.copyTensors(pairs)
    return got
  }

  /** Releases the binding first (it pins the host tensors), then the tensors, the run options and the allocator. */
  dispose(): void {
    this.binding.dispose()
    for (const o of this.owned.reverse()) o.dispose()
    this.owned.length = 0
  }
}

/** Run options for every other run of a session that captures a graph: not captured, not replayed. */
export function eagerRunOptions(api: OrtCApi): RunOptions {
  return api.runOptions({ [GRAPH_ID]: '-1' })
}
