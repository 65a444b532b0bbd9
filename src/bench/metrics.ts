// The standard figures of one level, named as vLLM's benchmark_serving names them (request_throughput,
// output_throughput, total_token_throughput, {mean,median,std,p90,p99}_{ttft,tpot,itl,e2el}_ms), computed from the
// load generator's records. Imports: stats, client types.
import type { RequestRecord } from './client.js'
import { summarize } from './stats.js'

export const LATENCIES = ['ttft', 'tpot', 'itl', 'e2el'] as const
export type Latency = (typeof LATENCIES)[number]
export const STATS = ['mean', 'median', 'std', 'p90', 'p99'] as const
export type Stat = (typeof STATS)[number]
export type LatencyFigures = { [K in `${Stat}_${Latency}_ms`]: number }

export interface LevelFigures extends LatencyFigures {
  max_concurrency: number
  /** Requests/s of the arrival process; null for a closed loop. */
  request_rate: number | null
  /** Seconds from the first request to the last answer (or the deadline). */
  duration: number
  completed: number
  failed: number
  /** Requests cut by the level's deadline (not failures). */
  cut: number
  /** Cut requests whose first token had not come by the deadline: TTFT includes them at deadline - start, a lower bound. */
  ttft_censored: number
  total_input_tokens: number
  /** Of total_input_tokens, those the server's prefix cache gave instead of computing them. */
  cached_input_tokens: number
  total_output_tokens: number
  /** Output tokens that cut requests had streamed before the deadline (counted in the throughputs). */
  cut_output_tokens: number
  request_throughput: number
  output_throughput: number
  total_token_throughput: number
  /** Failed requests by status: HTTP status, `stream:<code>` for an error event, `network`, `truncated`. */
  errors_by_status: Record<string, number>
}

/**
 * vLLM's definitions: TTFT = first token's arrival; TPOT = (e2e - ttft) / (output_tokens - 1) for requests with
 * more than one output token (a cut request: over the tokens it streamed); ITL = every gap between consecutive
 * token-carrying deltas; E2EL = send to [DONE].
 * Throughputs divide the tokens streamed within the level by its duration (for an uncut level, exactly vLLM's
 * completed-request totals).
 */
export function levelFigures(records: RequestRecord[], durationS: number, concurrency: number, requestRate: number): LevelFigures {
  const ok = records.filter((r) => r.ok)
  const cut = records.filter((r) => r.cut)
  const failed = records.filter((r) => !r.ok && !r.cut)
  const deadlineMs = durationS * 1000
  const censored = cut.filter((r) => Number.isNaN(r.ttftMs))
  const ttfts = [...ok.map((r) => r.ttftMs), ...cut.map((r) => (Number.isNaN(r.ttftMs) ? Math.max(0, deadlineMs - r.startMs) : r.ttftMs))]
  // A cut request's TPOT is over what it streamed by the deadline (its first token to its last), so a level the cap
  // cuts whole still has one.
  const tpots = [
    ...ok.filter((r) => r.outputTokens > 1).map((r) => (r.e2eMs - r.ttftMs) / (r.outputTokens - 1)),
    ...cut.filter((r) => r.outputTokens > 1 && r.itlMs.length > 0).map((r) => r.itlMs.reduce((a, b) => a + b, 0) / (r.outputTokens - 1)),
  ]
  const itls = [...ok, ...cut].flatMap((r) => r.itlMs)
  const e2els = ok.map((r) => r.e2eMs)
  const inputTokens = ok.reduce((a, r) => a + r.promptTokens, 0)
  const outputTokens = ok.reduce((a, r) => a + r.outputTokens, 0)
  const cutOutput = cut.reduce((a, r) => a + r.outputTokens, 0)
  const cutInput = cut.filter((r) => r.outputTokens > 0).reduce((a, r) => a + r.promptTokens, 0)
  const errors: Record<string, number> = {}
  for (const r of failed) errors[r.status] = (errors[r.status] ?? 0) + 1
  const d = durationS > 0 ? durationS : NaN
  const lat = {} as LatencyFigures
  const samples: Record<Latency, number[]> = { ttft: ttfts, tpot: tpots, itl: itls, e2el: e2els }
  for (const k of LATENCIES) {
    const s = summarize(samples[k])
    for (const st of STATS) lat[`${st}_${k}_ms`] = s[st]
  }
  return {
    max_concurrency: concurrency,
    request_rate: Number.isFinite(requestRate) ? requestRate : null,
    duration: durationS,
    completed: ok.length,
    failed: failed.length,
    cut: cut.length,
    ttft_censored: censored.length,
    total_input_tokens: inputTokens,
    cached_input_tokens: ok.reduce((a, r) => a + r.cachedTokens, 0),
    total_output_tokens: outputTokens,
    cut_output_tokens: cutOutput,
    request_throughput: ok.length / d || 0,
    output_throughput: (outputTokens + cutOutput) / d || 0,
    total_token_throughput: (inputTokens + outputTokens + cutInput + cutOutput) / d || 0,
    ...lat,
    errors_by_status: errors,
  }
}
