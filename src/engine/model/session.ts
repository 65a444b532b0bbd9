// The engine's one module that imports onnxruntime-node: creates the decoder session on an execution provider,
// discovers its signature from the session metadata, and runs one forward step over a padded batch. Outside the
// engine only the benchmark's ORT references import it (src/bench/refs/ort.ts, listed as the one exception in
// test/architecture.test.ts, and the script bench/engine.bench.ts), to time ORT without onnxd.
import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { createRequire } from 'node:module'
import * as ort from 'onnxruntime-node'
import { OnnxdError } from '../../shared/errors.js'
import type { Provider } from '../../shared/model.js'
import type { Bundle } from './bundle.js'
import { toFloat32 } from './fp16.js'
import { emptyPast, type ForwardInput, type ForwardOutput, type GreedyOutput, type IntDtype, type KvData, type KvTensor, type Signature, type StepTraffic } from './step-io.js'
import { SEQLENS_K_INPUT, TOTAL_LENGTH_INPUT, externalDataConfig, maskFromLengths, prepareDecoderFile, type PreparedGraph } from './decoder-graph.js'
import { rowLengths, seqlensK } from './step-lengths.js'
import { CapiRunner } from './capi-session.js'
import type { DeviceKv, DevicePoolLimits } from './device-kv.js'
import { dropPastSlot, needsPastSlot, withPastSlot } from './empty-past.js'
import { DataType, encodeModel } from './onnx-proto.js'
import { intendedRuntime, type Runtime, type RuntimeChoice } from './runtime.js'

export interface SessionOptions {
  provider?: Provider
  deviceId?: number
  /** Allow starting on CPU when the requested GPU provider is not installed. */
  allowCpuFallback?: boolean
  intraOpThreads?: number
  /** Keep logits for every position (tests comparing whole forward passes); by default only the last is computed. */
  allLogits?: boolean
  /**
   * Run steps through onnxruntime-node's JS API ('js') or ORT's C API ('capi', capi-session.ts); 'auto', the default,
   * is runtime.ts's defaultRuntime for the provider ('capi' on cpu and webgpu, 'js' on cuda and tensorrt), without a warning.
   */
  runtime?: RuntimeChoice
  /** The libonnxruntime runtime 'capi' loads (default: onnxruntime-node's own); tests point it elsewhere. */
  capiLibraryPath?: string
  /** WebGPU provider options passed through on runtime 'capi' (SessionOptionsAppendExecutionProvider's keys). */
  webgpuOptions?: Readonly<Record<string, string>>
  /**
   * WebGPU graph capture of the decode step (captured-step.ts): on provider 'webgpu', runtime 'capi', a
   * GroupQueryAttention graph; refused (a config error saying why) anywhere else.
   */
  graphCapture?: boolean
  /**
   * Serve a 4-bit export's MatMulNBits weights on ORT's int8 kernels (int8-weights.ts): faster at batch on CPUs
   * where ORT's 4-bit kernel is the slower one, at twice the 4-bit form's memory. CPU only; refused (a config error)
   * where the served file has no MatMulNBits this can read.
   */
  nbitsAsInt8?: boolean
}

/**
 * Why a graph cannot keep its cache on a device through the C API (null when it can). A GroupQueryAttention graph
 * writes its presents in place and needs its lengths fed (decoder-graph.ts feedAttentionLengths). A plain-op graph
 * reads the slot's whole length as its past, so it needs the mask that hides the slot's unused end, position ids
 * (a row's positions are no longer its mask's count), and presents cut to the new rows (which the append graph
 * scatters into the slot). Neither takes a stacked cache.
 */
function deviceFormProblem(sig: Signature): string | null {
  if (sig.kv.stacked) return 'has a stacked cache (past_<i>: keys and values in one tensor)'
  if (sig.kv.present === 'in-place') return sig.lengths ? null : 'computes its GroupQueryAttention lengths from the mask'
  if (sig.kv.present !== 'new') return 'returns its whole cache as present (onnxd found no concat to cut it to the new rows)'
  if (!sig.mask) return 'takes no attention mask (a plain graph on the device masks the unused end of each slot)'
  if (!sig.positions) return 'takes no position ids (on the device a row\'s positions are not its mask\'s count)'
  return null
}

const ORT_DIR = dirname(createRequire(import.meta.url).resolve('onnxruntime-node/package.json'))
/** onnxruntime-node's install script: given ONNXRUNTIME_NODE_INSTALL=cuda12, it downloads the CUDA provider. */
export const ORT_INSTALL_SCRIPT = join(ORT_DIR, 'script', 'install.js')

function providerInstalled(p: Provider): boolean {
  if (p === 'cpu') return true
  // WebGPU (Dawn) is built into onnxruntime-node's own libonnxruntime; whether a GPU adapter exists is webgpuProbe's.
  if (p === 'webgpu') return ort.listSupportedBackends().some((b) => b.name === 'webgpu' && b.bundled)
  const lib = `libonnxruntime_providers_${p}.so`
  const dir = join(ORT_DIR, 'bin', 'napi-v6', process.platform, process.arch)
  return existsSync(join(dir, lib))
}

export const INSTALL_HINT: Record<Exclude<Provider, 'cpu'>, string> = {
  // onnxruntime-node's own install script fetches it. npm is told not to run that script (package.json's allowScripts;
  // .npmrc's onnxruntime-node-install=skip for npm 10 and 11), so that no install downloads anything: it is run by
  // hand, by its path.
  cuda: `install the CUDA execution provider with \`ONNXRUNTIME_NODE_INSTALL=cuda12 node ${ORT_INSTALL_SCRIPT}\` on a host with CUDA 12 and cuDNN 9; see docs/runtimes-and-gpus.md, "CUDA and TensorRT"`,
  tensorrt: 'install the CUDA execution provider as for cuda, plus TensorRT 10 libraries on the library path; see docs/runtimes-and-gpus.md, "CUDA and TensorRT"',
  webgpu: 'this onnxruntime-node build has no WebGPU execution provider (the Linux x64 build of 1.30 has it); see docs/runtimes-and-gpus.md, "WebGPU"',
}

/** What a node needs for webgpu when Dawn finds no adapter. */
const WEBGPU_HINT = 'WebGPU runs over Vulkan on Linux: install the GPU vendor\'s Vulkan driver (or Mesa\'s lavapipe, >= 25, for a CPU-only test); see docs/runtimes-and-gpus.md, "WebGPU"'

/**
 * Whether ORT's WebGPU provider has an adapter here: a one-node graph (y = x + x) is created and run on it. Null
 * when it can, else ORT's reason ("Failed to get a WebGPU adapter: No supported adapters" where Dawn finds no Vulkan
 * device it accepts). Probing apart from the model tells a missing adapter from a model the provider cannot load.
 */
export async function webgpuProbe(): Promise<string | null> {
  const f = (name: string) => ({ name, type: { tensor_type: { elem_type: DataType.FLOAT, shape: { dim: [{ dim_value: 1 }] } } } })
  const model = encodeModel({
    ir_version: 8,
    opset_import: [{ domain: '', version: 17 }],
    producer_name: 'onnxd',
    producer_version: '1',
    graph: { name: 'probe', node: [{ name: 'add', op_type: 'Add', input: ['x', 'x'], output: ['y'] }], initializer: [], input: [f('x')], output: [f('y')] },
  })
  try {
    const s = await ort.InferenceSession.create(model, { executionProviders: ['webgpu'], logSeverityLevel: 3 })
    try {
      const out = await s.run({ x: new ort.Tensor('float32', Float32Array.of(1), [1]) })
      const y = (out.y.data as Float32Array)[0]
      return y === 2 ? null : `the probe graph computed 1 + 1 = ${y}`
    } finally {
      await s.release()
    }
  } catch (e) {
    return (e as Error).message.replace(/^.*?Failed to get a WebGPU adapter: /s, '').split('\n')[0].trim()
  }
}

/** `renamed` maps a present output the graph was exported with to the output that carries its new rows now. */
function discover(s: ort.InferenceSession, where: string, renamed: ReadonlyMap<string, string> | null): Signature {
  const ins = new Map(s.inputMetadata.filter((m) => m.isTensor).map((m) => [m.name, m as ort.InferenceSession.TensorValueMetadata]))
  const outs = new Map(s.outputMetadata.filter((m) => m.isTensor).map((m) => [m.name, m as ort.InferenceSession.TensorValueMetadata]))
  const intOf = (name: string): { name: string; dtype: IntDtype } | null => {
    const m = ins.get(name)
    if (!m) return null
    if (m.type !== 'int64' && m.type !== 'int32') throw new OnnxdError('bad_bundle', `${where}: input ${name} has type ${m.type}, expected int64 or int32`)
    return { name, dtype: m.type }
  }
  const ids = intOf('input_ids') ?? (() => { throw new OnnxdError('bad_bundle', `${where}: not a decoder: no input_ids input`) })()
  const logitsMeta = outs.get('logits') ?? (() => { throw new OnnxdError('bad_bundle', `${where}: not a decoder: no logits output`) })()
  const vocab = logitsMeta.shape[logitsMeta.shape.length - 1]
  if (typeof vocab !== 'number') throw new OnnxdError('bad_bundle', `${where}: logits has no fixed vocabulary dimension`)
  if (logitsMeta.type !== 'float32' && logitsMeta.type !== 'float16') throw new OnnxdError('bad_bundle', `${where}: logits type ${logitsMeta.type} is not supported`)

  const pastNames: string[] = []
  const presentNames: string[] = []
  let stacked = false
  for (let i = 0; ; i++) {
    if (ins.has(`past_key_values.${i}.key`)) {
      pastNames.push(`past_key_values.${i}.key`, `past_key_values.${i}.value`)
      presentNames.push(`present.${i}.key`, `present.${i}.value`)
    } else if (ins.has(`past_${i}`)) {
      stacked = true
      pastNames.push(`past_${i}`)
      presentNames.push(`present_${i}`)
    } else break
  }
  if (pastNames.length === 0) throw new OnnxdError('bad_bundle', `${where}: no KV-cache inputs (past_key_values.<i>.key|value or past_<i>)`)
  const presentOutputs = presentNames.map((n) => renamed?.get(n) ?? n)
  for (const n of presentOutputs) if (!outs.has(n)) throw new OnnxdError('bad_bundle', `${where}: output ${n} is missing`)
  const m0 = ins.get(pastNames[0])!
  const shape = m0.shape
  const heads = shape[shape.length - 3]
  const headDim = shape[shape.length - 1]
  if (typeof heads !== 'number' || typeof headDim !== 'number') throw new OnnxdError('bad_bundle', `${where}: ${pastNames[0]} has no fixed heads/head size`)
  if (m0.type !== 'float32' && m0.type !== 'float16') throw new OnnxdError('bad_bundle', `${where}: KV type ${m0.type} is not supported`)
  return {
    ids,
    mask: intOf('attention_mask'),
    positions: intOf('position_ids'),
    kv: {
      layers: stacked ? pastNames.length : pastNames.length / 2,
      stacked,
      heads,
      headDim,
      dtype: m0.type,
      pastNames,
      presentNames: presentOutputs,
      present: renamed ? 'new' : 'appended',
    },
    logits: { name: 'logits', dtype: logitsMeta.type, vocab, at: null },
    nextToken: null,
    lengths: lengthsOf(ins, where),
  }
}

/** The fed GroupQueryAttention lengths, when the session has both inputs (int32, as the rewrite declares them). */
function lengthsOf(ins: Map<string, ort.InferenceSession.TensorValueMetadata>, where: string): Signature['lengths'] {
  const a = ins.get(SEQLENS_K_INPUT)
  const b = ins.get(TOTAL_LENGTH_INPUT)
  if (!a && !b) return null
  if (!a || !b || a.type !== 'int32' || b.type !== 'int32') throw new OnnxdError('bad_bundle', `${where}: inputs ${SEQLENS_K_INPUT} and ${TOTAL_LENGTH_INPUT} must both be int32`)
  return { seqlens: SEQLENS_K_INPUT, total: TOTAL_LENGTH_INPUT }
}

const intTensor = (dtype: IntDtype, src: ArrayLike<number>, dims: number[]): ort.Tensor => {
  if (dtype === 'int32') return new ort.Tensor('int32', Int32Array.from(src), dims)
  const a = new BigInt64Array(src.length)
  for (let i = 0; i < src.length; i++) a[i] = BigInt(src[i])
  return new ort.Tensor('int64', a, dims)
}

/** prepareDecoderFile's rewrites of the file at `onnxPath`, with --nbits-as-int8's refusals. */
function prepared(onnxPath: string, opts: SessionOptions): PreparedGraph {
  let g: PreparedGraph
  try {
    g = prepareDecoderFile(onnxPath, { allLogits: opts.allLogits, nbitsAsInt8: opts.nbitsAsInt8 })
  } catch (e) {
    if (e instanceof RangeError) throw new OnnxdError('config', `--nbits-as-int8: ${onnxPath}: ${e.message}`)
    throw e
  }
  if (opts.nbitsAsInt8 && !g.int8?.converted) {
    const why = g.int8?.kept.length ? `: ${g.int8.kept.slice(0, 3).join('; ')}` : ''
    throw new OnnxdError('config', `--nbits-as-int8: ${onnxPath} has no 4-bit (com.microsoft MatMulNBits) weights it can serve as int8${why}`)
  }
  return g
}

/** A step's outputs by name: the JS API's tensors, or views over the C runner's buffers. */
type StepOutputs = Record<string, { data: unknown; dims: readonly number[] }>

export class DecoderSession {
  /** The last step's bytes in and out. */
  private traffic: StepTraffic = { in: 0, out: 0 }

  private constructor(
    /** Null once the C runner serves the steps (the JS session only discovered the signature). */
    private session: ort.InferenceSession | null,
    readonly signature: Signature,
    readonly provider: Provider,
    private readonly capi: CapiRunner | null = null,
  ) {}

  /** Which API runs the steps: 'capi' only when asked for and the C API loaded (else it falls back to 'js'). */
  get runtime(): Runtime {
    return this.capi ? 'capi' : 'js'
  }

  static async create(bundle: Bundle, opts: SessionOptions = {}): Promise<DecoderSession> {
    let provider: Provider = opts.provider ?? 'cpu'
    if (provider === 'webgpu' && (opts.deviceId ?? 0) !== 0) {
      throw new OnnxdError('config', `deviceId applies to cuda and tensorrt: onnxruntime-node's webgpu provider picks its own adapter (restrict Vulkan's devices instead, e.g. VK_DRIVER_FILES). Given: ${opts.deviceId}`)
    }
    if (opts.graphCapture && (opts.provider ?? 'cpu') !== 'webgpu') throw new OnnxdError('config', `--graph-capture cannot run on provider ${opts.provider ?? 'cpu'} (it is WebGPU's)`)
    if (opts.nbitsAsInt8 && (opts.provider ?? 'cpu') !== 'cpu') throw new OnnxdError('config', `--nbits-as-int8 is for the CPU provider, not ${opts.provider} (a GPU provider runs MatMulNBits itself)`)
    if (!providerInstalled(provider)) {
      if (!opts.allowCpuFallback) {
        throw new OnnxdError('config', `execution provider '${provider}' is not installed: ${INSTALL_HINT[provider as Exclude<Provider, 'cpu'>]}. To start on CPU instead, set ONNXD_ALLOW_CPU_FALLBACK=1.`)
      }
      provider = 'cpu'
    }
    if (provider === 'webgpu') {
      const why = await webgpuProbe()
      if (why !== null) {
        if (!opts.allowCpuFallback) {
          throw new OnnxdError('config', `execution provider 'webgpu' has no GPU adapter (${why}): ${WEBGPU_HINT}. To start on CPU instead, set ONNXD_ALLOW_CPU_FALLBACK=1.`)
        }
        provider = 'cpu'
      }
    }
    const ep: ort.InferenceSession.ExecutionProviderConfig =
      provider === 'cpu' || provider === 'webgpu' ? provider : { name: provider, deviceId: opts.deviceId ?? 0 } as ort.InferenceSession.ExecutionProviderConfig
    const options: ort.InferenceSession.SessionOptions = {
      executionProviders: [ep],
      graphOptimizationLevel: 'all',
      intraOpNumThreads: opts.intraOpThreads ?? 0,
      interOpNumThreads: 1,
      executionMode: 'sequential',
      logSeverityLevel: 3,
    }
    // The graph as onnxd runs it: only the new KV rows and the last position's logits leave a step (decoder-graph.ts).
    const g = prepared(bundle.onnxPath, opts)
    // ORT's thread pool keeps its default: intra-op threads spin-wait for work after each parallel section and for a
    // while after a run returns, so the next step finds them awake. onnxd once stopped that spinning when a run returned
    // (`session.force_spinning_stop`), when the engine copied the KV cache between steps; with the cache kept in place
    // (runtime capi) little runs between steps, and stopping it cost more than it gave. Measured on 135m, GroupQueryAttention,
    // fp32, capi, 2 cores, alternating in one sitting (issue #36): output tok/s with spinning against without, 25.6 / 23.7,
    // 24.2 / 23.6, 28.0 / 24.4 at one stream (a busy host); 157.9 / 137.1 and 131.9 / 131.2 at 16; 177.7 / 174.3 and
    // 178.7 / 172.2 at 64. ORT alone's batch-1 step with it stopped: 30.6 against 25.9 ms.
    const config = externalDataConfig(bundle.onnxPath)
    let session: ort.InferenceSession
    try {
      session = g.rewritten
        ? await ort.InferenceSession.create(g.model, { ...options, extra: config })
        : await ort.InferenceSession.create(bundle.onnxPath, options)
    } catch (e) {
      throw new OnnxdError('bad_bundle', `${bundle.onnxPath}: cannot load ONNX model: ${(e as Error).message}`)
    }
    const sig = discover(session, bundle.onnxPath, g.kvOutputs)
    sig.logits.at = g.logitsAt
    sig.nextToken = g.nextToken
    if (bundle.padding === 'right') sig.kv.present = 'in-place'
    let capi: CapiRunner | null = null
    const device = provider !== 'cpu'
    let deviceForm = deviceFormProblem(sig)
    const wantsCapi = intendedRuntime(opts.runtime, provider) === 'capi'
    // On the device a plain graph's every step, a prompt's first included, takes its tokens over a past (the slot's
    // cap): a graph that takes several tokens only over an empty past cannot prefill there.
    if (wantsCapi && device && !deviceForm && sig.kv.present === 'new' && !(await new DecoderSession(session, sig, provider).takesChunksOverPast())) {
      deviceForm = 'takes several new tokens only over an empty past (a device slot is never one)'
    }
    // On the device a plain graph computes its mask from the slots' lengths: O(batch) bytes a step, not a mask as wide
    // as the cache (decoder-graph.ts maskFromLengths).
    let deviceMask: Uint8Array | null = null
    if (wantsCapi && device && !deviceForm && sig.kv.present === 'new') {
      // deviceFormProblem: a plain graph on the device has a mask.
      deviceMask = maskFromLengths(g.model, sig.mask!.name)
      if (!deviceMask) deviceForm = 'has an attention mask onnxd cannot build on the device (that needs opset 12 or later and no subgraphs)'
    }
    // A CPU fallback (no adapter, --allow-cpu-fallback) serves without it.
    const graphCapture = opts.graphCapture === true && provider === 'webgpu'
    if (graphCapture) {
      const why = !wantsCapi
        ? `runtime ${opts.runtime} (it needs the C-API runtime, which keeps the KV cache on the device)`
        : deviceForm
          ? `${bundle.onnxPath}, which ${deviceForm}`
          : sig.kv.present !== 'in-place'
            ? `${bundle.onnxPath}, a plain-op graph (it needs GroupQueryAttention: build with --attention gqa)`
            : null
      if (why) throw new OnnxdError('config', `--graph-capture cannot run on ${why}`)
    }
    // WebGPU's provider options reach ORT through the C API only: the JS API passes on a few and ignores the rest.
    const webgpuOptions = provider === 'webgpu' && opts.webgpuOptions && Object.keys(opts.webgpuOptions).length > 0 ? opts.webgpuOptions : null
    if (webgpuOptions && (!wantsCapi || deviceForm)) {
      const why = !wantsCapi ? `runtime ${opts.runtime}` : `${bundle.onnxPath}, which ${deviceForm}`
      throw new OnnxdError('config', `--webgpu-options cannot apply to ${why}: only the C-API runtime, with the KV cache on the device, passes them on`)
    }
    // The option that only the C-API runtime can honour, if one was asked for: without it, start-up stops.
    const needsCapi = graphCapture ? 'graph-capture' : webgpuOptions ? 'webgpu-options' : null
    if (opts.runtime === 'capi' && provider !== 'cpu' && provider !== 'webgpu') {
      process.emitWarning(`runtime 'capi' runs on cpu and webgpu: provider ${provider} runs its steps through the JS API`, { code: 'ONNXD_CAPI_UNAVAILABLE' })
    } else if (wantsCapi && device && deviceForm) {
      process.emitWarning(`runtime 'capi' cannot keep the KV cache on ${provider}: ${bundle.onnxPath} ${deviceForm}; its steps run through the JS API, which copies the cache to the host and back every step`, { code: 'ONNXD_CAPI_UNAVAILABLE' })
    } else if (wantsCapi) {
      try {
        capi = CapiRunner.create(deviceMask ?? g.model, sig, {
          config,
          intraOpThreads: opts.intraOpThreads,
          libraryPath: opts.capiLibraryPath,
          ...(provider === 'webgpu' ? { ep: { name: 'WebGPU', options: webgpuOptions ?? undefined }, deviceMemory: 'WebGPU_Buf', graphCapture } : {}),
        })
      } catch (e) {
        if (needsCapi) throw new OnnxdError('config', `--${needsCapi}: runtime 'capi' cannot load ${bundle.onnxPath} on ${provider}: ${(e as Error).message}`)
        process.emitWarning(`runtime 'capi' cannot load ${bundle.onnxPath}${device ? ` on ${provider}` : ''}, running steps through the JS API: ${(e as Error).message}`, { code: 'ONNXD_CAPI_UNAVAILABLE' })
      }
      if (capi) {
        await session.release()
      } else if (needsCapi) {
        throw new OnnxdError('config', `--${needsCapi} needs ORT's C API, which cannot load here`)
      }
    }
    const s = new DecoderSession(capi ? null : session, sig, provider, capi)
    if (g.int8) s.weights = `${g.int8.converted} MatMulNBits served as int8${g.int8.kept.length ? `; kept as 4-bit: ${g.int8.kept.join('; ')}` : ''}`
    // GroupQueryAttention takes new tokens on top of any cache, and a plain graph kept on the device was probed for
    // it above (takesChunksOverPast); a device cache has no host past to probe with.
    s.chunkedPrefill = capi?.pool ? true : await s.probeChunkedPrefill()
    s.idle()
    return s
  }

  /**
   * The device cache as it stands (null where the cache is in host memory): the running pool's slots and slot length,
   * its bytes, how many times it was allocated (and, for a plain graph, the buffers its steps write new rows to),
   * where ORT says its memory is ('gpu'; null while unallocated), and how many decode steps ran as the captured graph
   * (WebGPU graph capture; 0 without it).
   */
  deviceCache(): { slots: number; cap: number; bytes: number; allocations: number; memory: string | null; capturedSteps: number } | null {
    const caches = this.capi?.pool
    if (!caches) return null
    const p = caches.running
    return {
      slots: p.slots,
      cap: p.cap,
      bytes: p.bytes(),
      allocations: p.allocations + (caches.newRows?.allocations ?? 0),
      memory: p.all[0]?.deviceType() ?? null,
      capturedSteps: this.capi!.capturedSteps,
    }
  }

  /**
   * The most rows a step may have whose rows carry several tokens on top of a cache (a draft to check): any number on
   * plain-op graphs that take chunks (on the device too, where every row then carries as many: batcher.ts
   * deviceDrafts); one on GroupQueryAttention graphs, which ORT refuses at batch > 1 ("batch_size must be 1 when
   * sequence_length > 1 and past context is given", on the CPU and on WebGPU; on the device only while that row's slot
   * is the one the step covers: the scheduler checks, DeviceKv.stepsAlone); none on graphs that take no chunks.
   */
  get multiTokenRows(): number {
    if (!this.chunkedPrefill) return 0
    return this.signature.kv.present === 'in-place' ? 1 : Infinity
  }

  /** Whether this session keeps its KV cache on the device (runtime 'capi' on a GPU provider). */
  get deviceResident(): boolean {
    return this.capi?.pool != null
  }

  /**
   * A new cache for the scheduler's rows on this session's device (the running batch's, or with `prefill` a prompt's
   * in the staging pool), sized within `limits` when allocated; null where the scheduler keeps the cache in host
   * memory (scheduler/kv.ts).
   */
  deviceKv(limits: DevicePoolLimits, prefill = false): DeviceKv | null {
    if (this.capi?.pool) this.capi.pool.limits = limits
    return this.capi?.deviceKv(prefill) ?? null
  }

  /**
   * Whether the graph takes several new tokens on top of a non-empty cache (chunked prefill). Some exports only
   * handle "prompt" (empty past) and "one token" steps: onnxruntime-genai's MultiHeadAttention mask subgraph
   * fails with "invalid expand shape" otherwise. Probed once with a 1-token then a 2-token step.
   */
  chunkedPrefill = true

  private async probeChunkedPrefill(): Promise<boolean> {
    const one = await this.forward({ rows: 1, seq: 1, pastLen: 0, ids: Int32Array.of(0), mask: Uint8Array.of(1), positions: Int32Array.of(0), past: this.emptyPast(1) }, [])
    // A copy: the C runner's outputs are views over buffers its next step reuses.
    const past = one.present.map((t) => ({ data: t.data.slice(), dims: t.dims }))
    return this.takesTwoTokensOver(past, Uint8Array.of(1, 1, 1), Int32Array.of(1, 2))
  }

  /**
   * Whether the graph takes two new tokens over a past of one (masked out) slot: what a device step over a plain
   * graph does at every prompt chunk. Over a slot, not an empty past, which WebGPU cannot run (empty-past.ts).
   */
  private async takesChunksOverPast(): Promise<boolean> {
    const kv = this.signature.kv
    const past = kv.pastNames.map(() => ({ data: kv.dtype === 'float16' ? new Uint16Array(kv.heads * kv.headDim) : new Float32Array(kv.heads * kv.headDim), dims: [1, kv.heads, 1, kv.headDim] }))
    return this.takesTwoTokensOver(past, Uint8Array.of(0, 1, 1), Int32Array.of(0, 1))
  }

  /** Whether one row of two new tokens over `past` (one position) runs: the step both probes above try. */
  private async takesTwoTokensOver(past: KvTensor[], mask: Uint8Array, positions: Int32Array): Promise<boolean> {
    try {
      await this.forward({ rows: 1, seq: 2, pastLen: 1, ids: Int32Array.of(0, 0), mask, positions, past }, [])
      return true
    } catch {
      return false
    }
  }

  /** An empty cache for `rows` sequences (past length 0). */
  emptyPast(rows: number): KvTensor[] {
    return emptyPast(this.signature.kv, rows)
  }

  /**
   * Runs one step. `picks` are flat indices (row * seq + position) whose logits are wanted; only those rows are
   * converted to float32, so a long prefill never copies logits it does not use. A graph that computes logits at
   * named positions (signature.logits.at) computes them at the picks' positions only (its last when there is none).
   */
  async forward(x: ForwardInput, picks: number[]): Promise<ForwardOutput> {
    const sig = this.signature
    if (sig.logits.at) {
      const at = logitsPositions(picks.map((p) => p % x.seq), x.seq)
      x = { ...x, logitsAt: at }
      // Row r's logits at position j are its (indexOf j)-th of at.length.
      const index = new Map(Array.from(at, (j, i) => [j, i]))
      picks = picks.map((p) => Math.floor(p / x.seq) * at.length + index.get(p % x.seq)!)
    }
    const out = await this.run(x)
    const V = sig.logits.vocab
    const src = out[sig.logits.name].data as Float32Array | Uint16Array
    let logits: Float32Array
    if (src instanceof Float32Array && src.length === picks.length * V && picks.every((p, i) => p === i)) {
      // A decode step wants every row in order: ORT's output (a fresh JS copy, or the C runner's buffer, which
      // holds until the next step) is the answer as it is.
      logits = src
    } else {
      logits = new Float32Array(picks.length * V)
      picks.forEach((p, i) => toFloat32(src.subarray(p * V, (p + 1) * V), logits.subarray(i * V, (i + 1) * V)))
    }
    return { logits, present: this.present(out), traffic: this.traffic }
  }

  /**
   * Runs one step and returns each row's greedy next token instead of logits: the step's sampling when every row
   * decodes greedily. `positions` (ascending, in [0, seq)) are where each row's tokens are wanted, [rows *
   * positions.length] (default: its last). Only graphs with a next-token output (signature.nextToken) can.
   */
  async forwardGreedy(x: ForwardInput, positions?: readonly number[]): Promise<GreedyOutput> {
    const sig = this.signature
    if (!sig.nextToken) throw new OnnxdError('internal', 'this session has no next-token output')
    x = { ...x, logitsAt: logitsPositions(positions ?? [], x.seq) }
    const out = await this.run(x, [sig.nextToken, ...sig.kv.presentNames])
    const ids = out[sig.nextToken].data as BigInt64Array
    return { tokens: Int32Array.from(ids, Number), present: this.present(out), traffic: this.traffic }
  }

  private async run(x: ForwardInput, fetches?: string[]): Promise<StepOutputs> {
    if (this.capi) {
      const out = await this.capi.run(x, fetches, this.gate)
      this.traffic = this.capi.traffic
      return out
    }
    const kv = this.signature.kv
    if (this.provider === 'webgpu' && needsPastSlot(x, { masked: this.signature.mask !== null, present: kv.present, chunkedPrefill: this.chunkedPrefill })) {
      // WebGPU crashes on a plain graph's empty past: one masked slot instead (empty-past.ts).
      const out = await this.runJs(withPastSlot(x), fetches)
      if (kv.present === 'appended') for (const n of kv.presentNames) if (out[n]) out[n] = dropPastSlot(out[n])
      return out
    }
    return this.runJs(x, fetches)
  }

  private async runJs(x: ForwardInput, fetches?: string[]): Promise<StepOutputs> {
    const session = this.session
    if (!session) throw new OnnxdError('internal', 'session used after dispose()')
    const sig = this.signature
    const feeds: Record<string, ort.Tensor> = {}
    feeds[sig.ids.name] = intTensor(sig.ids.dtype, x.ids, [x.rows, x.seq])
    if (sig.mask) feeds[sig.mask.name] = intTensor(sig.mask.dtype, x.mask, [x.rows, x.pastLen + x.seq])
    if (sig.lengths) {
      // The past here is the cache's full width, so the step's total length is the mask's would-be width.
      feeds[sig.lengths.seqlens] = new ort.Tensor('int32', seqlensK(rowLengths(x), new Int32Array(x.rows)), [x.rows])
      feeds[sig.lengths.total] = new ort.Tensor('int32', Int32Array.of(x.pastLen + x.seq), [])
    }
    if (sig.positions) feeds[sig.positions.name] = intTensor(sig.positions.dtype, x.positions, [x.rows, x.seq])
    if (sig.logits.at) {
      const at = x.logitsAt ?? Int32Array.of(x.seq - 1)
      feeds[sig.logits.at] = intTensor('int64', at, [at.length])
    }
    sig.kv.pastNames.forEach((n, i) => {
      feeds[n] = new ort.Tensor(sig.kv.dtype, x.past[i].data, x.past[i].dims)
    })
    try {
      const out = await this.gated(() => (fetches ? session.run(feeds, fetches) : session.run(feeds)))
      // Every fetched output comes back as a fresh JS buffer. The feeds go in as JS tensors: on a GPU provider each
      // is copied to it, the past included; on the CPU ORT reads the past in place over the cache, so it does not count.
      let fed = 0
      let fetched = 0
      for (const t of Object.values(feeds)) fed += (t.data as ArrayBufferView).byteLength
      if (this.provider === 'cpu') for (const p of x.past) fed -= p.data.byteLength
      for (const t of Object.values(out)) fetched += (t.data as ArrayBufferView).byteLength
      this.traffic = { in: fed, out: fetched }
      return out
    } catch (e) {
      if (e instanceof OnnxdError) throw e
      throw new OnnxdError('internal', `forward step failed: ${(e as Error).message}`)
    }
  }

  /**
   * Marks the stretches this thread spends inside ONNX Runtime, so its pool terminates it only outside them (see
   * engine/pool/gate.ts). Set by the worker thread once the model has loaded.
   */
  gate: { enter(): boolean; exit(): void } | null = null

  /** How the weights are served where that differs from the file (--nbits-as-int8), for the node's start log; null otherwise. */
  weights: string | null = null

  /**
   * Runs `start` (an ORT run) with the gate held exactly around the native call. onnxruntime-node defers that call
   * to a setImmediate callback (its backend.js), so that callback is what the gate wraps: a thread stalled in
   * JavaScript while a step waits for its turn is not inside ORT. A stopped gate leaves the step pending (its
   * thread is about to be terminated). Should a future onnxruntime-node not defer that way, the gate is held
   * around the whole call instead.
   */
  private async gated<T>(start: () => Promise<T>): Promise<T> {
    const gate = this.gate
    if (!gate) return start()
    const original = globalThis.setImmediate
    let deferred = false
    const wrapped = (cb: (...a: unknown[]) => void, ...args: unknown[]): NodeJS.Immediate => {
      deferred = true
      return original(() => {
        if (!gate.enter()) return
        try {
          cb(...args)
        } finally {
          gate.exit()
        }
      })
    }
    globalThis.setImmediate = wrapped as typeof setImmediate
    let p: Promise<T>
    try {
      p = start()
    } finally {
      globalThis.setImmediate = original
    }
    if (deferred) return p
    if (!gate.enter()) throw new OnnxdError('not_ready', 'this engine replica is being stopped', { retryAfterS: 1 })
    try {
      return await p
    } finally {
      gate.exit()
    }
  }

  /**
   * The engine holds no cache now (its batcher went idle): the C runner lets go of what its binding holds (tensors
   * over the released cache's memory), so that memory can go. The next step binds afresh. Nothing to do on 'js'.
   */
  idle(): void {
    this.capi?.idle()
  }

  private present(out: StepOutputs): KvTensor[] {
    // A device cache took the presents in place: none come back.
    if (this.capi?.pool) return []
    return this.signature.kv.presentNames.map((n) => ({ data: out[n].data as KvData, dims: [...out[n].dims] }))
  }

  async dispose(): Promise<void> {
    if (this.gate && !this.gate.enter()) return // the thread is being terminated, which releases the session
    try {
      this.capi?.dispose()
      await this.session?.release()
      this.session = null
    } finally {
      this.gate?.exit()
    }
  }
}

/**
 * The positions a step computes logits at (ForwardInput.logitsAt): `wanted` ascending without repeats, or the step's
 * last position when none is wanted. Throws on a position outside [0, seq).
 */
export function logitsPositions(wanted: readonly number[], seq: number): Int32Array {
  if (wanted.length === 0) return Int32Array.of(seq - 1)
  for (const j of wanted) if (!(j >= 0 && j < seq)) throw new OnnxdError('internal', `logits of position ${j} wanted in a step of ${seq}`)
  return Int32Array.from(new Set(wanted)).sort()
}
