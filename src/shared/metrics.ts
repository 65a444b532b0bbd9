// What the node's and the facade's Prometheus metrics share: the latency buckets (one list for every latency
// histogram, from 1 ms, so that a tiny CPU model and a large GPU one both resolve), how a request ended (`outcome`:
// errors of the service apart from errors of the client and from clients that hung up), how a renamed metric keeps
// its old name for one release, and the process's own metrics (prom-client's `process_*` and `nodejs_*`), collected
// once per process whichever servers it runs. Imports: prom-client.
import { collectDefaultMetrics, Registry } from 'prom-client'

/**
 * Seconds: 1 ms up to 0.2 s in 1-2.5-5 and finer steps (a tiny model on a CPU answers in milliseconds), then vLLM's
 * request-latency buckets unchanged (0.3 s to 7680 s), so SLO queries written for vLLM (`le="0.5"`, `le="2.5"`)
 * still find their bucket.
 */
export const LATENCY_BUCKETS: readonly number[] = [
  0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
  0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
]

/**
 * How a request ended. `ok`: answered in full without an error; `client_error`: refused for something in the request
 * (4xx: credentials, limits, values); `server_error`: the service failed it (5xx, or a stream that ended with an
 * error event); `client_gone`: the client closed the connection before the answer ended, which is no error of the
 * service and none of the answer.
 */
export const OUTCOMES = ['ok', 'client_error', 'server_error', 'client_gone'] as const
export type Outcome = (typeof OUTCOMES)[number]

/** The outcome of an answer that reached its end with this HTTP status. */
export function outcomeOfStatus(status: number): Exclude<Outcome, 'client_gone'> {
  return status >= 500 ? 'server_error' : status >= 400 ? 'client_error' : 'ok'
}

/** A metric renamed (so that `promtool check metrics` accepts it), whose old name is still exported for one release. */
export interface Deprecation {
  /** The old name, still exported with the same type, labels and values. */
  name: string
  replacement: string
  /** The first release that no longer exports it. */
  removedIn: string
}

/** The HELP of a deprecated name, as vLLM marks its own: what it was, and what to query instead. */
export function deprecatedHelp(d: Deprecation, help: string): string {
  return `${help} DEPRECATED: use ${d.replacement}; this name is removed in ${d.removedIn}.`
}

let processRegistry: Registry | undefined

/**
 * prom-client's gauges named `_total`, which `promtool check metrics` refuses (`_total` belongs to counters); each is
 * the sum of its labelled sibling (`sum(nodejs_active_handles)`).
 */
export const DROPPED_PROCESS_METRICS = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'] as const

/**
 * prom-client's default metrics (CPU, memory, file descriptors, event-loop lag, heap, GC, Node's version) in a
 * registry of their own, made on first use and shared by every server of the process: they describe the process,
 * and each collection starts an event-loop monitor and a GC observer that live as long as it does. Worker threads
 * (the engine's, the tokenizers', the grammar threads) share the process's CPU and resident memory; the heap and
 * event-loop series are the main thread's. DROPPED_PROCESS_METRICS are left out.
 */
export function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry()
    collectDefaultMetrics({ register: processRegistry })
    for (const name of DROPPED_PROCESS_METRICS) processRegistry.removeSingleMetric(name)
  }
  return processRegistry
}

/** An app's own registry followed by the process's metrics, in the Prometheus text format. */
export async function exposition(own: Registry): Promise<string> {
  const [a, b] = await Promise.all([own.metrics(), processMetrics().metrics()])
  return a.endsWith('\n') || a === '' ? a + b : `${a}\n${b}`
}
