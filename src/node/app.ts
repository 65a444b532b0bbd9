// Builds the worker node's HTTP app (fastify) over an EngineClient: /health, /health/live, /metrics,
// /internal/v1/completions and /internal/v1/tokenize, one error handler, graceful drain. Never listens: the CLI (or a
// test) does.
// Imports: node internals, engine types, fastify.
import Fastify, { type FastifyInstance, type LogLevel } from 'fastify'
import type { Registry } from 'prom-client'
import { intendedRuntime, type EngineClient } from '../engine/index.js'
import { AdmissionState, type NodeControl } from './admission.js'
import { servedModelId, type NodeOptions } from './options.js'
import { hardenHttp, httpServerOptions, LOG_REDACT } from '../shared/http-server.js'
import { nodeErrorHandler, registerErrorHandlers } from './plugins/errors.js'
import { createMetrics, createRegistry, registerMetricsRoute, type NodeMetrics } from './plugins/metrics.js'
import { COMPLETIONS_PATH } from '../contract/completions.js'
import { registerCompletionRoutes, requestIdFor } from './routes/completions.js'
import { registerHealthRoutes } from './routes/health.js'
import { registerTokenizeRoute } from './routes/tokenize.js'
import { bundleHasChatTemplate } from './chat-template.js'
import { RequestTracing, type Tracing } from '../shared/tracing.js'

export type { DrainResult, NodeControl } from './admission.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The node's admission state and graceful drain (see NodeControl). */
    node: NodeControl
  }
}

export interface NodeDeps {
  engine: EngineClient
  /** Where metrics register when `metrics` is not given (default: a fresh Registry, never the global one). */
  registry?: Registry
  /** Metrics whose observer was handed to the engine (the CLI creates them before the pool). */
  metrics?: NodeMetrics
  /** Log destination (default stdout); tests capture logs here. */
  logStream?: { write(line: string): void }
  /** The bundle directory the engine loads (default `opts.model`): /health says whether it has a chat template. */
  modelDir?: string
  /** Traces (off without): a SERVER span per completion, with its engine phases. The caller shuts it down. */
  tracing?: Tracing | null
}

export function buildNode(opts: NodeOptions, deps: NodeDeps): FastifyInstance {
  const { engine } = deps
  const model = servedModelId(opts)
  const metrics = deps.metrics ?? createMetrics(deps.registry ?? createRegistry(), model, opts.provider, opts.runtime)
  metrics.setHealthSource(() => engine.health())
  const state = new AdmissionState(engine, opts.drainTimeoutMs)
  const onError = nodeErrorHandler((code, request) => {
    if (request.routeOptions.url === COMPLETIONS_PATH) metrics.requestFailed(code)
  })

  const app = Fastify({
    // Failures before any route (Node's parser, bad URLs) in the error object; `return503OnClosing: false`: while
    // closing, our own drain answers 503 in the spec's error object.
    ...httpServerOptions(onError),
    logger: {
      level: opts.logLevel,
      redact: LOG_REDACT,
      ...(deps.logStream ? { stream: deps.logStream } : {}),
    },
    bodyLimit: opts.bodyLimit,
    genReqId: (req) => requestIdFor(req.headers['x-request-id']),
    // After the drain, close() must not wait on streams whose clients stopped reading.
    forceCloseConnections: true,
    ajv: {
      customOptions: {
        // The internal contract rejects unknown fields (400) instead of stripping them, and "5" is not a number.
        removeAdditional: false,
        coerceTypes: false,
        useDefaults: true,
      },
    },
  })

  app.decorate('node', state as NodeControl)
  hardenHttp(app, { bodyLimit: opts.bodyLimit })
  // Before the route's own hooks, so that the draining node's 503 is traced too.
  const traces = deps.tracing ? new RequestTracing(deps.tracing) : null
  traces?.install(app, (request) => request.method === 'POST' && request.routeOptions.url === COMPLETIONS_PATH)
  registerErrorHandlers(app, onError)
  // Probes and scrapes every few seconds would drown the request log: at most warn for them.
  const probeLogLevel: LogLevel = ['info', 'debug', 'trace'].includes(opts.logLevel) ? 'warn' : opts.logLevel
  const modelDir = deps.modelDir ?? opts.model
  registerHealthRoutes(app, {
    engine,
    control: state,
    fallback: { model, provider: opts.provider, runtime: intendedRuntime(opts.runtime, opts.provider) },
    logLevel: probeLogLevel,
    chatTemplate: () => (opts.chatTemplate !== undefined ? true : bundleHasChatTemplate(modelDir)),
  })
  registerMetricsRoute(app, metrics, probeLogLevel)
  registerCompletionRoutes(app, { engine, state, metrics, traces })
  registerTokenizeRoute(app, { engine, state })

  // close() without a drain first (tests, a second signal): stop admitting and end what is still running at once.
  app.addHook('preClose', async () => {
    state.stopAdmitting()
    state.abortAll()
    await state.whenIdle()
  })
  return app
}
