// Where a node's time went during a level: its Prometheus /metrics scraped before and after, diffed into time in
// prefill and decode forward steps, step counts and mean batch rows. Compared with the level's wall time and the
// ORT ceiling, this tells forward-pass time from everything around it. Imports: client (HTTP GET).
import type { Agent } from 'undici'
import { request } from 'undici'

export type Phase = 'prefill' | 'decode'

/**
 * Sums of the step histograms, per phase (model labels summed); `replays`: decode steps that ran as WebGPU's
 * captured graph (onnxd_graph_replays_total; 0 in prefill).
 */
export type StepTotals = Record<Phase, { seconds: number; steps: number; rows: number; tokens: number; replays: number }>

const FAMILIES: Record<string, keyof StepTotals[Phase]> = {
  onnxd_batch_step_seconds_sum: 'seconds',
  onnxd_batch_step_seconds_count: 'steps',
  onnxd_batch_size_sum: 'rows',
  onnxd_iteration_tokens_sum: 'tokens',
}

/** Reads the step totals out of Prometheus text. */
export function parseStepTotals(text: string): StepTotals {
  const t: StepTotals = { prefill: { seconds: 0, steps: 0, rows: 0, tokens: 0, replays: 0 }, decode: { seconds: 0, steps: 0, rows: 0, tokens: 0, replays: 0 } }
  for (const line of text.split('\n')) {
    const m = /^(\w+)\{([^}]*)\}\s+(\S+)/.exec(line)
    if (!m) continue
    if (m[1] === 'onnxd_graph_replays_total') {
      const v = Number(m[3])
      if (Number.isFinite(v)) t.decode.replays += v
      continue
    }
    const field = FAMILIES[m[1]]
    const phase = /phase="(prefill|decode)"/.exec(m[2])?.[1] as Phase | undefined
    if (!field || !phase) continue
    const v = Number(m[3])
    if (Number.isFinite(v)) t[phase][field] += v
  }
  return t
}

/** GET /metrics as step totals; null when the target has no such endpoint (the peer, a facade). */
export async function scrapeStepTotals(agent: Agent, url: string): Promise<StepTotals | null> {
  try {
    const res = await request(`${url}/metrics`, { dispatcher: agent, signal: AbortSignal.timeout(5000) })
    const text = await res.body.text()
    if (res.statusCode !== 200 || !text.includes('onnxd_batch_step_seconds')) return null
    return parseStepTotals(text)
  } catch {
    return null
  }
}

/** The engine's side of one level (differences of two scrapes). */
export interface EngineTime {
  decode_steps: number
  /** Seconds inside decode forward passes (session.run and its tensors), over the level. */
  decode_seconds: number
  /** Mean rows per decode step. */
  mean_decode_batch: number
  mean_decode_step_ms: number
  prefill_steps: number
  prefill_seconds: number
  prefill_tokens: number
  /** Level wall time not inside a forward pass: sampling, KV-cache gathers, scheduling, HTTP, idle. */
  other_seconds: number
  /** Fraction of the level's wall time inside forward passes. */
  forward_fraction: number
  /** Decode steps that ran as WebGPU's captured graph (--graph-capture; 0 without it; absent in reports before it). */
  graph_replays?: number
}

export function engineTime(before: StepTotals, after: StepTotals, durationS: number): EngineTime {
  const d = (p: Phase, k: keyof StepTotals[Phase]): number => after[p][k] - before[p][k]
  const decodeSteps = d('decode', 'steps')
  const decodeS = d('decode', 'seconds')
  const prefillS = d('prefill', 'seconds')
  return {
    decode_steps: decodeSteps,
    decode_seconds: decodeS,
    mean_decode_batch: decodeSteps ? d('decode', 'rows') / decodeSteps : 0,
    mean_decode_step_ms: decodeSteps ? (decodeS / decodeSteps) * 1000 : 0,
    prefill_steps: d('prefill', 'steps'),
    prefill_seconds: prefillS,
    prefill_tokens: d('prefill', 'tokens'),
    other_seconds: Math.max(0, durationS - decodeS - prefillS),
    forward_fraction: durationS > 0 ? Math.min(1, (decodeS + prefillS) / durationS) : 0,
    graph_replays: d('decode', 'replays'),
  }
}
