// The decode ceiling of a GroupQueryAttention graph: ORT alone through its C API (src/engine/model/ort-capi.ts),
// past and present bound to one buffer (onnxruntime-genai's past_present_share_buffer), so a step writes only its
// new rows and nothing is copied out but the next tokens. On WebGPU that buffer is device memory from the session's
// allocator, as the engine's device cache (its contents undefined: a step's time does not depend on them), and each
// run binds its small inputs again, which is what uploads them. That is the best ORT does on such a graph; timing it
// through onnxruntime-node would add the full-cache copies its JS API makes on every output. Same figures and
// timing rules as refs/ort.ts. The inputs fed are the graph's own (read from its input list after
// prepareDecoderGraph): whatever of input_ids, attention_mask, position_ids, seqlens_k, total_sequence_length and
// past_key_values.* it takes. On the CPU a second session, with ORT's profiler on, then runs a few decode steps at
// each batch and says where ORT's own step goes, by operator type (profile.ts). Imports: the engine's graph
// preparation, C API and runner (its per-thread API), through its bench surface.
import { closeSync, openSync, readSync, rmSync } from 'node:fs'
import { externalDataConfig, loadCApi, LOGITS_AT_INPUT, ModelProto, NativeBuffer, prepareDecoderFile, type CSession, type DeviceAllocator, type DeviceTensor, type ElementType, type Tensor, type ValueInfo } from '../../engine/bench-surface.js'
import { spreadLengths, time, type CeilingOptions, type StepTiming, type DecodeCeiling, type PrefillTiming } from './ort.js'
import { decodeOpsOf, profilePrefix, PROFILE_WARMUP, PROFILED_STEPS, type DecodeOps } from './profile.js'

const ELEM: Record<number, ElementType> = { 1: 'float32', 6: 'int32', 7: 'int64', 10: 'float16' }

interface Input {
  name: string
  type: ElementType
  dims: (number | null)[]
}

/** The graph's inputs with their element types and dims (null where symbolic). */
function inputsOf(model: Uint8Array): Input[] {
  const m = ModelProto.toObject(ModelProto.decode(model), { longs: Number, defaults: true }) as { graph: { input: ValueInfo[] } }
  return m.graph.input.map((v) => {
    const type = ELEM[v.type.tensor_type.elem_type]
    if (!type) throw new Error(`input ${v.name}: element type ${v.type.tensor_type.elem_type} is not supported by the ceiling`)
    return { name: v.name, type, dims: v.type.tensor_type.shape.dim.map((d) => ('dim_value' in d && d.dim_value ? Number(d.dim_value) : null)) }
  })
}

/** Whether `onnxPath` is a GroupQueryAttention graph (the ceiling then runs here, not in refs/ort.ts). */
export function usesGroupQueryAttention(onnxPath: string): boolean {
  // The graph's nodes come before its weights in the file: its first 4 MB, read without the rest.
  const fd = openSync(onnxPath, 'r')
  try {
    const head = Buffer.alloc(4 << 20)
    return /GroupQueryAttention/.test(head.subarray(0, readSync(fd, head, 0, head.length, 0)).toString('latin1'))
  } finally {
    closeSync(fd)
  }
}

/**
 * One step's tensors: `batch` rows, `seq` new tokens each, over `past` cached positions (or row r over `lens[r]`) in a
 * cache as wide as the longest row.
 */
function step(s: CSession, inputs: Input[], outputs: string[], o: { batch: number; seq: number; past: number; lens?: readonly number[]; nextToken: string | null; greedy: boolean; device: DeviceAllocator | null }) {
  const { batch, seq } = o
  const lenOf = (r: number): number => o.lens?.[r] ?? o.past
  const past = o.lens ? Math.max(...o.lens) : o.past
  const shared = past > 0
  const cap = shared ? past + seq : 0
  const tensors: Tensor[] = []
  const onDevice: DeviceTensor[] = []
  /** The small inputs, bound again before each run on a device (binding is what uploads them). */
  const small: Array<[string, Tensor]> = []
  const b = s.binding()
  const alloc = <T extends ElementType>(type: T, dims: number[]): Tensor<T> => {
    const t = s.alloc(type, dims)
    tensors.push(t)
    return t
  }
  const int = (inp: Input, dims: number[], value: (i: number) => number): Tensor => {
    const n = dims.reduce((a, c) => a * c, 1)
    if (inp.type === 'int64') {
      const t = alloc('int64', dims)
      for (let i = 0; i < n; i++) t.data[i] = BigInt(value(i))
      return t
    }
    if (inp.type !== 'int32') throw new Error(`input ${inp.name}: expected an integer type, found ${inp.type}`)
    const t = alloc('int32', dims)
    for (let i = 0; i < n; i++) t.data[i] = value(i)
    return t
  }
  try {
    for (const inp of inputs) {
      const kv = /^past_key_values\.(\d+)\.(key|value)$/.exec(inp.name)
      if (kv) {
        const [, heads, , headDim] = inp.dims
        if (!heads || !headDim) throw new Error(`${inp.name}: heads and head size must be fixed in the graph`)
        const present = `present.${kv[1]}.${kv[2]}`
        if (!outputs.includes(present)) throw new Error(`${inp.name}: the graph has no output ${present}`)
        if (inp.type !== 'float32' && inp.type !== 'float16') throw new Error(`${inp.name}: cache type ${inp.type} is not supported`)
        if (shared && o.device) {
          const t = o.device.alloc(inp.type, [batch, heads, cap, headDim])
          onDevice.push(t)
          b.bindDeviceInput(inp.name, t).bindDeviceOutput(present, t)
        } else if (shared) {
          // One buffer for past and present: the step writes its new rows at each row's length (past).
          const t = alloc(inp.type, [batch, heads, cap, headDim])
          t.data.fill(inp.type === 'float32' ? 0.1 : 0x2e66) // 0.1 (fp16: its bit pattern)
          b.bindInput(inp.name, t).bindOutput(present, t)
        } else {
          const empty = s.tensor(new NativeBuffer(0), inp.type, [batch, heads, 0, headDim])
          tensors.push(empty)
          b.bindInput(inp.name, empty)
          b.bindOutput(present, alloc(inp.type, [batch, heads, seq, headDim]))
        }
        continue
      }
      let t: Tensor
      if (inp.name === 'input_ids') t = int(inp, [batch, seq], (i) => 3 + ((i * 7919) % 251))
      // Right-padded, as GroupQueryAttention reads a row's length from its mask.
      else if (inp.name === 'attention_mask') t = int(inp, [batch, past + seq], (i) => (i % (past + seq) < lenOf(Math.floor(i / (past + seq))) + seq ? 1 : 0))
      else if (inp.name === 'position_ids') t = int(inp, [batch, seq], (i) => lenOf(Math.floor(i / seq)) + (i % seq))
      // GroupQueryAttention's per-row length: the total (past + new) minus one.
      else if (/(^|_)seqlens_k$/.test(inp.name)) t = int(inp, [batch], (r) => lenOf(r) + seq - 1)
      else if (/(^|_)total_sequence_length$/.test(inp.name)) t = int(inp, inp.dims.length ? [1] : [], () => past + seq)
      // The positions whose logits the step computes (decoder-graph.ts positionLogits): its last, as the engine's.
      else if (inp.name === LOGITS_AT_INPUT) t = int(inp, [1], () => seq - 1)
      else throw new Error(`the graph's input ${inp.name} is not one a decoder step feeds`)
      b.bindInput(inp.name, t)
      small.push([inp.name, t])
    }
    // What the engine fetches: each row's next token when greedy and the graph has it, else the logits.
    const want = o.greedy && o.nextToken ? o.nextToken : 'logits'
    if (want === o.nextToken) {
      b.bindOutput(want, alloc('int64', [batch, 1]))
    } else b.bindOutputToCpu(want)
  } catch (e) {
    b.dispose()
    for (const t of tensors) t.dispose()
    for (const t of onDevice) t.dispose()
    throw e
  }
  return {
    run: () => {
      if (o.device) for (const [n, t] of small) b.bindInput(n, t)
      b.run()
    },
    dispose: () => {
      b.dispose()
      for (const t of tensors) t.dispose()
      for (const t of onDevice) t.dispose()
    },
  }
}

/** One step's tensors bound once, run as often as wanted (each run on a device binds its small inputs again). */
export interface CapiStep {
  run(): void
  dispose(): void
}

/**
 * ORT alone on a GroupQueryAttention graph through the C API: one session, and steps of any shape over it, each
 * `batch` rows of `seq` new tokens over `past` cached positions, presents bound onto the past.
 */
export interface CapiSteps {
  step(o: { batch: number; seq: number; past: number; lens?: readonly number[]; greedy: boolean }): CapiStep
  /** Ends the profiling `profilePrefix` started and returns the trace file's path (only with profilePrefix). */
  endProfiling(): string
  dispose(): void
}

/** Opens ORT alone's session on the graph at `onnxPath`, prepared as the engine prepares it. */
export function openCapiSteps(o: { onnxPath: string; threads: number; provider?: string; profilePrefix?: string; nbitsAsInt8?: boolean }): CapiSteps {
  const api = loadCApi()
  if (!api) throw new Error("ORT's C API cannot load here (see the warning above)")
  const g = prepareDecoderFile(o.onnxPath, { nbitsAsInt8: o.nbitsAsInt8 })
  const inputs = inputsOf(g.model)
  const webgpu = o.provider === 'webgpu'
  if ((o.provider ?? 'cpu') !== 'cpu' && !webgpu) throw new Error(`the C-API ceiling runs on cpu and webgpu, not ${o.provider}`)
  const s = api.createSession(g.model, {
    intraOpThreads: o.threads,
    graphOptimization: 'all',
    config: externalDataConfig(o.onnxPath),
    ...(webgpu ? { ep: { name: 'WebGPU' } } : {}),
    ...(o.profilePrefix === undefined ? {} : { profilePrefix: o.profilePrefix }),
  })
  const device = webgpu ? s.deviceAllocator('WebGPU_Buf') : null
  return {
    step: (x) => step(s, inputs, s.outputNames, { ...x, nextToken: g.nextToken, device }),
    endProfiling: () => s.endProfiling(),
    dispose: () => {
      device?.dispose()
      s.dispose()
    },
  }
}

/** ORT alone's decode step at each of `o.batches` by operator type, from a session of its own with ORT's profiler on. */
export function profileCapiDecode(o: Pick<CeilingOptions, 'onnxPath' | 'threads' | 'batches' | 'past' | 'greedy' | 'nbitsAsInt8'>): DecodeOps[] {
  const ort = openCapiSteps({ ...o, profilePrefix: profilePrefix() })
  let file: string | null = null
  try {
    for (const batch of o.batches) {
      const st = ort.step({ batch, seq: 1, past: o.past, greedy: o.greedy })
      try {
        for (let i = 0; i < PROFILE_WARMUP + PROFILED_STEPS; i++) st.run()
      } finally {
        st.dispose()
      }
    }
    file = ort.endProfiling()
    return decodeOpsOf(file, o.batches)
  } finally {
    // A step that failed left the profile running: end it too, so that no trace file stays behind.
    if (!file) {
      try {
        file = ort.endProfiling()
      } catch {
        // nothing was written
      }
    }
    ort.dispose()
    if (file) rmSync(file, { force: true })
  }
}

/**
 * The decode ceiling (and one prefill) of a GroupQueryAttention graph through the C API, presents on the past; with
 * `spread`, each decode step also over rows whose lengths spread that wide around the past (spreadLengths).
 */
export async function measureCapiCeiling(o: CeilingOptions & { spread?: number }): Promise<{ decode: DecodeCeiling[]; prefill: PrefillTiming; spread: DecodeCeiling[] }> {
  const ort = openCapiSteps(o)
  try {
    const timed = async (batch: number, seq: number, past: number, lens?: number[]): Promise<StepTiming> => {
      const st = ort.step({ batch, seq, past, lens, greedy: o.greedy })
      try {
        return await time(async () => st.run(), o.budget)
      } finally {
        st.dispose()
      }
    }
    o.onStep?.(`prefill ${o.prefillRows} x ${o.prompt} (C API)`)
    const p = await timed(o.prefillRows, o.prompt, 0)
    const prefill: PrefillTiming = { prompt: o.prompt, rows: o.prefillRows, ...p, tokens_per_s: (o.prefillRows * o.prompt) / (p.ms / 1000) }
    const decode: DecodeCeiling[] = []
    for (const batch of o.batches) {
      o.onStep?.(`decode batch ${batch} (C API, presents on the past)`)
      const t = await timed(batch, 1, o.past)
      decode.push({ batch, past: o.past, ...t, tokens_per_s: batch / (t.ms / 1000) })
    }
    const spread: DecodeCeiling[] = []
    for (const batch of o.spread ? o.batches : []) {
      o.onStep?.(`decode batch ${batch}, rows of lengths spread over ${o.spread} (C API, presents on the past)`)
      const t = await timed(batch, 1, o.past, spreadLengths(batch, o.past, o.spread!))
      spread.push({ batch, past: o.past, ...t, tokens_per_s: batch / (t.ms / 1000) })
    }
    return { decode, prefill, spread }
  } finally {
    ort.dispose()
  }
}
