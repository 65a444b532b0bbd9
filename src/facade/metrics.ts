// The facade's Prometheus metrics (GET /metrics on its port, as vLLM serves its own): every request counted once as
// it ends, by endpoint, status and outcome (a client that hung up is its own outcome, no error), and its duration;
// rate-limit checks let through because the shared counter store (Redis) did not answer;
// the store's state (up or down), its failed calls per operation and the usage records spooled while it was down;
// and, read from the router at each scrape, each node's state, requests in flight and prefix-affinity placements.
// The /metrics text adds the process's own metrics. Imports: prom-client, shared metrics, the router's snapshot type.
import type { ServerResponse } from 'node:http'
import { Counter, Gauge, Histogram, Registry } from 'prom-client'
import { exposition, LATENCY_BUCKETS, outcomeOfStatus, type Outcome } from '../shared/metrics.js'
import type { NodeRouter } from './router.js'

/** How a request ended, as the request metrics count it. */
export interface RequestEnd {
  /** The route pattern (e.g. /v1/chat/completions), or 'unmatched'. */
  endpoint: string
  /** The HTTP status sent (a stream that failed: its error's status); 'none' when the client left before any. */
  status: string
  outcome: Outcome
  seconds: number
}

export interface FacadeMetrics {
  readonly registry: Registry
  /** Counts one request as it ended. */
  requestDone(end: RequestEnd): void
  /** The registry and the process's metrics, in the Prometheus text format. */
  scrape(): Promise<string>
}

/** Statuses of streams that ended with an error event after their 200 went out. */
const streamFailures = new WeakMap<ServerResponse, number>()

/** Marks a stream whose 200 went out but which ended with an error event of this status: it counts as that status. */
export function streamFailed(res: ServerResponse, status: number): void {
  streamFailures.set(res, status)
}

/**
 * How the response ended, when it closed: answered in full (`finished`: it emitted 'finish'; its status, or a failed
 * stream's error status), or cut off by the client (`client_gone`, with the status already sent if the headers went
 * out).
 */
export function requestEnd(endpoint: string, res: ServerResponse, finished: boolean, seconds: number): RequestEnd {
  if (!finished) return { endpoint, status: res.headersSent ? String(res.statusCode) : 'none', outcome: 'client_gone', seconds }
  const status = streamFailures.get(res) ?? res.statusCode
  return { endpoint, status: String(status), outcome: outcomeOfStatus(status), seconds }
}

type NodeView = ReturnType<NodeRouter['snapshot']>[number]

export interface FacadeMetricSources {
  router: Pick<NodeRouter, 'snapshot'>
  /** Requests let through since start because the counter store did not answer; undefined when in process. */
  rateLimitFailures: () => number | undefined
  /** The store as the facade sees it (StoreHealth, the meter's spool); without, it reads up, with no failures. */
  store?: {
    up(): boolean
    /** Failed calls since start, per operation. */
    errors(): ReadonlyMap<string, number>
    /** Usage records kept in the spool, waiting for the store. */
    spooled(): number
  }
}

export function createFacadeMetrics(src: FacadeMetricSources): FacadeMetrics {
  const registry = new Registry()
  const registers = [registry]
  const requests = new Counter({
    name: 'onnxd_facade_requests_total',
    help:
      'Requests the facade took, each counted once as it ended, by endpoint, HTTP status (4xx and 5xx are the error contract: 401, 402, 422, 429, 503, ...) and outcome (ok, client_error, server_error: the errors of the service, client_gone: the client hung up).',
    labelNames: ['endpoint', 'status', 'outcome'] as const,
    registers,
  })
  const duration = new Histogram({
    name: 'onnxd_facade_request_duration_seconds',
    help: 'Time from a request arriving to its answer ending (a stream: its last byte) or the client hanging up (outcome client_gone), by endpoint and outcome.',
    labelNames: ['endpoint', 'outcome'] as const,
    buckets: [...LATENCY_BUCKETS],
    registers,
  })
  new Counter({
    name: 'onnxd_facade_rate_limit_fail_open_total',
    help: 'Requests let through because the shared rate-limit counter store (Redis) did not answer in time (fail open).',
    registers,
    collect() {
      this.reset()
      this.inc(src.rateLimitFailures() ?? 0)
    },
  })
  new Gauge({
    name: 'onnxd_facade_store_up',
    help: 'Whether the store (SQLite or PostgreSQL) answers: 0 from a call that failed on an outage until a call or a probe succeeds (requests that need it get 503 meanwhile).',
    registers,
    collect() {
      this.set(src.store?.up() === false ? 0 : 1)
    },
  })
  new Counter({
    name: 'onnxd_facade_store_errors_total',
    help: 'Store calls that failed (outages and refused operations), by operation (findKeyByHash, recordCompletion, saveInFlight, ...).',
    labelNames: ['operation'] as const,
    registers,
    collect() {
      this.reset()
      for (const [operation, n] of src.store?.errors() ?? []) this.inc({ operation }, n)
    },
  })
  new Gauge({
    name: 'onnxd_facade_usage_spooled',
    help: "Completions' usage records the store did not accept, kept in the facade's spool until it does.",
    registers,
    collect() {
      this.set(src.store?.spooled() ?? 0)
    },
  })
  /** A series per node, read from the router's snapshot at each scrape (nodes that left drop out). */
  const perNode = (metric: typeof Gauge | typeof Counter, name: string, help: string, value: (n: NodeView) => number): void => {
    new metric({
      name,
      help,
      labelNames: ['node'] as const,
      registers,
      collect(this: Gauge<'node'> | Counter<'node'>) {
        this.reset()
        for (const n of src.router.snapshot()) this.inc({ node: n.url }, value(n))
      },
    })
  }
  perNode(Gauge, 'onnxd_facade_node_ready', 'Whether the node is in rotation (1: its last /health said ready), per node this facade routes to.', (n) =>
    n.status === 'ready' ? 1 : 0,
  )
  perNode(Gauge, 'onnxd_facade_node_inflight', 'Requests this facade has in flight on the node.', (n) => n.inflight)
  perNode(
    Counter,
    'onnxd_facade_affinity_routed_total',
    "Requests sent to the node because their prompt's prefix lives there (prefix affinity); the rest went by load.",
    (n) => n.affinity_routed,
  )
  return {
    registry,
    requestDone({ endpoint, status, outcome, seconds }) {
      requests.inc({ endpoint, status, outcome })
      duration.observe({ endpoint, outcome }, seconds)
    },
    scrape: () => exposition(registry),
  }
}
