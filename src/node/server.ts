// Runs a worker node: the model (the embedded default is built on first use), metrics, the engine pool and the
// app; listens before the model loads (so /health says `loading`), starts the workers, then on shutdown drains and
// closes. What `onnxd node`, `onnxd serve` and the bench's node target call; the node's src/facade/server.ts.
// Imports: node app, options and metrics; the engine's entry; the builder (only to build the default model).
import { createEnginePool } from '../engine/index.js'
import { buildNode } from './app.js'
import { createMetrics, createRegistry } from './plugins/metrics.js'
import { DEFAULT_MODEL_DIR, servedModelId, toPoolOptions, type NodeOptions } from './options.js'
import { fetchHubModel, hubModelId } from './hub-model.js'
import type { Tracing } from '../shared/tracing.js'

export interface NodeHooks {
  /** After the node listens (before the model is ready), e.g. to start a co-located facade. */
  onListening?(url: string): Promise<void>
  /** Once the model has loaded and /health says ready, e.g. so that facade polls it now rather than at its next tick. */
  onReady?(): Promise<void>
  /** After in-flight requests drained, before the node closes, e.g. to close that facade. */
  onDrained?(): Promise<void>
}

export interface ServeNodeDeps {
  /** Traces of the node's completions (off without); the caller shuts it down once serveNode has returned. */
  tracing?: Tracing | null
  /** Where a hub model's HF_TOKEN, HF_ENDPOINT, HF_HUB_CACHE / HF_HOME and HF_HUB_OFFLINE come from; default process.env. */
  env?: NodeJS.ProcessEnv
}

/**
 * Runs a node until `shutdown` resolves, then drains it: readiness turns `draining`, in-flight requests get the
 * grace period, the app and the pool close. Resolves 0; rejects when it cannot listen or the model cannot load,
 * having released the port and the workers.
 */
export async function serveNode(opts: NodeOptions, shutdown: Promise<NodeJS.Signals>, hooks: NodeHooks = {}, deps: ServeNodeDeps = {}): Promise<number> {
  let modelDir = opts.model
  const hubId = hubModelId(opts.model)
  if (opts.model === DEFAULT_MODEL_DIR) {
    const { ensureDefaultModel } = await import('../builder/index.js')
    modelDir = await ensureDefaultModel(opts.model)
  } else if (hubId !== null) {
    // A hub id: its files for this dtype, fetched into (or found in) the Hugging Face cache, before anything loads.
    modelDir = await fetchHubModel(hubId, { revision: opts.revision, dtype: opts.dtype, env: deps.env })
  }
  const model = servedModelId(opts)
  const metrics = createMetrics(createRegistry(), model, opts.provider, opts.runtime)
  // The pool forwards every worker's step and finish observations to this one observer. Its workers start at
  // engine.ready(), below, so a port that cannot be bound starts none.
  const engine = createEnginePool({ ...toPoolOptions(opts), modelDir }, metrics.observer)
  const app = buildNode(opts, { engine, metrics, modelDir, tracing: deps.tracing })
  try {
    // Listen before the model has loaded, so /health can say `loading` and /health/live answers.
    await app.listen({ port: opts.port, host: opts.host })
  } catch (e) {
    await engine.close()
    throw e
  }
  app.log.info({ model, modelDir, provider: opts.provider, workers: opts.workers }, 'loading model')
  try {
    await hooks.onListening?.(`http://${opts.host}:${opts.port}`)
  } catch (e) {
    await app.close()
    await engine.close()
    throw e
  }

  let loaded: 'ready' | NodeJS.Signals
  try {
    loaded = await Promise.race([engine.ready().then(() => 'ready' as const), shutdown])
  } catch (e) {
    // A bad bundle or a missing provider: stop listening and release the workers before the caller reports it.
    await app.close()
    await engine.close()
    throw e
  }
  if (loaded === 'ready') {
    await hooks.onReady?.()
    const h = engine.health()
    app.log.info({ model: h.model, provider: h.provider, ...(h.weights ? { weights: h.weights } : {}), context_length: h.contextLength, url: `http://${opts.host}:${opts.port}` }, 'node ready')
  }
  const signal = loaded === 'ready' ? await shutdown : loaded
  app.log.info({ signal, in_flight: app.node.inFlight(), grace_ms: opts.drainTimeoutMs }, 'draining')
  const result = await app.node.drain(opts.drainTimeoutMs)
  app.log.info(result, result.drained ? 'drained' : 'grace period over; remaining requests ended')
  await hooks.onDrained?.()
  await app.close()
  await engine.close()
  return 0
}
