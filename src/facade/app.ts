// buildFacade: the public /v1 API as a fastify app that never listens. /v1 is one encapsulated context with the
// auth + rate-limit hook; errors leave through one handler. Imports: facade parts, store; never engine or node.
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify'
import type { RateLimitStore, Store } from '../store/interfaces.js'
import { Authenticator, credentialHeader } from './auth/authenticate.js'
import { SessionVerifier } from './auth/jwt.js'
import { resolveJwtSecret } from './auth/secret.js'
import { Meter, PriceTable } from './billing/meter.js'
import { UsageSpool } from './billing/spool.js'
import type { FacadeContext } from './context.js'
import { hardenHttp, httpServerOptions, LOG_REDACT } from '../shared/http-server.js'
import { RequestTracing, type Tracing } from '../shared/tracing.js'
import { facadeErrorHandler, facadeNotFoundHandler } from './errors.js'
import { specSchemaError } from '../shared/http-errors.js'
import { rateLimitHeaders, RateLimiter } from './limits/rate-limit.js'
import { Admission } from './limits/admission.js'
import { SequenceLimiter } from './limits/sequences.js'
import { HttpNodeClient, type NodeClient } from './node-client.js'
import type { FacadeOptions } from './options.js'
import './request.js'
import type { Resolve } from './node-sources.js'
import { createFacadeMetrics, requestEnd } from './metrics.js'
import { NodeRouter } from './router.js'
import { openRateLimits, openStore } from './stores.js'
import { StoreHealth } from './store-health.js'
import { accountRoutes } from './routes/account.js'
import { chatCompletionsRoute } from './routes/chat-completions/route.js'
import { completionsRoute } from './routes/completions/route.js'
import { responsesRoutes } from './routes/responses/route.js'
import { messagesRoutes } from './routes/messages/route.js'
import { modelsRoutes } from './routes/models.js'
import { usageRoute } from './routes/usage.js'

export interface FacadeDeps {
  /** Accounts, keys, usage. Default: SQLite in `options.dataDir` (closed with the app). */
  store: Store
  /** Rate-limit counters. Default: in process. */
  rateLimits: RateLimitStore
  /** The way to the nodes. Default: undici over HTTP. */
  nodeClient: NodeClient
  /** How the DNS names among the nodes resolve. Default: the system resolver. */
  resolve: Resolve
  /** Clock for windows, `created` and usage days. */
  now: () => number
  /** A pino logger instance to use as is; default: a logger at `options.logLevel` with credentials redacted. */
  logger: FastifyBaseLogger
  /** Where the default logger writes (default stdout). */
  logStream: { write(line: string): unknown }
  /** Poll node health every `healthIntervalMs` (default true); tests call `facade.router.refresh()` instead. */
  pollHealth: boolean
  /**
   * Traces (off without): a SERVER span per /v1 request, and a CLIENT span per call to a node (with the default
   * node client), which carries `traceparent`. The caller shuts it down after the app has closed.
   */
  tracing: Tracing | null
}

export type FacadeApp = FastifyInstance & { facade: FacadeContext }

export async function buildFacade(options: FacadeOptions, deps: Partial<FacadeDeps> = {}): Promise<FacadeApp> {
  const app: FastifyInstance = Fastify({
    // Failures before any route (Node's parser, bad URLs, over-long path parameters) in the error object.
    ...httpServerOptions(facadeErrorHandler),
    ...(deps.logger
      ? { loggerInstance: deps.logger }
      : { logger: { level: options.logLevel, redact: LOG_REDACT, ...(deps.logStream ? { stream: deps.logStream } : {}) } }),
    bodyLimit: options.bodyLimit,
    // Bodies are checked as sent: a number is not a string.
    ajv: { customOptions: { coerceTypes: false } },
    // A field of the wrong type is a 422, a missing one a 400 (the spec's rules).
    schemaErrorFormatter: specSchemaError,
    // One log line per request (below), not fastify's two: logging is a large part of the cost of a request.
    logController: new LogController({ disableRequestLogging: true }),
  })
  // First of all hooks: while closing, every request is a 503 with Retry-After before auth runs.
  hardenHttp(app, { bodyLimit: options.bodyLimit, refuseWhileClosing: true })
  // Before the /v1 hooks, so that a request refused by its credential or rate limit is traced too.
  const traces = deps.tracing ? new RequestTracing(deps.tracing) : null
  traces?.install(app, (request) => request.url.startsWith('/v1/'))
  app.addHook('onResponse', async (request, reply) => {
    request.log.info(
      { method: request.method, url: request.url, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 100) / 100 },
      'request',
    )
  })

  // First what can fail on bad configuration (a JWKS file), before anything is opened.
  const sessions = new SessionVerifier({
    // Without a JWKS, HS256 with the configured (or generated and persisted) secret.
    secret:
      options.jwtSecret !== undefined || (options.jwksUrl === undefined && options.jwksFile === undefined)
        ? resolveJwtSecret(options.dataDir, options.jwtSecret)
        : undefined,
    jwksUrl: options.jwksUrl,
    jwksFile: options.jwksFile,
    issuer: options.jwtIssuer,
    audience: options.jwtAudience,
    maxTtlS: options.jwtMaxTtlS,
  })
  const now = deps.now ?? Date.now
  // Every part gets the store through its guard: an outage is a 503 with Retry-After, counted, logged once.
  const storeHealth = new StoreHealth(deps.store ?? (await openStore(options)), { log: app.log })
  const store = storeHealth.store
  const rateLimits = deps.rateLimits ?? openRateLimits(options, (m) => app.log.warn(m))
  const nodeClient = deps.nodeClient ?? new HttpNodeClient({ timeoutMs: options.nodeTimeoutMs, tracing: deps.tracing })
  const router = new NodeRouter(options.nodes, nodeClient, {
    intervalMs: options.healthIntervalMs,
    dnsIntervalMs: options.dnsIntervalMs,
    affinityPrefixChars: options.affinityPrefixChars,
    resolve: deps.resolve,
    log: app.log,
    now,
  })
  const ctx: FacadeContext = {
    options,
    store,
    router,
    // Counters a round trip away (a networked backend) are hit while a known key is looked up.
    admission: new Admission(
      new Authenticator(store, sessions),
      new RateLimiter(rateLimits, { keyRpm: options.keyRpm, fleetRpm: options.fleetRpm }, now),
      rateLimits.failures !== undefined,
    ),
    sequences: new SequenceLimiter(options.keyMaxSequences),
    meter: new Meter(store, new PriceTable(options.prices, options.defaultPrice), {
      now,
      flushMs: options.billingFlushMs,
      flushTokens: options.billingFlushTokens,
      // Final records the store did not accept, on this facade's disk until it does.
      spool: new UsageSpool(options.dataDir),
      log: app.log,
    }),
    now,
    traces,
  }
  app.decorate('facade', ctx)
  storeHealth.onRecovered(() => ctx.meter.storeRecovered())

  app.addHook('onClose', async () => {
    storeHealth.close()
    await ctx.meter.close()
    router.stop()
    await nodeClient.close()
    if (!deps.rateLimits) await rateLimits.close()
    if (!deps.store) await store.close()
  })

  app.setErrorHandler(facadeErrorHandler)
  app.setNotFoundHandler(facadeNotFoundHandler)

  // Prometheus metrics of the facade itself (its nodes export their own): requests by endpoint, status and outcome,
  // their duration, rate-limit checks failed open, the store's state, its failed calls and the usage records spooled, and
  // each node's state as this facade's router sees it. No credential, as the nodes' /metrics and vLLM's.
  const metrics = createFacadeMetrics({
    router,
    rateLimitFailures: () => rateLimits.failures,
    store: { up: () => storeHealth.up, errors: () => storeHealth.errors(), spooled: () => ctx.meter.spooled },
  })
  // Every request once, when its response closes: answered in full, or cut off by a client that hung up (fastify's
  // onResponse runs only for the first, so a cancelled stream would go uncounted).
  app.addHook('onRequest', (request, reply, done) => {
    const t0 = performance.now()
    let finished = false
    reply.raw.once('finish', () => (finished = true))
    reply.raw.once('close', () => metrics.requestDone(requestEnd(request.routeOptions.url ?? 'unmatched', reply.raw, finished, (performance.now() - t0) / 1000)))
    done()
  })
  app.get('/metrics', { logLevel: 'warn' }, async (_request, reply) => reply.type(metrics.registry.contentType).send(await metrics.scrape()))

  // The facade's own health, for load balancers: ready while its store answers and at least one node is ready. No
  // credential. (Liveness is the port answering: a restart helps neither a store nor nodes that are down.)
  app.get('/health', async (_request, reply) => {
    const nodes = router.snapshot()
    const ready = storeHealth.up && nodes.some((n) => n.status === 'ready')
    const storeState = { status: storeHealth.up ? 'up' : 'down', usage_spooled: ctx.meter.spooled }
    // A shared counter backend that did not answer let requests through (fail open): how many, since start.
    const failOpen = rateLimits.failures !== undefined ? { rate_limit_fail_open: rateLimits.failures } : {}
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'unavailable', nodes, store: storeState, ...failOpen })
  })

  await app.register(
    async (v1) => {
      v1.decorateRequest('principal', null)
      // Credential (401), then rate limits (429): before the body is even read.
      v1.addHook('onRequest', async (request, reply) => {
        const want = request.routeOptions.config.auth
        if (!want) return
        const { principal, limit } = await ctx.admission.admit(credentialHeader(request.headers), want)
        request.principal = principal
        if (!limit) return
        reply.headers(rateLimitHeaders(limit, now()))
        if (limit.refused) throw limit.refused
      })
      modelsRoutes(v1, ctx)
      chatCompletionsRoute(v1, ctx)
      completionsRoute(v1, ctx)
      responsesRoutes(v1, ctx)
      messagesRoutes(v1, ctx)
      usageRoute(v1, ctx)
      accountRoutes(v1, ctx)
    },
    { prefix: '/v1' },
  )

  try {
    await app.ready()
    await ctx.meter.start() // settles what a previous run left in flight
    await router.refresh()
  } catch (e) {
    await app.close()
    throw e
  }
  if (deps.pollHealth !== false) router.start()
  return app as FacadeApp
}
