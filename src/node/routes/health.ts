// GET /health (readiness, with what a router needs to place requests) and GET /health/live (liveness).
// Imports: engine types, node state, the contract's health schema.
import type { FastifyInstance, LogLevel } from 'fastify'
import { Type } from '@sinclair/typebox'
import type { EngineClient, PoolHealth, Runtime } from '../../engine/index.js'
import { HEALTH_PATH, HealthBody } from '../../contract/health.js'
import type { NodeControl } from '../admission.js'

/** The /health body for a pool health snapshot; the node's own drain state overrides the pool's status. */
export function healthBody(h: PoolHealth, draining: boolean, chatTemplate?: boolean): HealthBody {
  const status = draining ? 'draining' : h.status
  return {
    ...(chatTemplate === undefined ? {} : { chat_template: chatTemplate }),
    status,
    models: h.model ? [h.model] : [],
    provider: h.provider,
    runtime: h.runtime,
    workers: { total: h.configuredWorkers, ready: h.workers.filter((w) => w.ready).length },
    running: h.running,
    waiting: h.waiting,
    // A router should send nothing to a node that is not ready, whatever slots its workers have free.
    capacity: status === 'ready' ? Math.max(0, h.capacity) : 0,
    free_slots: status === 'ready' ? Math.max(0, h.freeSlots) : 0,
    kv_cache: {
      used_bytes: h.kvUsedBytes,
      budget_bytes: h.kvBudgetBytes,
      usage: h.kvBudgetBytes > 0 ? Math.min(1, h.kvUsedBytes / h.kvBudgetBytes) : 0,
      prefix_cache_bytes: h.prefixCacheBytes,
    },
    restarts: h.restarts,
    context_length: h.contextLength,
  }
}

export interface HealthRouteDeps {
  engine: EngineClient
  control: NodeControl
  /** Model, provider and runtime to report when the engine cannot say (the configured ones). */
  fallback: { model: string; provider: string; runtime: Runtime }
  /** Log level of these routes: probes arrive every few seconds and would drown the request log. */
  logLevel: LogLevel
  /** Whether the bundle has a chat template (undefined: cannot tell); asked until it can tell, then kept. */
  chatTemplate?: () => boolean | undefined
}

export function registerHealthRoutes(app: FastifyInstance, deps: HealthRouteDeps): void {
  const schema = { response: { 200: HealthBody, 503: HealthBody } }
  let chatTemplate: boolean | undefined
  app.get(HEALTH_PATH, { schema, logLevel: deps.logLevel }, async (request, reply) => {
    chatTemplate ??= deps.chatTemplate?.()
    let body: HealthBody
    try {
      body = healthBody(deps.engine.health(), deps.control.draining, chatTemplate)
    } catch (err) {
      // A health() that throws is itself a sign of trouble: say unhealthy rather than answer 500.
      request.log.error({ err }, 'engine health failed')
      body = healthBody(unknownHealth(deps.fallback), deps.control.draining)
      body.status = deps.control.draining ? 'draining' : 'unhealthy'
    }
    return reply.code(body.status === 'ready' ? 200 : 503).send(body)
  })
  const live = { response: { 200: Type.Object({ status: Type.Literal('alive') }) } }
  app.get(`${HEALTH_PATH}/live`, { schema: live, logLevel: deps.logLevel }, async () => ({ status: 'alive' as const }))
}

function unknownHealth(f: HealthRouteDeps['fallback']): PoolHealth {
  return {
    status: 'unhealthy',
    model: f.model,
    provider: f.provider as PoolHealth['provider'],
    runtime: f.runtime,
    contextLength: null,
    configuredWorkers: 0,
    workers: [],
    running: 0,
    waiting: 0,
    capacity: 0,
    freeSlots: 0,
    kvUsedBytes: 0,
    prefixCacheBytes: 0,
    kvBudgetBytes: 0,
    restarts: 0,
  }
}
