// The engine as the benchmarks see it: the one engine module src/bench/ and the scripts in bench/ import
// (test/architecture.test.ts holds it), so that what a benchmark reaches below the engine's entry (index.ts) is
// chosen here, each group with its reason, instead of file by file. Nothing here is for the product's layers: the
// node reaches the engine through index.ts only. Re-exports only. Imports: engine.

// What the node serves, as its own layers see it: the pool, its request and event types, the step runtimes and the
// production default (the standard run serves what `onnxd node` serves).
export { createEnginePool, RUNTIMES, defaultRuntime, type EngineRequest, type Runtime, type SeqEvent, type StepObservation } from './index.js'

// One engine in this process, without the pool's threads (engine.bench, grammar.bench, speculative.bench), and the
// batcher's defaults the serving benchmark reports its nodes ran with.
export { DEFAULT_BATCHER, Engine } from './engine.js'

// A model bundle read and loaded as the engine loads it: the quality check and the context sweep step its session
// themselves; the serving benchmark reads the bundle's facts for its report.
export { readBundle } from './model/bundle.js'
export { loadModel, type LoadedModel } from './model/load.js'

// A step's input and the engine's KV cache: the context sweep fills a cache to each context and times single steps
// over it, without the scheduler.
export type { ForwardInput, KvRows, KvTensor } from './model/step-io.js'
export { KV_CHUNK, KvCache, kvShapeOf } from './scheduler/kv.js'

// The prefix cache fed as the batcher feeds it, timed apart (prefix-cache.bench: what caching a prompt's blocks costs).
export { PrefixCache } from './scheduler/prefix-cache.js'

// The structured-output kit, timed apart from the step loop (grammar.bench: mask time per token).
export { Grammars, type TokenMask } from './generation/grammar.js'
export { applyMask } from './generation/sampling.js'

// The graph exactly as the engine runs it, and ORT's C API as the engine calls it: the ORT references (refs/: ORT
// alone doing the engine's work, the decode ceiling) must run the same graph, and the context sweep counts the bytes
// bound to the C-API runner's IoBinding.
export { externalDataConfig, LOGITS_AT_INPUT, prepareDecoderFile, type PreparedGraph } from './model/decoder-graph.js'
export { DataType, ModelProto, encodeModel, type ValueInfo } from './model/onnx-proto.js'
export { loadCApi } from './model/capi-session.js'
export { Binding, NativeBuffer, type CSession, type DeviceAllocator, type DeviceTensor, type ElementType, type Tensor } from './model/ort-capi.js'
