// Which ORT API runs a session's steps, and the one place that decides the default per provider; and the WebGPU
// provider options that runtime passes on. Its own module, free of imports, so that naming a runtime or checking an
// option (options, health, the node's main thread) never loads koffi, which only the engine's session modules import.

/** 'js': onnxruntime-node's JS API; 'capi': ORT's C API through koffi (capi-session.ts). */
export type Runtime = 'js' | 'capi'
export const RUNTIMES: readonly Runtime[] = ['js', 'capi']

/**
 * What an operator asks for: a runtime, or 'auto' (the default everywhere: the node's --runtime, the pool, Engine.load,
 * a session): defaultRuntime's pick for the provider.
 */
export type RuntimeChoice = Runtime | 'auto'
export const RUNTIME_CHOICES: readonly RuntimeChoice[] = ['auto', ...RUNTIMES]

/**
 * The production default on `provider`, what 'auto' means: 'capi' on the CPU provider (falling back to 'js' where the
 * C API cannot load) and on WebGPU, where it keeps the KV cache on the device (device-kv.ts) for GroupQueryAttention
 * graphs and for plain-op ones that take a mask and position ids (a graph it cannot run there, such as a stacked
 * cache, falls back to 'js' with a warning saying why: session.ts deviceFormProblem); 'js' on cuda and tensorrt, whose
 * C-API path was never run (their provider is not on the npm registry). The node, the pool, Engine.load, a session
 * and the benchmark's standard target all take it from here.
 */
export function defaultRuntime(provider: string): Runtime {
  return provider === 'cpu' || provider === 'webgpu' ? 'capi' : 'js'
}

/**
 * The runtime a choice asks for on `provider` (no choice is 'auto'), before the C API is tried: it may still fall back
 * to 'js'. 'capi' on cuda or tensorrt is 'js' (the session warns).
 */
export function intendedRuntime(choice: RuntimeChoice | undefined, provider: string): Runtime {
  const c = choice ?? 'auto'
  if (c === 'auto') return defaultRuntime(provider)
  return provider === 'cpu' || provider === 'webgpu' ? c : 'js'
}

const BUFFER_CACHE = ['disabled', 'lazyRelease', 'simple', 'bucket'] as const

/**
 * The WebGPU provider options onnxd passes on (the node's --webgpu-options), each with the values ORT 1.30's provider
 * takes. ORT refuses a wrong value, but silently ignores a key it does not know, so onnxd names the keys it passes:
 * Dawn's validation of every GPU call (`validationMode`; ORT's default `basic`), the reuse of freed GPU buffers by kind
 * (the `...BufferCacheMode`s), and which adapter to prefer (`powerPreference`). Graph capture has its own option
 * (--graph-capture), the adapter its own (--device-id).
 */
export const WEBGPU_OPTIONS: Readonly<Record<string, readonly string[]>> = {
  validationMode: ['disabled', 'wgpuOnly', 'basic', 'full'],
  storageBufferCacheMode: BUFFER_CACHE,
  uniformBufferCacheMode: BUFFER_CACHE,
  queryResolveBufferCacheMode: BUFFER_CACHE,
  defaultBufferCacheMode: BUFFER_CACHE,
  powerPreference: ['high-performance', 'low-power'],
}

/**
 * `key=value` pairs, comma-separated (`validationMode=disabled,storageBufferCacheMode=bucket`), as WebGPU provider
 * options: the options, and a line for each pair that is not one of WEBGPU_OPTIONS with one of its values.
 */
export function parseWebgpuOptions(text: string): { options: Record<string, string>; problems: string[] } {
  const options: Record<string, string> = {}
  const problems: string[] = []
  for (const pair of text.split(',').map((p) => p.trim())) {
    const eq = pair.indexOf('=')
    const key = eq < 0 ? pair : pair.slice(0, eq).trim()
    const value = eq < 0 ? '' : pair.slice(eq + 1).trim()
    const values = Object.hasOwn(WEBGPU_OPTIONS, key) ? WEBGPU_OPTIONS[key] : undefined
    if (!values) problems.push(`'${key.slice(0, 64)}' is not a WebGPU option onnxd passes on (${Object.keys(WEBGPU_OPTIONS).join(', ')})`)
    else if (!values.includes(value)) problems.push(`${key} takes ${values.join(', ')}; given '${value.slice(0, 64)}'`)
    else if (Object.hasOwn(options, key)) problems.push(`${key} is given twice`)
    else options[key] = value
  }
  return { options, problems }
}
