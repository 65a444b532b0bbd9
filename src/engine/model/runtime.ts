// Which ORT API runs a session's steps, and the one place that decides the default per provider. Its own module,
// free of imports, so that naming a runtime (options, health, the node's main thread) never loads koffi, which only
// the engine's session modules import.

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
