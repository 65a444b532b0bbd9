// The node's Prometheus metrics: vLLM's metric set under an `onnxd_` prefix, in an app-owned Registry (never the
// global one), fed by the engine's EngineObserver (histograms, counters) and by pool health at scrape time (gauges);
// its /metrics adds the process's own metrics (shared/metrics.ts). Imports: engine types, shared errors and metrics,
// prom-client.
import type { FastifyInstance, LogLevel } from 'fastify'
import { Counter, Gauge, Histogram, Registry } from 'prom-client'
import { intendedRuntime, type EngineObserver, type FinishObservation, type PoolHealth, type RuntimeChoice, type StepObservation } from '../../engine/index.js'
import { errorStatus, type ErrorCode } from '../../shared/errors.js'
import { deprecatedHelp, exposition, LATENCY_BUCKETS, outcomeOfStatus, type Deprecation, type Outcome } from '../../shared/metrics.js'

/**
 * The buckets of each histogram. Latencies start at 1 ms (a tiny model on a CPU) and keep vLLM's boundaries above
 * (vllm/v1/metrics/loggers.py), so dashboards and SLO queries written for vLLM carry over.
 */
export const BUCKETS = {
  /** vLLM's, with 2.5 ms added. */
  ttft: [0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0],
  /** vLLM's (from 10 ms), with 1 to 7.5 ms below: a small model's decode step takes a few milliseconds. */
  tpot: [0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0],
  /** End-to-end and queue time: shared/metrics.ts's LATENCY_BUCKETS (vLLM's from 0.3 s, finer below from 1 ms). */
  requestLatency: LATENCY_BUCKETS,
  iterationTokens: [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
  /**
   * Ours: rows per step on whole rows, one bucket per row count up to 8, then four per doubling up to 512. A
   * quantile interpolated inside a bucket rounds up (ceil) to that bucket's bound: exact up to 8 rows.
   */
  batchSize: [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512],
  /** Ours: one forward step, from sub-millisecond tiny-model decode to multi-second long prefills on CPU. */
  stepSeconds: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0],
  /** vLLM's build_1_2_5_buckets, up to 128k tokens (the context length is unknown when metrics are built). */
  requestTokens: build125(131072),
} as const

/**
 * Names renamed so that `promtool check metrics` accepts them (`_total` belongs to counters): the old names are still
 * exported, with the same values and "DEPRECATED" in their HELP, until the release named here.
 */
export const DEPRECATED_METRICS: readonly Deprecation[] = [
  { name: 'onnxd_iteration_tokens_total', replacement: 'onnxd_iteration_tokens', removedIn: '0.3.0' },
  { name: 'onnxd_workers_total', replacement: 'onnxd_workers', removedIn: '0.3.0' },
]
const deprecation = (replacement: string): Deprecation => DEPRECATED_METRICS.find((d) => d.replacement === replacement)!

function build125(max: number): number[] {
  const out: number[] = []
  for (let exp = 1; ; exp *= 10) {
    for (const m of [1, 2, 5]) {
      if (m * exp > max) return out
      out.push(m * exp)
    }
  }
}

export const FINISH_REASONS = ['stop', 'length', 'abort', 'error'] as const
const PHASES = ['prefill', 'decode'] as const

export interface NodeMetrics {
  readonly registry: Registry
  /** Hand this to createEnginePool: the pool forwards every worker's observations to it. */
  readonly observer: EngineObserver
  /** Where scrape-time gauges read from (the engine's health()); until set, they read zero. */
  setHealthSource(source: () => PoolHealth): void
  /**
   * The registry in the Prometheus text format, with scrape-time gauges read from one health snapshot, followed by
   * the process's metrics (`process_*`, `nodejs_*`).
   */
  scrape(): Promise<string>
  /** Counts a completion answered with an error (rejected at admission, or failed after acceptance). */
  requestFailed(code: ErrorCode | 'client_gone'): void
}

/** A fresh Registry for one app (the global one throws "already registered" when an app is built twice). */
export function createRegistry(): Registry {
  return new Registry()
}

/**
 * Registers every onnxd metric in `registry`. `modelName` labels the request metrics (vLLM's `model_name`);
 * `provider` and `runtime` are the configured ones (default 'auto'), used by `onnxd_info` when the health source
 * cannot say which run.
 */
export function createMetrics(registry: Registry, modelName: string, provider: string, runtime?: RuntimeChoice): NodeMetrics {
  const configuredRuntime = intendedRuntime(runtime, provider)
  let health: (() => PoolHealth) | null = null
  const m = { model_name: modelName }
  const registers = [registry]
  const L = ['model_name'] as const

  /** Health as of this scrape: one read per scrape keeps the gauges consistent with each other. */
  let snapshot: PoolHealth | null | undefined
  const read = (): PoolHealth | null => {
    if (snapshot !== undefined) return snapshot
    try {
      return health ? health() : null
    } catch {
      return null // a failing health source must not fail the whole scrape; the gauges read zero
    }
  }
  const gauge = (name: string, help: string, value: (h: PoolHealth) => number): Gauge<'model_name'> =>
    new Gauge({
      name,
      help,
      labelNames: L,
      registers,
      collect() {
        const h = read()
        this.set(m, h ? value(h) : 0)
      },
    })

  gauge('onnxd_num_requests_running', 'Number of sequences in running batches (prefill or decode).', (h) => h.running)
  gauge('onnxd_num_requests_waiting', 'Number of sequences waiting for admission to a batch.', (h) => h.waiting)
  gauge('onnxd_kv_cache_usage_perc', 'KV-cache usage over all workers. 1 means 100 percent usage.', (h) =>
    h.kvBudgetBytes > 0 ? Math.min(1, h.kvUsedBytes / h.kvBudgetBytes) : 0,
  )
  gauge('onnxd_kv_cache_used_bytes', 'KV-cache bytes in use over all workers.', (h) => h.kvUsedBytes)
  gauge('onnxd_prefix_cache_bytes', 'Prefix-cache bytes over all workers (within the KV budget, evicted as requests need the room).', (h) => h.prefixCacheBytes)
  gauge('onnxd_kv_cache_budget_bytes', 'KV-cache bytes budgeted over all workers.', (h) => h.kvBudgetBytes)
  const workersHelp = 'Engine worker threads configured (--workers), loaded or not: onnxd_workers_ready below it means some are loading or being replaced.'
  gauge('onnxd_workers', workersHelp, (h) => h.configuredWorkers)
  gauge(deprecation('onnxd_workers').name, deprecatedHelp(deprecation('onnxd_workers'), workersHelp), (h) => h.configuredWorkers)
  gauge('onnxd_workers_ready', 'Engine worker threads with the model loaded and not being replaced.', (h) => h.workers.filter((w) => w.ready).length)

  new Gauge({
    name: 'onnxd_info',
    help: 'Always 1; labels name the served model, the execution provider that actually runs it, and the ORT API its steps run on (js or capi).',
    labelNames: ['model_name', 'provider', 'runtime'] as const,
    registers,
    collect() {
      const h = read()
      // A CPU fallback changes the provider after start: report the one running, one series only.
      this.reset()
      this.set({ model_name: h?.model || modelName, provider: h?.provider ?? provider, runtime: h?.runtime ?? configuredRuntime }, 1)
    },
  })

  const histogram = <T extends string>(name: string, help: string, buckets: readonly number[], labelNames: readonly T[]) =>
    new Histogram<T>({ name, help, buckets: [...buckets], labelNames, registers })

  const ttft = histogram('onnxd_time_to_first_token_seconds', 'Histogram of time to first token in seconds.', BUCKETS.ttft, L)
  const tpot = histogram('onnxd_time_per_output_token_seconds', 'Histogram of mean time per output token (after the first) in seconds.', BUCKETS.tpot, L)
  const itl = histogram('onnxd_inter_token_latency_seconds', 'Histogram of time between consecutive output tokens in seconds.', BUCKETS.tpot, L)
  const e2e = histogram('onnxd_e2e_request_latency_seconds', 'Histogram of end-to-end request latency in seconds.', BUCKETS.requestLatency, L)
  const queue = histogram('onnxd_request_queue_time_seconds', 'Histogram of time spent waiting for admission in seconds.', BUCKETS.requestLatency, L)
  const promptHist = histogram('onnxd_request_prompt_tokens', 'Histogram of prompt tokens per request.', BUCKETS.requestTokens, L)
  const genHist = histogram('onnxd_request_generation_tokens', 'Histogram of generated tokens per request.', BUCKETS.requestTokens, L)
  const PL = ['model_name', 'phase'] as const
  const iterHelp = "Histogram of tokens per engine step: the tokens its rows were fed, padding left out, a decode step's draft tokens included."
  const iterTokens = histogram('onnxd_iteration_tokens', iterHelp, BUCKETS.iterationTokens, PL)
  const iterTokensOld = histogram(deprecation('onnxd_iteration_tokens').name, deprecatedHelp(deprecation('onnxd_iteration_tokens'), iterHelp), BUCKETS.iterationTokens, PL)
  const batchSize = histogram('onnxd_batch_size', 'Histogram of sequences (rows) per engine step.', BUCKETS.batchSize, PL)
  const stepSeconds = histogram('onnxd_batch_step_seconds', "Histogram of one engine step's forward pass (ONNX Runtime's run, with the graph's argmax on greedy steps) in seconds; the scheduling, cache copies and sampling around it are not in it.", BUCKETS.stepSeconds, PL)

  const promptTokens = new Counter({ name: 'onnxd_prompt_tokens_total', help: 'Number of prompt tokens processed.', labelNames: L, registers })
  const genTokens = new Counter({ name: 'onnxd_generation_tokens_total', help: 'Number of generation tokens produced.', labelNames: L, registers })
  const success = new Counter({
    name: 'onnxd_request_success_total',
    help: 'Count of finished requests by finish reason (stop, length, abort, error).',
    labelNames: ['model_name', 'finished_reason'] as const,
    registers,
  })
  const failures = new Counter({
    name: 'onnxd_request_failures_total',
    help:
      'Completions that ended without their answer, by error code and outcome: client_error (4xx), server_error (5xx, or a stream that ended with an error event: the errors of the service), client_gone (code client_gone: the client disconnected).',
    labelNames: ['model_name', 'code', 'outcome'] as const,
    registers,
  })
  // In tokens, as vLLM counts them: hits / queries is the share of prompt tokens the prefix cache saved.
  const prefixQueries = new Counter({ name: 'onnxd_prefix_cache_queries_total', help: 'Prompt tokens looked up in the prefix cache.', labelNames: L, registers })
  const prefixHits = new Counter({ name: 'onnxd_prefix_cache_hits_total', help: 'Prompt tokens found in the prefix cache (their KV rows reused, not computed).', labelNames: L, registers })
  const stepBytes = new Counter({
    name: 'onnxd_step_io_bytes_total',
    help: "Bytes copied into the steps' inputs (direction in) and out of their outputs (out); on a GPU provider, what crosses between host and device. On the CPU the KV cache is read in place and does not count.",
    labelNames: [...L, 'phase', 'direction'],
    registers,
  })
  // As vLLM's spec_decode_num_draft_tokens / _num_accepted_tokens: accepted / draft is the draft's hit rate.
  const draftTokens = new Counter({ name: 'onnxd_spec_decode_draft_tokens_total', help: 'Draft tokens fed to decode steps to be checked (speculative decoding, --speculative-tokens).', labelNames: L, registers })
  const acceptedTokens = new Counter({ name: 'onnxd_spec_decode_accepted_tokens_total', help: "Draft tokens the model's own picks confirmed: each one a token that took no decode step of its own.", labelNames: L, registers })
  const restarts = new Counter({ name: 'onnxd_worker_restarts_total', help: 'Engine worker threads restarted after a crash or stall.', labelNames: L, registers })

  // Series exist from the first scrape, so rate() and absent() work before any traffic (as vLLM does).
  for (const h of [ttft, tpot, itl, e2e, queue, promptHist, genHist]) h.zero(m)
  for (const h of [iterTokens, iterTokensOld, batchSize, stepSeconds]) for (const phase of PHASES) h.zero({ ...m, phase })
  for (const phase of PHASES) for (const direction of ['in', 'out']) stepBytes.inc({ ...m, phase, direction }, 0)
  const replays = new Counter({ name: 'onnxd_graph_replays_total', help: "Decode steps that ran as WebGPU's captured graph (--graph-capture).", labelNames: L, registers })
  for (const c of [promptTokens, genTokens, prefixQueries, prefixHits, draftTokens, acceptedTokens, replays, restarts]) c.inc(m, 0)
  for (const r of FINISH_REASONS) success.inc({ ...m, finished_reason: r }, 0)

  const observer: EngineObserver = {
    onStep(s: StepObservation) {
      const l = { ...m, phase: s.phase }
      iterTokens.observe(l, s.tokens)
      iterTokensOld.observe(l, s.tokens)
      batchSize.observe(l, s.batch)
      stepSeconds.observe(l, s.seconds)
      stepBytes.inc({ ...l, direction: 'in' }, s.bytesIn)
      stepBytes.inc({ ...l, direction: 'out' }, s.bytesOut)
      if (s.drafted) {
        draftTokens.inc(m, s.drafted)
        acceptedTokens.inc(m, s.accepted ?? 0)
      }
      if (s.replayed) replays.inc(m)
    },
    onFinish(f: FinishObservation) {
      success.inc({ ...m, finished_reason: f.finishReason })
      // A prompt shared by a request's n choices counts once, with its first choice (as its usage does).
      if (!f.laterChoice) promptTokens.inc(m, f.promptTokens)
      genTokens.inc(m, f.completionTokens)
      prefixQueries.inc(m, f.prefixQueryTokens)
      prefixHits.inc(m, f.prefixHitTokens)
      if (!f.laterChoice) promptHist.observe(m, f.promptTokens)
      genHist.observe(m, f.completionTokens)
      queue.observe(m, f.queueSeconds)
      e2e.observe(m, f.e2eSeconds)
      if (f.ttftSeconds !== null) ttft.observe(m, f.ttftSeconds)
      if (f.tpotSeconds !== null) tpot.observe(m, f.tpotSeconds)
      for (const s of f.interTokenSeconds) itl.observe(m, s)
    },
    onWorkerRestart() {
      restarts.inc(m)
    },
  }

  return {
    registry,
    observer,
    setHealthSource(source) {
      health = source
    },
    async scrape() {
      snapshot = undefined
      snapshot = read()
      try {
        return await exposition(registry)
      } finally {
        snapshot = undefined
      }
    },
    requestFailed(code) {
      const outcome: Outcome = code === 'client_gone' ? 'client_gone' : outcomeOfStatus(errorStatus(code))
      failures.inc({ ...m, code, outcome })
    },
  }
}

/** GET /metrics: the app's registry and the process's metrics in the Prometheus text format. */
export function registerMetricsRoute(app: FastifyInstance, metrics: NodeMetrics, logLevel: LogLevel): void {
  app.get('/metrics', { logLevel }, async (_request, reply) => {
    const text = await metrics.scrape()
    return reply.type(metrics.registry.contentType).send(text)
  })
}
