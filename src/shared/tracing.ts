// OpenTelemetry traces, optional and off by default. `tracingConfig` reads the standard OTEL_* variables from the env
// it is given (on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, unless
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none); `startTracing` loads the SDK with dynamic imports, so a
// process with tracing off never loads it, and builds one tracer provider per server (never the global one: `onnxd
// serve` runs a facade and a node, each under its own service name, and tests build many). Spans leave in batches
// over OTLP/HTTP (JSON); `shutdown()` flushes them. `RequestTracing` gives a fastify app one SERVER span per selected
// request, child of the W3C `traceparent` it brings, ended when the answer ends. The active request's context lives
// in the Tracing's own AsyncLocalStorage, so that an HTTP client deep in a call (the facade's node client) starts its
// CLIENT span under it without being handed it.
// The only importer of the OpenTelemetry SDK packages (test/architecture.test.ts holds it); `@opentelemetry/api`
// (no-op without an SDK) may be used where spans are made. Imports: shared errors, fastify types.
import { AsyncLocalStorage } from 'node:async_hooks'
import type { IncomingHttpHeaders } from 'node:http'
import {
  defaultTextMapGetter,
  defaultTextMapSetter,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api'
import type { FastifyError, FastifyInstance, FastifyRequest } from 'fastify'
import { asOnnxdError } from './http-errors.js'

/** What `startTracing` needs, read from OTEL_* variables by `tracingConfig`. */
export interface TracingConfig {
  serviceName: string
  /** The OTLP/HTTP traces URL spans are POSTed to (e.g. `http://collector:4318/v1/traces`). */
  url: string
  /** Extra request headers for the collector (OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TRACES_HEADERS). */
  headers: Record<string, string>
  /** Resource attributes besides `service.name` (OTEL_RESOURCE_ATTRIBUTES). */
  resource: Record<string, string>
  sampler: { kind: 'always_on' | 'always_off' | 'traceidratio'; parentBased: boolean; ratio: number }
  /** The batch span processor's settings (OTEL_BSP_*); undefined: the SDK's defaults. */
  batch: { scheduledDelayMillis?: number; maxQueueSize?: number; maxExportBatchSize?: number; exportTimeoutMillis?: number }
}

const SAMPLERS = ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'] as const

/** `k1=v1,k2=v2` with percent-encoded values (the OTEL_*_HEADERS and OTEL_RESOURCE_ATTRIBUTES form). */
function keyValues(name: string, raw: string | undefined): Record<string, string> {
  const out: Record<string, string> = {}
  for (const item of (raw ?? '').split(',')) {
    if (item.trim() === '') continue
    const eq = item.indexOf('=')
    if (eq <= 0) throw new Error(`${name} must be a list of key=value pairs separated by commas. Given: '${item.trim()}'`)
    try {
      out[decodeURIComponent(item.slice(0, eq).trim())] = decodeURIComponent(item.slice(eq + 1).trim())
    } catch {
      throw new Error(`${name} has a key or value that is not valid percent-encoding: '${item.trim()}'`)
    }
  }
  return out
}

function url(name: string, raw: string): string {
  let u: URL
  try {
    u = new URL(raw)
  } catch {
    throw new Error(`${name} must be an http:// or https:// URL. Given: '${raw}'`)
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`${name} must be an http:// or https:// URL. Given: '${raw}'`)
  return u.href
}

function integer(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const raw = env[name]?.trim()
  if (raw === undefined || raw === '') return undefined
  const n = Number(raw)
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${name} must be a positive integer. Given: '${raw}'`)
  return n
}

/**
 * Tracing's configuration from `env` (the standard OpenTelemetry variables), or null when tracing is off: no
 * OTLP endpoint, OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. `defaultServiceName` applies without
 * OTEL_SERVICE_NAME (or `service.name` in OTEL_RESOURCE_ATTRIBUTES). A value onnxd cannot honour (another exporter,
 * the gRPC or protobuf protocol, a bad URL) throws, naming the variable.
 */
export function tracingConfig(env: NodeJS.ProcessEnv, defaultServiceName: string): TracingConfig | null {
  const v = (name: string): string | undefined => {
    const s = env[name]?.trim()
    return s === undefined || s === '' ? undefined : s
  }
  if (v('OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return null
  const exporter = v('OTEL_TRACES_EXPORTER')?.toLowerCase()
  if (exporter === 'none') return null
  const traces = v('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT')
  const base = v('OTEL_EXPORTER_OTLP_ENDPOINT')
  if (traces === undefined && base === undefined) return null
  if (exporter !== undefined && exporter !== 'otlp') throw new Error(`OTEL_TRACES_EXPORTER must be 'otlp' or 'none' (onnxd exports OTLP only). Given: '${exporter}'`)
  for (const name of ['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'OTEL_EXPORTER_OTLP_PROTOCOL']) {
    const p = v(name)
    if (p !== undefined && p !== 'http/json') throw new Error(`${name} must be 'http/json' (onnxd exports OTLP over HTTP as JSON). Given: '${p}'`)
    if (p !== undefined) break // the signal's own setting wins over the general one
  }
  // The traces endpoint is used as given; the general one is a base to which the signal's path is added.
  const target =
    traces !== undefined
      ? url('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', traces)
      : new URL('v1/traces', url('OTEL_EXPORTER_OTLP_ENDPOINT', base!).replace(/\/?$/, '/')).href

  const resource = keyValues('OTEL_RESOURCE_ATTRIBUTES', v('OTEL_RESOURCE_ATTRIBUTES'))
  const serviceName = v('OTEL_SERVICE_NAME') ?? resource['service.name'] ?? defaultServiceName
  delete resource['service.name']

  const samplerName = (v('OTEL_TRACES_SAMPLER') ?? 'parentbased_always_on').toLowerCase()
  if (!(SAMPLERS as readonly string[]).includes(samplerName)) throw new Error(`OTEL_TRACES_SAMPLER must be one of ${SAMPLERS.join(', ')}. Given: '${samplerName}'`)
  let ratio = 1
  const arg = v('OTEL_TRACES_SAMPLER_ARG')
  if (samplerName.endsWith('traceidratio') && arg !== undefined) {
    ratio = Number(arg)
    if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1) throw new Error(`OTEL_TRACES_SAMPLER_ARG must be a number in [0, 1]. Given: '${arg}'`)
  }

  return {
    serviceName,
    url: target,
    headers: { ...keyValues('OTEL_EXPORTER_OTLP_HEADERS', v('OTEL_EXPORTER_OTLP_HEADERS')), ...keyValues('OTEL_EXPORTER_OTLP_TRACES_HEADERS', v('OTEL_EXPORTER_OTLP_TRACES_HEADERS')) },
    resource,
    sampler: { kind: samplerName.replace('parentbased_', '') as TracingConfig['sampler']['kind'], parentBased: samplerName.startsWith('parentbased_'), ratio },
    batch: {
      scheduledDelayMillis: integer(env, 'OTEL_BSP_SCHEDULE_DELAY'),
      maxQueueSize: integer(env, 'OTEL_BSP_MAX_QUEUE_SIZE'),
      maxExportBatchSize: integer(env, 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE'),
      exportTimeoutMillis: integer(env, 'OTEL_BSP_EXPORT_TIMEOUT'),
    },
  }
}

/** One server's tracer: its provider, exporter, W3C propagator and active-request context. */
export interface Tracing {
  readonly serviceName: string
  readonly tracer: Tracer
  /** The context made active by `with` (the root context outside any). */
  active(): Context
  /** Runs `fn` with `ctx` active: spans started inside it, however deep, may take it as their parent. */
  with<T>(ctx: Context, fn: () => T): T
  /** The remote parent a request's `traceparent` (and `tracestate`) names; the root context without one. */
  extract(headers: IncomingHttpHeaders): Context
  /** Writes `traceparent` (and `tracestate`) for the span of `ctx` into `headers`. */
  inject(ctx: Context, headers: Record<string, string>): void
  /** Exports what has ended so far. */
  forceFlush(): Promise<void>
  /** Exports what has ended and stops; bounded by SHUTDOWN_TIMEOUT_MS, so a dead collector cannot hold a shutdown. */
  shutdown(): Promise<void>
}

export interface TracingDeps {
  /** Hears the first failed export, and the first success after failures (default: a line on stderr). */
  warn?: (message: string) => void
}

/** Longest wait for the last batch at shutdown. */
export const SHUTDOWN_TIMEOUT_MS = 5000

/** Now as epoch milliseconds with sub-millisecond precision. `performance.timeOrigin` is the process's, the same in
 * every worker thread, so instants read in the engine's threads compare with it. */
export const epochNow = (): number => performance.timeOrigin + performance.now()

/** Loads the SDK and starts a tracer provider for `config` (not registered globally). */
export async function startTracing(config: TracingConfig, deps: TracingDeps = {}): Promise<Tracing> {
  const [sdk, otlp, resources, core] = await Promise.all([
    import('@opentelemetry/sdk-trace'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/core'),
  ])
  const warn = deps.warn ?? ((m: string) => void process.stderr.write(`onnxd: tracing (${config.serviceName}): ${m}\n`))
  const inner = new otlp.OTLPTraceExporter({ url: config.url, headers: config.headers })
  // The SDK reports failed exports to its diagnostic logger, which is silent unless set globally: say it here.
  let failing = false
  const exporter: import('@opentelemetry/sdk-trace').SpanExporter = {
    export(spans, done) {
      inner.export(spans, (result) => {
        const ok = result.code === core.ExportResultCode.SUCCESS
        if (!ok && !failing) warn(`exporting spans to ${config.url} failed: ${result.error?.message ?? 'unknown error'}`)
        else if (ok && failing) warn(`exporting spans to ${config.url} works again`)
        failing = !ok
        done(result)
      })
    },
    shutdown: () => inner.shutdown(),
    forceFlush: () => inner.forceFlush(),
  }
  const ratio = config.sampler.kind === 'always_on' ? 1 : config.sampler.kind === 'always_off' ? 0 : config.sampler.ratio
  const root = ratio >= 1 ? new sdk.AlwaysOnSampler() : ratio <= 0 ? new sdk.AlwaysOffSampler() : new sdk.TraceIdRatioBasedSampler(ratio)
  const batch = Object.fromEntries(Object.entries(config.batch).filter(([, x]) => x !== undefined))
  const provider = new sdk.TracerProvider({
    resource: resources.defaultResource().merge(resources.resourceFromAttributes({ ...config.resource, 'service.name': config.serviceName })),
    sampler: config.sampler.parentBased ? new sdk.ParentBasedSampler({ root }) : root,
    spanProcessors: [new sdk.BatchSpanProcessor({ ...batch, exporter })],
  })
  const propagator = new core.W3CTraceContextPropagator()
  const als = new AsyncLocalStorage<Context>()
  let stopped: Promise<void> | null = null
  return {
    serviceName: config.serviceName,
    tracer: provider.getTracer('onnxd'),
    active: () => als.getStore() ?? ROOT_CONTEXT,
    with: (ctx, fn) => als.run(ctx, fn),
    extract: (headers) => propagator.extract(ROOT_CONTEXT, headers, defaultTextMapGetter),
    inject: (ctx, headers) => propagator.inject(ctx, headers, defaultTextMapSetter),
    forceFlush: () => provider.forceFlush(),
    shutdown: () =>
      (stopped ??= new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, SHUTDOWN_TIMEOUT_MS)
        timer.unref()
        provider.shutdown().then(
          () => {
            clearTimeout(timer)
            resolve()
          },
          (e: unknown) => {
            clearTimeout(timer)
            warn(`closing the span exporter failed: ${(e as Error).message}`)
            resolve()
          },
        )
      })),
  }
}

/** Tracing as `env` configures it, or null when it is off (the SDK is then never loaded). */
export async function openTracing(env: NodeJS.ProcessEnv, defaultServiceName: string, deps: TracingDeps = {}): Promise<Tracing | null> {
  const config = tracingConfig(env, defaultServiceName)
  return config ? startTracing(config, deps) : null
}

/** One request's SERVER span. */
export interface RequestSpan {
  readonly span: Span
  /** The span's context: the parent of the spans made for this request. */
  readonly context: Context
  /** Records the error code answered (`error.type`); the status is Error only for a 5xx, as OpenTelemetry has it. */
  errorType(type: string): void
  /** The request failed whatever its HTTP status (a stream that ended in an error after its 200). */
  fail(type: string): void
  /** Runs as the answer ends, before the span does; `failure` is the error type when the request failed. */
  onEnd(fn: (endAt: number, failure: string | null) => void): void
}

/** SERVER spans for a fastify app's requests. */
export class RequestTracing {
  readonly #spans = new WeakMap<FastifyRequest, RequestSpan>()

  constructor(readonly tracing: Tracing) {}

  /**
   * Starts a span for each request `select` takes, at its first hook (install before the app's own hooks), child of
   * its `traceparent`; it ends when the response closes: finished (with its status) or cut off (`client_gone`).
   */
  install(app: FastifyInstance, select: (request: FastifyRequest) => boolean): void {
    const { tracer } = this.tracing
    app.addHook('onRequest', (request, reply, done) => {
      if (!select(request)) return done()
      const startedAt = epochNow()
      const route = request.routeOptions.url
      const parent = this.tracing.extract(request.headers)
      const span = tracer.startSpan(
        route ? `${request.method} ${route}` : request.method,
        {
          kind: SpanKind.SERVER,
          startTime: startedAt,
          attributes: {
            'http.request.method': request.method,
            ...(route ? { 'http.route': route } : {}),
            'url.path': request.url.split('?')[0]!,
            'url.scheme': request.protocol,
            'client.address': request.ip,
          },
        },
        parent,
      )
      let errorType: string | null = null
      let failed: string | null = null
      const ends: ((endAt: number, failure: string | null) => void)[] = []
      const raw = reply.raw
      raw.once('close', () => {
        const endAt = epochNow()
        const finished = raw.writableFinished
        const status = raw.statusCode
        const failure = failed ?? (!finished ? 'client_gone' : status >= 400 ? (errorType ?? String(status)) : null)
        if (raw.headersSent) span.setAttribute('http.response.status_code', status)
        if (failure !== null) span.setAttribute('error.type', failure)
        if (failed !== null || !finished || status >= 500) span.setStatus({ code: SpanStatusCode.ERROR, message: failure ?? undefined })
        for (const fn of ends) {
          try {
            fn(endAt, failure)
          } catch (e) {
            request.log.warn({ err: e }, 'making spans failed')
          }
        }
        span.end(endAt)
      })
      this.#spans.set(request, {
        span,
        context: trace.setSpan(parent, span),
        errorType: (type) => void (errorType = type),
        fail: (type) => void (failed ??= type),
        onEnd: (fn) => void ends.push(fn),
      })
      done()
    })
    // After the app's error handler has answered: the code it answered with.
    app.addHook('onError', (request, _reply, error: FastifyError, done) => {
      this.#spans.get(request)?.errorType(asOnnxdError(error, request).err.code)
      done()
    })
  }

  /** The request's span, if it has one. */
  of(request: FastifyRequest): RequestSpan | undefined {
    return this.#spans.get(request)
  }

  /** Runs `fn` with the request's span active (see Tracing.with); without a span, just runs it. */
  run<T>(request: FastifyRequest, fn: () => T): T {
    const s = this.#spans.get(request)
    return s ? this.tracing.with(s.context, fn) : fn()
  }
}
