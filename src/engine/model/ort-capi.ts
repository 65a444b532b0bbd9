// ORT's C API from Node through koffi (the one module that imports koffi), on the libonnxruntime that
// onnxruntime-node installs: no second ORT, the same build and execution providers. It exists because
// onnxruntime-node's JS API copies every output into a fresh JS buffer and cannot bind an output to memory the
// caller owns; the C API's IoBinding can, so a GroupQueryAttention step can write its present rows straight into
// the past buffer. Imports: koffi (required at first use) and Node built-ins only (the library is located next to
// onnxruntime-node's package.json, without importing onnxruntime-node, which src/engine/model/session.ts owns).
//
// Memory rules, kept by the classes below:
// - Tensor memory is an ArrayBuffer (NativeBuffer) whose off-heap backing store never moves; ORT gets its address.
//   JS reads and writes it in place through typed-array views.
// - A NativeBuffer counts its pins: each Tensor over it, and each binding slot that holds such a Tensor; it holds the
//   ArrayBuffer (so the GC cannot free it) and refuses to let go while pinned, so ORT never sees freed memory.
// - Everything ORT allocates (env, options, session, memory info, values, bindings, statuses, names) is released
//   by a dispose() or at once after use; every OrtStatus is checked, released, and turned into an OrtError.
import { existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import type Koffi from 'koffi'

/**
 * koffi, required at first use rather than imported: the engine's session module reaches this module whatever the
 * runtime, and runtime 'js' must neither load koffi's native addon nor fail where it cannot load.
 */
let koffiModule: typeof Koffi | null = null
const koffi = (): typeof Koffi => (koffiModule ??= createRequire(import.meta.url)('koffi') as typeof Koffi)

/**
 * Indices into the OrtApi struct (a table of function pointers, append-only across releases; ORT keeps every
 * shipped index fixed, and its onnxruntime_c_api.cc asserts the end of each version, e.g. ReleaseCustomOpDomain
 * at 101, SetGlobalSpinControl at 149, SynchronizeBoundOutputs at 203). Counted from the `ort_api_1_to_17` table
 * in microsoft/onnxruntime onnxruntime/core/session/onnxruntime_c_api.cc (1.17.0, checked against the static
 * asserts there and the OrtApi struct of include/onnxruntime/core/session/onnxruntime_c_api.h); every entry used
 * here shipped in API version 5 or earlier, so the indices hold for 1.30.0 (ORT_API_VERSION 30), which we load;
 * except the device entries, counted in the 1.30 header: GetTensorMemoryInfo (194, API 8),
 * SessionOptionsAppendExecutionProvider (216, API 12) and MemoryInfoGetDeviceType (225, API 13); and for WebGPU graph
 * capture, the run options (CreateRunOptions 39 and ReleaseRunOptions 97, API 1; AddRunConfigEntry 165, API 8, right
 * after CreateArenaCfgV2 at 164) and CopyTensors (386, API 23).
 */
const API = {
  CreateStatus: 0,
  GetErrorCode: 1,
  GetErrorMessage: 2,
  CreateEnv: 3,
  CreateSession: 7,
  CreateSessionFromArray: 8,
  CreateSessionOptions: 10,
  EnableProfiling: 14,
  SetSessionGraphOptimizationLevel: 23,
  SetIntraOpNumThreads: 24,
  AddSessionConfigEntry: 130,
  CreateAllocator: 131,
  ReleaseAllocator: 132,
  SessionGetInputCount: 30,
  SessionGetOutputCount: 31,
  SessionGetInputName: 36,
  SessionGetOutputName: 37,
  CreateRunOptions: 39,
  CreateTensorAsOrtValue: 48,
  CreateTensorWithDataAsOrtValue: 49,
  GetTensorMutableData: 51,
  GetDimensionsCount: 61,
  GetDimensions: 62,
  GetTensorElementType: 60,
  GetTensorTypeAndShape: 65,
  CreateMemoryInfo: 68,
  CreateCpuMemoryInfo: 69,
  AllocatorFree: 76,
  GetAllocatorWithDefaultOptions: 78,
  ReleaseEnv: 92,
  ReleaseStatus: 93,
  ReleaseMemoryInfo: 94,
  ReleaseSession: 95,
  ReleaseValue: 96,
  ReleaseRunOptions: 97,
  ReleaseTensorTypeAndShapeInfo: 99,
  ReleaseSessionOptions: 100,
  SessionEndProfiling: 110,
  RunWithBinding: 133,
  CreateIoBinding: 134,
  ReleaseIoBinding: 135,
  BindInput: 136,
  BindOutput: 137,
  BindOutputToDevice: 138,
  GetBoundOutputValues: 140,
  ClearBoundInputs: 141,
  ClearBoundOutputs: 142,
  AddRunConfigEntry: 165,
  GetTensorMemoryInfo: 194,
  SessionOptionsAppendExecutionProvider: 216,
  MemoryInfoGetDeviceType: 225,
  CopyTensors: 386,
} as const
/** The highest index used, to read that much of the table. */
const API_LENGTH = Math.max(...Object.values(API)) + 1
/** The API version asked of OrtGetApiBase()->GetApi: the one ORT 1.30.0's header defines. */
export const ORT_API_VERSION = 30

/** ONNXTensorElementDataType values for the element types a decoder step uses. */
export const ELEMENT_TYPES = { float32: 1, uint8: 2, int8: 3, int32: 6, int64: 7, bool: 9, float16: 10 } as const
export type ElementType = keyof typeof ELEMENT_TYPES
const ELEMENT_BYTES: Record<ElementType, number> = { float32: 4, uint8: 1, int8: 1, int32: 4, int64: 8, bool: 1, float16: 2 }
const ELEMENT_BY_CODE = new Map(Object.entries(ELEMENT_TYPES).map(([k, v]) => [v as number, k as ElementType]))

export type GraphOptimization = 'disable' | 'basic' | 'extended' | 'all'
const OPT_LEVEL: Record<GraphOptimization, number> = { disable: 0, basic: 1, extended: 2, all: 99 }

/**
 * koffi registers prototypes by name, once per process: each is declared here once (named `Ort<Name>`) and reused
 * by every OrtCApi loaded after.
 */
const protos = new Map<string, ReturnType<typeof Koffi.proto>>()
function proto(name: string, signature: string): ReturnType<typeof Koffi.proto> {
  let p = protos.get(name)
  if (!p) protos.set(name, (p = koffi().proto(signature.replace(/\bf\(/, `Ort${name}(`))))
  return p
}

/**
 * Loaded libraries, held for the process's life: koffi unloads (dlclose) a library whose handle is garbage-collected,
 * which unmaps ORT under every live session (found as a segfault at the first GC), and ORT is not made to be
 * unloaded while its OrtEnv lives.
 */
const libraries = new Map<string, ReturnType<typeof Koffi.load>>()

/** A pointer as koffi hands it over (a BigInt address), or null. */
type Ptr = bigint | null
// koffi's functions are untyped; each wrapper below gives its call a type.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Fn = (...args: any[]) => any

/** Objects this module holds now, by kind: what a leak test watches. */
const live = { buffers: 0, values: 0, bindings: 0, sessions: 0, apis: 0 }
export function liveCounts(): Readonly<typeof live> {
  return { ...live }
}

/** An ORT failure: the call that failed, ORT's error code and its message. */
export class OrtError extends Error {
  constructor(
    readonly call: string,
    readonly ortCode: number,
    message: string,
  ) {
    super(`ORT ${call} failed (code ${ortCode}): ${message}`)
    this.name = 'OrtError'
  }
}

/** Where onnxruntime-node keeps its libonnxruntime, for this platform. */
export function defaultLibraryPath(): string {
  const pkg = dirname(createRequire(import.meta.url).resolve('onnxruntime-node/package.json'))
  const dir = join(pkg, 'bin', 'napi-v6', process.platform, process.arch)
  const names: Record<string, string[]> = {
    linux: ['libonnxruntime.so.1'],
    darwin: ['libonnxruntime.1.dylib', 'libonnxruntime.dylib'],
    win32: ['onnxruntime.dll'],
  }
  for (const n of names[process.platform] ?? []) if (existsSync(join(dir, n))) return join(dir, n)
  throw new Error(`no libonnxruntime for ${process.platform}/${process.arch} in ${dir}`)
}

/** The C API: the library, its function table and the process's OrtEnv. Load once per process (or thread). */
export class OrtCApi {
  readonly version: string
  readonly libraryPath: string
  private readonly f: Record<keyof typeof API, Fn>
  private env: Ptr
  private cpuInfo: Ptr = null
  private allocator: Ptr = null
  private readonly sessions = new Set<CSession>()

  private constructor(libraryPath: string) {
    this.libraryPath = libraryPath
    let lib = libraries.get(libraryPath)
    if (!lib) libraries.set(libraryPath, (lib = koffi().load(libraryPath)))
    const base = lib.func('void *OrtGetApiBase()')() as Ptr
    if (!base) throw new Error(`OrtGetApiBase returned null in ${libraryPath}`)
    const [getApi, getVersion] = koffi().decode(base, koffi().array('void *', 2)) as bigint[]
    this.version = koffi().decode(getVersion, proto('GetVersionString', 'const char *f()'))() as string
    const api = koffi().decode(getApi, proto('GetApi', 'void *f(uint32_t version)'))(ORT_API_VERSION) as Ptr
    if (!api) throw new Error(`libonnxruntime ${this.version} at ${libraryPath} does not offer C API version ${ORT_API_VERSION}`)
    const table = koffi().decode(api, koffi().array('void *', API_LENGTH)) as bigint[]
    const fn = (name: keyof typeof API, signature: string): Fn => koffi().decode(table[API[name]], proto(name, signature)) as Fn
    const S = 'void *' // OrtStatus*: null on success
    this.f = {
      CreateStatus: fn('CreateStatus', `${S} f(int code, const char *msg)`),
      GetErrorCode: fn('GetErrorCode', 'int f(void *status)'),
      GetErrorMessage: fn('GetErrorMessage', 'const char *f(void *status)'),
      CreateEnv: fn('CreateEnv', `${S} f(int level, const char *logid, _Out_ void **out)`),
      CreateSession: fn('CreateSession', `${S} f(void *env, const char *path, void *options, _Out_ void **out)`),
      CreateSessionFromArray: fn('CreateSessionFromArray', `${S} f(void *env, const void *data, size_t len, void *options, _Out_ void **out)`),
      CreateSessionOptions: fn('CreateSessionOptions', `${S} f(_Out_ void **out)`),
      SetSessionGraphOptimizationLevel: fn('SetSessionGraphOptimizationLevel', `${S} f(void *options, int level)`),
      SetIntraOpNumThreads: fn('SetIntraOpNumThreads', `${S} f(void *options, int n)`),
      EnableProfiling: fn('EnableProfiling', `${S} f(void *options, const char *prefix)`),
      SessionEndProfiling: fn('SessionEndProfiling', `${S} f(void *session, void *allocator, _Out_ void **out)`),
      AddSessionConfigEntry: fn('AddSessionConfigEntry', `${S} f(void *options, const char *key, const char *value)`),
      SessionGetInputCount: fn('SessionGetInputCount', `${S} f(void *session, _Out_ size_t *out)`),
      SessionGetOutputCount: fn('SessionGetOutputCount', `${S} f(void *session, _Out_ size_t *out)`),
      SessionGetInputName: fn('SessionGetInputName', `${S} f(void *session, size_t i, void *allocator, _Out_ void **out)`),
      SessionGetOutputName: fn('SessionGetOutputName', `${S} f(void *session, size_t i, void *allocator, _Out_ void **out)`),
      CreateTensorWithDataAsOrtValue: fn(
        'CreateTensorWithDataAsOrtValue',
        `${S} f(void *info, void *data, size_t bytes, const int64_t *shape, size_t rank, int type, _Out_ void **out)`,
      ),
      CreateTensorAsOrtValue: fn('CreateTensorAsOrtValue', `${S} f(void *allocator, const int64_t *shape, size_t rank, int type, _Out_ void **out)`),
      GetTensorMutableData: fn('GetTensorMutableData', `${S} f(void *value, _Out_ void **out)`),
      GetDimensionsCount: fn('GetDimensionsCount', `${S} f(void *info, _Out_ size_t *out)`),
      GetDimensions: fn('GetDimensions', `${S} f(void *info, _Out_ int64_t *dims, size_t n)`),
      GetTensorElementType: fn('GetTensorElementType', `${S} f(void *info, _Out_ int *out)`),
      GetTensorTypeAndShape: fn('GetTensorTypeAndShape', `${S} f(void *value, _Out_ void **out)`),
      CreateMemoryInfo: fn('CreateMemoryInfo', `${S} f(const char *name, int allocatorType, int id, int memType, _Out_ void **out)`),
      CreateAllocator: fn('CreateAllocator', `${S} f(void *session, void *info, _Out_ void **out)`),
      ReleaseAllocator: fn('ReleaseAllocator', 'void f(void *p)'),
      GetTensorMemoryInfo: fn('GetTensorMemoryInfo', `${S} f(void *value, _Out_ void **out)`),
      MemoryInfoGetDeviceType: fn('MemoryInfoGetDeviceType', 'void f(void *info, _Out_ int *out)'),
      SessionOptionsAppendExecutionProvider: fn(
        'SessionOptionsAppendExecutionProvider',
        `${S} f(void *options, const char *name, const char **keys, const char **values, size_t n)`,
      ),
      CreateCpuMemoryInfo: fn('CreateCpuMemoryInfo', `${S} f(int allocatorType, int memType, _Out_ void **out)`),
      AllocatorFree: fn('AllocatorFree', `${S} f(void *allocator, void *p)`),
      GetAllocatorWithDefaultOptions: fn('GetAllocatorWithDefaultOptions', `${S} f(_Out_ void **out)`),
      ReleaseEnv: fn('ReleaseEnv', 'void f(void *p)'),
      ReleaseStatus: fn('ReleaseStatus', 'void f(void *p)'),
      ReleaseMemoryInfo: fn('ReleaseMemoryInfo', 'void f(void *p)'),
      ReleaseSession: fn('ReleaseSession', 'void f(void *p)'),
      ReleaseValue: fn('ReleaseValue', 'void f(void *p)'),
      ReleaseTensorTypeAndShapeInfo: fn('ReleaseTensorTypeAndShapeInfo', 'void f(void *p)'),
      ReleaseSessionOptions: fn('ReleaseSessionOptions', 'void f(void *p)'),
      RunWithBinding: fn('RunWithBinding', `${S} f(void *session, void *runOptions, void *binding)`),
      CreateIoBinding: fn('CreateIoBinding', `${S} f(void *session, _Out_ void **out)`),
      ReleaseIoBinding: fn('ReleaseIoBinding', 'void f(void *p)'),
      BindInput: fn('BindInput', `${S} f(void *binding, const char *name, void *value)`),
      BindOutput: fn('BindOutput', `${S} f(void *binding, const char *name, void *value)`),
      BindOutputToDevice: fn('BindOutputToDevice', `${S} f(void *binding, const char *name, void *info)`),
      GetBoundOutputValues: fn('GetBoundOutputValues', `${S} f(void *binding, void *allocator, _Out_ void **values, _Out_ size_t *count)`),
      ClearBoundInputs: fn('ClearBoundInputs', 'void f(void *binding)'),
      ClearBoundOutputs: fn('ClearBoundOutputs', 'void f(void *binding)'),
      CreateRunOptions: fn('CreateRunOptions', `${S} f(_Out_ void **out)`),
      ReleaseRunOptions: fn('ReleaseRunOptions', 'void f(void *p)'),
      AddRunConfigEntry: fn('AddRunConfigEntry', `${S} f(void *options, const char *key, const char *value)`),
      CopyTensors: fn('CopyTensors', `${S} f(void *env, void **src, void **dst, void *stream, size_t n)`),
    }
    // ORT_LOGGING_LEVEL_WARNING, as onnxruntime-node's default; the OrtEnv is one per process inside ORT, shared
    // (and reference-counted) with onnxruntime-node's own when both are loaded.
    this.env = this.out('CreateEnv', (o) => this.f.CreateEnv(2, 'onnxd', o))
    try {
      // OrtArenaAllocator, OrtMemTypeDefault: plain CPU memory, for tensors over memory this module owns.
      this.cpuInfo = this.out('CreateCpuMemoryInfo', (o) => this.f.CreateCpuMemoryInfo(1, 0, o))
      // ORT's default CPU allocator is owned by ORT and never released.
      this.allocator = this.out('GetAllocatorWithDefaultOptions', (o) => this.f.GetAllocatorWithDefaultOptions(o))
    } catch (e) {
      if (this.cpuInfo) this.f.ReleaseMemoryInfo(this.cpuInfo)
      this.f.ReleaseEnv(this.env)
      throw e
    }
    live.apis++
  }

  /** Loads libonnxruntime (by default onnxruntime-node's) and creates the OrtEnv; throws if either fails. */
  static load(libraryPath = defaultLibraryPath()): OrtCApi {
    return new OrtCApi(libraryPath)
  }

  /** Throws an OrtError for a non-null OrtStatus, after releasing it. */
  check(call: string, status: Ptr): void {
    if (!status) return
    const code = this.f.GetErrorCode(status) as number
    const message = this.f.GetErrorMessage(status) as string
    this.f.ReleaseStatus(status)
    throw new OrtError(call, code, message)
  }

  /** Calls `run` with a one-slot out array and returns what ORT wrote there. */
  out<T = bigint>(call: string, run: (out: unknown[]) => Ptr): T {
    const o: unknown[] = [null]
    this.check(call, run(o))
    return o[0] as T
  }

  /** The raw C functions, for CSession and Binding. */
  get fn(): Readonly<Record<keyof typeof API, Fn>> {
    return this.f
  }

  get cpuMemoryInfo(): bigint {
    return this.live(this.cpuInfo)
  }

  get defaultAllocator(): bigint {
    return this.live(this.allocator)
  }

  /** An ORT status made on purpose (tests of the error path). */
  makeStatus(code: number, message: string): bigint {
    return this.f.CreateStatus(code, message) as bigint
  }

  /**
   * A session over an ONNX file (external data is found next to it) or over model bytes (ORT copies what it needs
   * during the call; the bytes may be dropped after).
   */
  createSession(
    model: string | Uint8Array,
    opts: {
      intraOpThreads?: number
      graphOptimization?: GraphOptimization
      config?: Readonly<Record<string, string>>
      /** An execution provider appended by name (SessionOptionsAppendExecutionProvider), e.g. 'WebGPU', with its options. */
      ep?: { name: string; options?: Readonly<Record<string, string>> }
      /** Records every kernel's time (EnableProfiling) into a file named from this prefix; CSession.endProfiling() ends it. */
      profilePrefix?: string
    } = {},
  ): CSession {
    const env = this.live(this.env)
    const options = this.out('CreateSessionOptions', (o) => this.f.CreateSessionOptions(o))
    try {
      if (opts.intraOpThreads !== undefined) this.check('SetIntraOpNumThreads', this.f.SetIntraOpNumThreads(options, opts.intraOpThreads))
      if (opts.profilePrefix !== undefined) this.check('EnableProfiling', this.f.EnableProfiling(options, opts.profilePrefix))
      const level = OPT_LEVEL[opts.graphOptimization ?? 'all']
      this.check('SetSessionGraphOptimizationLevel', this.f.SetSessionGraphOptimizationLevel(options, level))
      // Session config entries (AddSessionConfigEntry), e.g. session.model_external_initializers_file_folder_path.
      for (const [k, v] of Object.entries(opts.config ?? {})) this.check('AddSessionConfigEntry', this.f.AddSessionConfigEntry(options, k, v))
      if (opts.ep) {
        const entries = Object.entries(opts.ep.options ?? {})
        const keys = entries.map(([k]) => k)
        const values = entries.map(([, v]) => v)
        const n = entries.length
        this.check(`SessionOptionsAppendExecutionProvider(${opts.ep.name})`, this.f.SessionOptionsAppendExecutionProvider(options, opts.ep.name, n ? keys : null, n ? values : null, n))
      }
      const session =
        typeof model === 'string'
          ? this.out('CreateSession', (o) => this.f.CreateSession(env, model, options, o))
          : this.out('CreateSessionFromArray', (o) => this.f.CreateSessionFromArray(env, model, model.byteLength, options, o))
      const s = new CSession(this, session, () => this.sessions.delete(s))
      this.sessions.add(s)
      return s
    } finally {
      this.f.ReleaseSessionOptions(options)
    }
  }

  /** Run options carrying `entries` (AddRunConfigEntry), e.g. `gpu_graph_id`; dispose() them. */
  runOptions(entries: Readonly<Record<string, string>>): RunOptions {
    return new RunOptions(this, entries)
  }

  /**
   * Copies each `src` tensor into its `dst` (same type and size) between host and device memory, or within either,
   * through the providers' data transfers (CopyTensors); it returns once the copies are done.
   */
  copyTensors(pairs: ReadonlyArray<readonly [{ readonly ortValue: bigint }, { readonly ortValue: bigint }]>): void {
    if (!pairs.length) return
    const src = pairs.map(([s]) => s.ortValue)
    const dst = pairs.map(([, d]) => d.ortValue)
    this.check('CopyTensors', this.f.CopyTensors(this.live(this.env), src, dst, null, pairs.length))
  }

  /** Releases every session still open, the memory info and the env. */
  dispose(): void {
    for (const s of [...this.sessions]) s.dispose()
    if (!this.env) return
    if (this.cpuInfo) this.f.ReleaseMemoryInfo(this.cpuInfo)
    this.f.ReleaseEnv(this.env)
    live.apis--
    this.cpuInfo = null
    this.env = null
    this.allocator = null
  }

  private live(p: Ptr): bigint {
    if (!p) throw new Error('OrtCApi used after dispose()')
    return p
  }
}

/**
 * Memory for tensors, with a stable address for ORT to read and write: a plain ArrayBuffer, whose backing store V8
 * allocates off its heap and never moves (only small typed arrays made without an ArrayBuffer live on the heap),
 * and whose address koffi.address() gives. JS reads and writes it through typed-array views, with no copy.
 * Not koffi.alloc() + koffi.view(): koffi 3.3.4 keeps about 200 bytes per view for good (measured), and malloc'ed
 * memory would turn a view kept past free() into a use-after-free; here a view keeps its memory alive.
 * dispose() drops the buffer (the GC frees it once no view holds it) and refuses while a Tensor or binding pins it.
 */
export class NativeBuffer {
  private ab: ArrayBuffer | null
  private ptr: bigint
  private pins = 0

  /**
   * A fresh buffer of `bytes`, or `over` an ArrayBuffer the caller already has (memory JS code owns, such as the
   * engine's KV cache; it must not be detached or resized while a tensor uses it). `over` must not be empty.
   */
  constructor(
    readonly bytes: number,
    over?: ArrayBuffer,
  ) {
    if (over && over.byteLength < Math.max(1, bytes)) throw new RangeError(`a ${over.byteLength}-byte ArrayBuffer cannot hold ${bytes} bytes`)
    // At least one byte, so that a zero-sized tensor still has an address.
    this.ab = over ?? new ArrayBuffer(Math.max(1, bytes))
    this.ptr = koffi().address(this.ab)
    if (!this.ptr) throw new Error(`no address for a ${bytes}-byte buffer`)
    live.buffers++
  }

  get address(): bigint {
    if (!this.ab) throw new Error('NativeBuffer used after dispose()')
    return this.ptr
  }

  get pinned(): number {
    return this.pins
  }

  /** A typed view over `length` elements from `byteOffset` (all by default). */
  view<T extends ElementType>(type: T, byteOffset = 0, length?: number): ViewOf<T> {
    if (!this.ab) throw new Error('NativeBuffer used after dispose()')
    const n = length ?? (this.bytes - byteOffset) / ELEMENT_BYTES[type]
    return viewOf(type, this.ab, byteOffset, n)
  }

  pin(): void {
    if (!this.ab) throw new Error('NativeBuffer used after dispose()')
    this.pins++
  }

  unpin(): void {
    if (this.pins <= 0) throw new Error('NativeBuffer unpinned more than pinned')
    this.pins--
  }

  dispose(): void {
    if (!this.ab) return
    if (this.pins > 0) throw new Error(`NativeBuffer still pinned by ${this.pins} tensor(s) or binding(s); dispose those first`)
    this.ab = null
    live.buffers--
  }
}

type ViewOf<T extends ElementType> = T extends 'float32'
  ? Float32Array
  : T extends 'int32'
    ? Int32Array
    : T extends 'int64'
      ? BigInt64Array
      : T extends 'float16'
        ? Uint16Array
        : T extends 'int8'
          ? Int8Array
          : Uint8Array

function viewOf<T extends ElementType>(type: T, ab: ArrayBuffer, byteOffset: number, n: number): ViewOf<T> {
  switch (type) {
    case 'float32':
      return new Float32Array(ab, byteOffset, n) as ViewOf<T>
    case 'int32':
      return new Int32Array(ab, byteOffset, n) as ViewOf<T>
    case 'int64':
      return new BigInt64Array(ab, byteOffset, n) as ViewOf<T>
    case 'float16':
      return new Uint16Array(ab, byteOffset, n) as ViewOf<T>
    case 'int8':
      return new Int8Array(ab, byteOffset, n) as ViewOf<T>
    default:
      return new Uint8Array(ab, byteOffset, n) as ViewOf<T>
  }
}

/** An OrtValue over (part of) a NativeBuffer: ORT reads and writes that memory in place. */
export class Tensor<T extends ElementType = ElementType> {
  private value: Ptr
  readonly bytes: number
  /** Set by alloc(): the buffer is the tensor's own, freed with it. */
  private ownsBuffer = false

  constructor(
    private readonly api: OrtCApi,
    readonly buffer: NativeBuffer,
    readonly type: T,
    readonly dims: readonly number[],
    readonly byteOffset = 0,
  ) {
    const count = dims.reduce((a, b) => a * b, 1)
    this.bytes = count * ELEMENT_BYTES[type]
    if (byteOffset < 0 || byteOffset + this.bytes > buffer.bytes) {
      throw new RangeError(`tensor [${dims.join(', ')}] ${type} at ${byteOffset} overruns its ${buffer.bytes}-byte buffer`)
    }
    const shape = BigInt64Array.from(dims.map(BigInt))
    const data = buffer.address + BigInt(byteOffset)
    this.value = api.out('CreateTensorWithDataAsOrtValue', (o) =>
      api.fn.CreateTensorWithDataAsOrtValue(api.cpuMemoryInfo, data, this.bytes, shape, dims.length, ELEMENT_TYPES[type], o),
    )
    buffer.pin()
    live.values++
  }

  /** A fresh buffer of exactly this shape, owned by the tensor (disposed with it). */
  static alloc<T extends ElementType>(api: OrtCApi, type: T, dims: readonly number[]): Tensor<T> {
    const buf = new NativeBuffer(dims.reduce((a, b) => a * b, 1) * ELEMENT_BYTES[type])
    try {
      const t = new Tensor(api, buf, type, dims)
      t.ownsBuffer = true
      return t
    } catch (e) {
      buf.dispose()
      throw e
    }
  }

  get ortValue(): bigint {
    if (!this.value) throw new Error('Tensor used after dispose()')
    return this.value
  }

  /** The tensor's elements, viewed in place. */
  get data(): ViewOf<T> {
    return this.buffer.view(this.type, this.byteOffset, this.bytes / ELEMENT_BYTES[this.type])
  }

  dispose(): void {
    if (!this.value) return
    // Its own buffer still bound somewhere: refuse before releasing anything, so nothing is left half-disposed.
    if (this.ownsBuffer && this.buffer.pinned > 1) throw new Error('Tensor still bound; clear or dispose the binding first')
    this.api.fn.ReleaseValue(this.value)
    this.value = null
    live.values--
    this.buffer.unpin()
    if (this.ownsBuffer) this.buffer.dispose()
  }
}

/** An output ORT allocated (BindOutputToDevice on CPU), copied out of ORT's memory. */
export interface OwnedOutput {
  type: ElementType
  dims: number[]
  data: Float32Array | Int32Array | BigInt64Array | Uint16Array | Int8Array | Uint8Array
}

/** A session created through the C API. */
export class CSession {
  private session: Ptr
  readonly inputNames: string[]
  readonly outputNames: string[]
  private readonly bindings = new Set<Binding>()

  constructor(
    private readonly api: OrtCApi,
    session: bigint,
    private readonly onDispose: () => void,
  ) {
    this.session = session
    try {
      this.inputNames = this.names('Input')
      this.outputNames = this.names('Output')
    } catch (e) {
      this.api.fn.ReleaseSession(session)
      throw e
    }
    live.sessions++
  }

  get handle(): bigint {
    if (!this.session) throw new Error('CSession used after dispose()')
    return this.session
  }

  /** A tensor over `buffer` (from `byteOffset`), for binding as input or output. */
  tensor<T extends ElementType>(buffer: NativeBuffer, type: T, dims: readonly number[], byteOffset = 0): Tensor<T> {
    return new Tensor(this.api, buffer, type, dims, byteOffset)
  }

  /** A tensor over its own fresh buffer. */
  alloc<T extends ElementType>(type: T, dims: readonly number[]): Tensor<T> {
    return Tensor.alloc(this.api, type, dims)
  }

  /**
   * The session's allocator for device memory named `memory` (ORT's OrtMemoryInfo name: 'WebGPU_Buf', 'Cuda'),
   * device 0: tensors made with it live on the device, and the session's kernels read and write them in place.
   */
  deviceAllocator(memory: string): DeviceAllocator {
    return new DeviceAllocator(this.api, this, memory)
  }

  binding(): Binding {
    const b = new Binding(this.api, this, () => this.bindings.delete(b))
    this.bindings.add(b)
    return b
  }

  /** Ends the profiling a session made with `profilePrefix` started, and returns the path of the file ORT wrote. */
  endProfiling(): string {
    const f = this.api.fn
    const p = this.api.out<bigint>('SessionEndProfiling', (o) => f.SessionEndProfiling(this.handle, this.api.defaultAllocator, o))
    try {
      return koffi().decode.string(p)
    } finally {
      this.api.check('AllocatorFree', f.AllocatorFree(this.api.defaultAllocator, p))
    }
  }

  /** Releases the session's bindings, then the session. Tensors stay the caller's to dispose. */
  dispose(): void {
    if (!this.session) return
    for (const b of [...this.bindings]) b.dispose()
    this.api.fn.ReleaseSession(this.session)
    this.session = null
    live.sessions--
    this.onDispose()
  }

  private names(kind: 'Input' | 'Output'): string[] {
    const f = this.api.fn
    const s = this.handle
    const n = Number(this.api.out<bigint | number>(`SessionGet${kind}Count`, (o) => f[`SessionGet${kind}Count`](s, o)))
    const out: string[] = []
    for (let i = 0; i < n; i++) {
      const p = this.api.out<bigint>(`SessionGet${kind}Name`, (o) => f[`SessionGet${kind}Name`](s, i, this.api.defaultAllocator, o))
      try {
        out.push(koffi().decode.string(p))
      } finally {
        this.api.check('AllocatorFree', f.AllocatorFree(this.api.defaultAllocator, p))
      }
    }
    return out
  }
}

/**
 * An OrtIoBinding: inputs and outputs bound by name to Tensors (memory this module owns) or, for outputs, to
 * memory ORT allocates on the CPU. Holds a pin on every bound tensor's buffer until cleared or disposed, because
 * ORT keeps its own reference to the bound values.
 */
export class Binding {
  private binding: Ptr
  private broken: string | null = null
  private readonly held = new Map<string, Tensor>()
  private readonly heldOut = new Map<string, Tensor | null>()

  constructor(
    private readonly api: OrtCApi,
    private readonly session: CSession,
    private readonly onDispose: () => void,
  ) {
    this.binding = api.out('CreateIoBinding', (o) => api.fn.CreateIoBinding(session.handle, o))
    live.bindings++
  }

  private get handle(): bigint {
    if (!this.binding) throw new Error('Binding used after dispose()')
    return this.binding
  }

  bindInput(name: string, t: Tensor): this {
    this.bind(`BindInput(${name})`, () => this.api.fn.BindInput(this.handle, name, t.ortValue))
    this.hold(this.held, name, t)
    return this
  }

  /** Binds an output to a tensor: ORT writes the result there, and fails if its shape differs. */
  bindOutput(name: string, t: Tensor): this {
    this.bind(`BindOutput(${name})`, () => this.api.fn.BindOutput(this.handle, name, t.ortValue))
    this.hold(this.heldOut, name, t)
    return this
  }

  /** Binds a device tensor as an input (ORT keeps its own reference to the value while bound). */
  bindDeviceInput(name: string, t: DeviceTensor): this {
    this.bind(`BindInput(${name})`, () => this.api.fn.BindInput(this.handle, name, t.ortValue))
    return this
  }

  /** Binds an output to a device tensor: the step writes it there, on the device (GroupQueryAttention's presents over its past). */
  bindDeviceOutput(name: string, t: DeviceTensor): this {
    this.bind(`BindOutput(${name})`, () => this.api.fn.BindOutput(this.handle, name, t.ortValue))
    this.hold(this.heldOut, name, null)
    return this
  }

  /** Lets ORT allocate the output on the CPU; read it with outputs(). */
  bindOutputToCpu(name: string): this {
    this.bind(`BindOutputToDevice(${name})`, () => this.api.fn.BindOutputToDevice(this.handle, name, this.api.cpuMemoryInfo))
    this.hold(this.heldOut, name, null)
    return this
  }

  /** Runs the session on this binding (with `options`, if given), blocking this thread until ORT returns. */
  run(options?: RunOptions): void {
    this.api.check('RunWithBinding', this.api.fn.RunWithBinding(this.session.handle, options?.handle ?? null, this.handle))
  }

  /**
   * A failed bind leaves ORT's binding inconsistent (1.30: an unknown input name is recorded in one of its two
   * tables and not the other, so every later BindInput fails with "Size mismatch"): the binding is then refused
   * until disposed, and the caller makes a new one.
   */
  private bind(call: string, f: () => Ptr): void {
    if (this.broken) throw new Error(`binding unusable after a failed bind (${this.broken}); dispose it and create another`)
    try {
      this.api.check(call, f())
    } catch (e) {
      this.broken = call
      throw e
    }
  }

  /**
   * Copies of every bound output, in binding order (GetBoundOutputValues). For outputs bound to tensors, read the
   * tensor instead: that costs no copy.
   */
  outputs(): OwnedOutput[] {
    const f = this.api.fn
    const alloc = this.api.defaultAllocator
    const values: unknown[] = [null]
    const count: unknown[] = [0]
    this.api.check('GetBoundOutputValues', f.GetBoundOutputValues(this.handle, alloc, values, count))
    const n = Number(count[0])
    const arr = values[0] as Ptr
    if (!arr || n === 0) return []
    const ptrs = koffi().decode(arr, koffi().array('void *', n)) as bigint[]
    try {
      return ptrs.map((v) => this.read(v))
    } finally {
      for (const v of ptrs) f.ReleaseValue(v)
      this.api.check('AllocatorFree', f.AllocatorFree(alloc, arr))
    }
  }

  clearInputs(): void {
    this.api.fn.ClearBoundInputs(this.handle)
    this.release(this.held)
  }

  clearOutputs(): void {
    this.api.fn.ClearBoundOutputs(this.handle)
    this.release(this.heldOut)
  }

  dispose(): void {
    if (!this.binding) return
    this.api.fn.ReleaseIoBinding(this.binding)
    this.binding = null
    live.bindings--
    this.release(this.held)
    this.release(this.heldOut)
    this.onDispose()
  }

  private hold(map: Map<string, Tensor | null>, name: string, t: Tensor | null): void {
    const old = map.get(name)
    if (t) t.buffer.pin()
    if (old) old.buffer.unpin()
    map.set(name, t)
  }

  private release(map: Map<string, Tensor | null>): void {
    for (const t of map.values()) t?.buffer.unpin()
    map.clear()
  }

  private read(value: bigint): OwnedOutput {
    const f = this.api.fn
    const info = this.api.out('GetTensorTypeAndShape', (o) => f.GetTensorTypeAndShape(value, o))
    let dims: number[]
    let code: number
    try {
      const rank = Number(this.api.out<bigint | number>('GetDimensionsCount', (o) => f.GetDimensionsCount(info, o)))
      const d = new BigInt64Array(rank)
      this.api.check('GetDimensions', f.GetDimensions(info, d, rank))
      dims = [...d].map(Number)
      code = this.api.out<number>('GetTensorElementType', (o) => f.GetTensorElementType(info, o))
    } finally {
      f.ReleaseTensorTypeAndShapeInfo(info)
    }
    const type = ELEMENT_BY_CODE.get(code)
    if (!type) throw new Error(`output element type ${code} is not supported`)
    const bytes = dims.reduce((a, b) => a * b, 1) * ELEMENT_BYTES[type]
    const data = this.api.out('GetTensorMutableData', (o) => f.GetTensorMutableData(value, o))
    const copy = new ArrayBuffer(bytes)
    if (bytes > 0) new Uint8Array(copy).set(koffi().decode(data, 'uint8_t', bytes) as Uint8Array)
    return { type, dims, data: viewOf(type, copy, 0, bytes / ELEMENT_BYTES[type]) }
  }
}

/** OrtMemoryInfoDeviceType values (MemoryInfoGetDeviceType). */
export const DEVICE_TYPES = { 0: 'cpu', 1: 'gpu', 2: 'fpga', 3: 'npu' } as const

/**
 * A session's allocator on its device (CreateAllocator over a device OrtMemoryInfo). Its tensors are device memory:
 * JS never reads them; the session's steps bind them as inputs and outputs.
 */
export class DeviceAllocator {
  private info: Ptr
  private allocator: Ptr

  constructor(
    private readonly api: OrtCApi,
    session: CSession,
    readonly memory: string,
  ) {
    // OrtDeviceAllocator (0), device 0, OrtMemTypeDefault (0).
    this.info = api.out('CreateMemoryInfo', (o) => api.fn.CreateMemoryInfo(memory, 0, 0, 0, o))
    try {
      this.allocator = api.out(`CreateAllocator(${memory})`, (o) => api.fn.CreateAllocator(session.handle, this.info, o))
    } catch (e) {
      api.fn.ReleaseMemoryInfo(this.info)
      throw e
    }
  }

  /** A fresh device tensor (contents undefined). */
  alloc(type: ElementType, dims: readonly number[]): DeviceTensor {
    const shape = BigInt64Array.from(dims.map(BigInt))
    const value = this.api.out('CreateTensorAsOrtValue', (o) => this.api.fn.CreateTensorAsOrtValue(this.live(this.allocator), shape, dims.length, ELEMENT_TYPES[type], o))
    return new DeviceTensor(this.api, value, type, dims, null)
  }

  /**
   * A tensor over the first elements of `t`'s device memory, with `dims` (a leading dimension cut short: the first
   * rows of a [rows, ...] tensor). It does not own the memory: dispose it before `t`.
   */
  prefix(t: DeviceTensor, dims: readonly number[]): DeviceTensor {
    const count = dims.reduce((a, b) => a * b, 1)
    if (count > t.count) throw new RangeError(`a [${dims.join(', ')}] view does not fit in [${t.dims.join(', ')}]`)
    const data = this.api.out('GetTensorMutableData', (o) => this.api.fn.GetTensorMutableData(t.ortValue, o))
    const shape = BigInt64Array.from(dims.map(BigInt))
    const bytes = count * ELEMENT_BYTES[t.type]
    // The view says exactly where its memory is: the memory info of the tensor it views (the provider's own device,
    // vendor included). A memory info made here by name alone can name a device ORT does not take for the provider's,
    // and ORT then copies the whole view between the two at every bind.
    const info = this.api.out('GetTensorMemoryInfo', (o) => this.api.fn.GetTensorMemoryInfo(t.ortValue, o))
    const value = this.api.out('CreateTensorWithDataAsOrtValue', (o) =>
      this.api.fn.CreateTensorWithDataAsOrtValue(info, data, bytes, shape, dims.length, ELEMENT_TYPES[t.type], o),
    )
    return new DeviceTensor(this.api, value, t.type, dims, t)
  }

  dispose(): void {
    if (this.allocator) this.api.fn.ReleaseAllocator(this.allocator)
    if (this.info) this.api.fn.ReleaseMemoryInfo(this.info)
    this.allocator = null
    this.info = null
  }

  private live(p: Ptr): bigint {
    if (!p) throw new Error('DeviceAllocator used after dispose()')
    return p
  }
}

/** OrtRunOptions with config entries, for Binding.run. */
export class RunOptions {
  private options: Ptr

  constructor(
    private readonly api: OrtCApi,
    entries: Readonly<Record<string, string>>,
  ) {
    this.options = api.out('CreateRunOptions', (o) => api.fn.CreateRunOptions(o))
    try {
      for (const [k, v] of Object.entries(entries)) api.check(`AddRunConfigEntry(${k})`, api.fn.AddRunConfigEntry(this.options, k, v))
    } catch (e) {
      api.fn.ReleaseRunOptions(this.options)
      throw e
    }
  }

  get handle(): bigint {
    if (!this.options) throw new Error('RunOptions used after dispose()')
    return this.options
  }

  dispose(): void {
    if (this.options) this.api.fn.ReleaseRunOptions(this.options)
    this.options = null
  }
}

/** An OrtValue in device memory (DeviceAllocator.alloc), or a view over one (prefix). */
export class DeviceTensor {
  private value: Ptr
  readonly count: number

  constructor(
    private readonly api: OrtCApi,
    value: bigint,
    readonly type: ElementType,
    readonly dims: readonly number[],
    /** The tensor whose memory this one views, or null when it owns its memory. */
    readonly of: DeviceTensor | null,
  ) {
    this.value = value
    this.count = dims.reduce((a, b) => a * b, 1)
    live.values++
  }

  get bytes(): number {
    return this.count * ELEMENT_BYTES[this.type]
  }

  get ortValue(): bigint {
    if (!this.value) throw new Error('DeviceTensor used after dispose()')
    return this.value
  }

  /** Where the tensor's memory is, as ORT says (GetTensorMemoryInfo, MemoryInfoGetDeviceType): 'gpu' on a GPU. */
  deviceType(): string {
    const info = this.api.out('GetTensorMemoryInfo', (o) => this.api.fn.GetTensorMemoryInfo(this.ortValue, o))
    const t: unknown[] = [0]
    this.api.fn.MemoryInfoGetDeviceType(info, t)
    return DEVICE_TYPES[t[0] as keyof typeof DEVICE_TYPES] ?? `device type ${String(t[0])}`
  }

  dispose(): void {
    if (!this.value) return
    this.api.fn.ReleaseValue(this.value)
    this.value = null
    live.values--
  }
}
