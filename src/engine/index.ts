// The engine's public face for other layers (node HTTP, CLI, benchmarks): EngineClient, the interface a server
// holds, which EnginePool (pool/pool.ts, worker threads each running one Engine of engine.ts) implements; the
// pool's factory; and the option and event types they speak (pool/client.ts, and the plain data of types.ts), each
// defined in its own module and re-exported here. The node imports engine code only from here
// (test/architecture.test.ts holds it). Imports: engine, shared.
export { createEnginePool } from './pool/pool.js'
// One engine in this process, without the pool's threads: `onnxd generate`.
export { Engine } from './engine.js'
export type { EngineClient, EngineObserver, PoolHealth, PoolOptions, WorkerHealth } from './pool/client.js'

export type { EngineRequest, EngineStats, FinishObservation, FinishReason, PhaseMarks, SeqEvent, StepObservation, Timings, Usage } from './types.js'

export type { Dtype, Provider } from '../shared/model.js'
export { RUNTIMES, RUNTIME_CHOICES, defaultRuntime, intendedRuntime, parseWebgpuOptions, type Runtime, type RuntimeChoice } from './model/runtime.js'
