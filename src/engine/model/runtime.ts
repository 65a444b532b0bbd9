// Which ORT API runs a session's steps. Its own module, free of imports, so that naming a runtime (options, health,
// the node's main thread) never loads koffi, which only the engine's session modules import.

/** 'js': onnxruntime-node's JS API; 'capi': ORT's C API through koffi (capi-session.ts). */
export type Runtime = 'js' | 'capi'
export const RUNTIMES: readonly Runtime[] = ['js', 'capi']

/**
 * What an operator asks for: a runtime, or 'auto' (the default): 'capi' on the CPU provider, falling back to 'js'
 * where the C API cannot load; 'js' on GPU providers, where the C-API runner does not run yet.
 */
export type RuntimeChoice = Runtime | 'auto'
export const RUNTIME_CHOICES: readonly RuntimeChoice[] = ['auto', ...RUNTIMES]

/** The runtime a choice asks for on `provider` (before the C API is tried; it may still fall back to 'js'). */
export function intendedRuntime(choice: RuntimeChoice | undefined, provider: string): Runtime {
  return provider === 'cpu' && (choice === 'capi' || choice === 'auto') ? 'capi' : 'js'
}
