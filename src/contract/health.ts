// GET /health of a worker node (DESIGN "Node internal contract"): readiness, and what a router needs to place
// requests. One schema: the node answers with it (src/node/routes/health.ts), the facade's router reads it.
// Imports: typebox.
import { Type, type Static } from '@sinclair/typebox'

export const HEALTH_PATH = '/health'

/** `ready` answers 200; the others 503. */
export const HealthStatus = Type.Union([Type.Literal('ready'), Type.Literal('loading'), Type.Literal('draining'), Type.Literal('unhealthy')])
export type HealthStatus = Static<typeof HealthStatus>

export const HealthBody = Type.Object({
  status: HealthStatus,
  models: Type.Array(Type.String()),
  provider: Type.String(),
  /** The ORT API the steps run on: 'js' (onnxruntime-node) or 'capi' (the C API); 'js' when 'capi' could not load. */
  runtime: Type.Optional(Type.Union([Type.Literal('js'), Type.Literal('capi')])),
  /** Worker threads configured, and those with the model loaded. */
  workers: Type.Object({ total: Type.Integer(), ready: Type.Integer() }),
  running: Type.Integer(),
  waiting: Type.Integer(),
  /** How many more sequences the node can take now (free running slots plus free queue places); 0 unless ready. */
  capacity: Type.Integer(),
  /**
   * Of those, how many start running at once rather than wait in a queue; 0 unless ready. A router that prefers one
   * node for another reason (a cached prefix) leaves it when this is 0 and another node has a free slot.
   */
  free_slots: Type.Optional(Type.Integer()),
  /** KV-cache bytes in use and budgeted, over all workers; `usage` is used / budget (0..1). */
  kv_cache: Type.Optional(
    Type.Object({ used_bytes: Type.Number(), budget_bytes: Type.Number(), usage: Type.Number(), prefix_cache_bytes: Type.Optional(Type.Number()) }),
  ),
  /** Worker threads restarted since start. */
  restarts: Type.Optional(Type.Integer()),
  /**
   * Whether the model's bundle has a chat template: with one it serves chat (`messages`) and raw prompts, without
   * one raw prompts only. Absent when the node cannot tell.
   */
  chat_template: Type.Optional(Type.Boolean()),
  /** The model's context length in tokens (null until a worker has loaded it). */
  context_length: Type.Optional(Type.Union([Type.Integer(), Type.Null()])),
})
/** The body as the node sends it; a router reads only what it needs and tolerates fields it does not know. */
export type HealthBody = Static<typeof HealthBody>
