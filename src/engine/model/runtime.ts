// Which ORT API runs a session's steps. Its own module, free of imports, so that naming a runtime (options, health,
// the node's main thread) never loads koffi, which only the engine's session modules import.

/** 'js': onnxruntime-node's JS API (the default); 'capi': ORT's C API through koffi (capi-session.ts). */
export type Runtime = 'js' | 'capi'
export const RUNTIMES: readonly Runtime[] = ['js', 'capi']
