// `onnxd node`: runs one worker node (engine pool + internal HTTP contract) until SIGTERM/SIGINT, then drains:
// readiness turns `draining`, in-flight requests get the grace period, the pool closes, exit 0.
import { parseArgs } from 'node:util'
import { createEnginePool } from '../engine/pool/pool.js'
import { OnnxdError } from '../shared/errors.js'
import { buildNode } from '../node/app.js'
import { createMetrics, createRegistry } from '../node/plugins/metrics.js'
import {
  DEFAULT_MODEL_DIR,
  loadNodeOptions,
  NODE_ENV,
  NODE_FLAGS,
  NodeOptions,
  nodeFlags,
  readNodeConfig,
  servedModelId,
  toPoolOptions,
} from '../node/options.js'

function usage(): string {
  const rows = (Object.keys(NODE_ENV) as (keyof NodeOptions)[]).map((f) => {
    const flag = NODE_FLAGS[f]
    const arg = NodeOptions.properties[f].type === 'boolean' ? '' : ` ${flag === 'model' ? 'DIR' : 'V'}`
    const def = NodeOptions.properties[f].default as unknown
    return `  --${`${flag}${arg}`.padEnd(26)} ${NODE_ENV[f].padEnd(28)} ${def === undefined ? '' : `default ${JSON.stringify(def)}`}`
  })
  return `usage: onnxd node [options] [--config FILE]

Runs a worker node: the engine pool and GET /health, GET /metrics, POST /internal/v1/completions.
Flags win over ONNXD_* environment variables, which win over the "node" section of onnxd.config.json.
Without --model / ONNXD_MODEL, the embedded default model is built in ${DEFAULT_MODEL_DIR} on first use.

${rows.join('\n')}
  (kv-budget-mb default: a quarter of system memory, at most 4096)
`
}

export async function run(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = {
    config: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  }
  for (const [field, flag] of Object.entries(NODE_FLAGS)) {
    options[flag] = { type: NodeOptions.properties[field as keyof NodeOptions].type === 'boolean' ? 'boolean' : 'string' }
  }
  let values: Record<string, string | boolean | undefined>
  try {
    ;({ values } = parseArgs({ args: argv, options, strict: true, allowPositionals: false }))
  } catch (e) {
    // An unknown flag or a missing value is a configuration mistake: say so plainly, with the usage.
    throw new OnnxdError('config', `${(e as Error).message}\n\n${usage()}`)
  }
  if (values.help === true) {
    process.stdout.write(usage())
    return 0
  }
  const opts = loadNodeOptions(env, nodeFlags(values), readNodeConfig(typeof values.config === 'string' ? values.config : undefined))

  // Signals first: a SIGTERM during the model build or load must still shut down cleanly.
  return withShutdownSignals('onnxd node', (shutdown) => serveNode(opts, shutdown))
}

/**
 * The same signal again within this window is one request delivered twice, not a second one: a terminal's Ctrl-C
 * reaches the whole process group, and `npm start` forwards the SIGINT it got to this process as well.
 */
const REPEATED_SIGNAL_MS = 1000

/**
 * Runs `fn` with a promise that resolves on the first SIGTERM or SIGINT; a second signal exits at once, skipping
 * the rest of the grace period.
 */
export async function withShutdownSignals<T>(name: string, fn: (shutdown: Promise<NodeJS.Signals>) => Promise<T>): Promise<T> {
  let first: { signal: NodeJS.Signals; at: number } | null = null
  let onShutdown: (s: NodeJS.Signals) => void = () => {}
  const shutdown = new Promise<NodeJS.Signals>((resolve) => (onShutdown = resolve))
  const onSignal = (s: NodeJS.Signals): void => {
    if (first !== null) {
      if (s === first.signal && Date.now() - first.at < REPEATED_SIGNAL_MS) return
      process.stderr.write(`${name}: ${s} again; exiting without waiting for in-flight requests\n`)
      process.exit(1)
    }
    first = { signal: s, at: Date.now() }
    onShutdown(s)
  }
  process.on('SIGTERM', onSignal)
  process.on('SIGINT', onSignal)
  try {
    return await fn(shutdown)
  } finally {
    process.off('SIGTERM', onSignal)
    process.off('SIGINT', onSignal)
  }
}

export interface ServeHooks {
  /** After the node listens (before the model is ready), e.g. to start a co-located facade. */
  onListening?(url: string): Promise<void>
  /** After in-flight requests drained, before the node closes, e.g. to close that facade. */
  onDrained?(): Promise<void>
}

/** Runs a node until `shutdown` resolves, then drains it. Shared by `onnxd node` and `onnxd serve`. */
export async function serveNode(opts: NodeOptions, shutdown: Promise<NodeJS.Signals>, hooks: ServeHooks = {}): Promise<number> {
  let modelDir = opts.model
  if (opts.model === DEFAULT_MODEL_DIR) {
    const { ensureDefaultModel } = await import('../builder/index.js')
    modelDir = await ensureDefaultModel(opts.model)
  }
  const model = servedModelId(opts)
  const metrics = createMetrics(createRegistry(), model, opts.provider)
  // The pool forwards every worker's step and finish observations to this one observer.
  const engine = createEnginePool({ ...toPoolOptions(opts), modelDir }, metrics.observer)
  const app = buildNode(opts, { engine, metrics })
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
    // A bad bundle or a missing provider: stop listening and release the workers before main reports it.
    await app.close()
    await engine.close()
    throw e
  }
  if (loaded === 'ready') {
    const h = engine.health()
    app.log.info({ model: h.model, provider: h.provider, context_length: h.contextLength, url: `http://${opts.host}:${opts.port}` }, 'node ready')
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
