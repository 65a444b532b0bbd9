// Engine-level request and event types, shared by the scheduler, the worker and the pool. Plain data only:
// these cross worker threads by structured clone.
import type { ErrorData } from '../shared/errors.js'
import type { CompletionRequest, FinishReason, Timings, Usage } from '../contract/completions.js'

export type { FinishReason, Timings, Usage }

/** What a caller submits: the internal contract's request body (validated into a sequence inside the worker). */
export type EngineRequest = CompletionRequest & { request_id: string }

/**
 * Events of one sequence, in order: accepted, then token deltas, then exactly one of done or error. Every event
 * carries only what is new: `done` has the last delta (text held back until the end, and the last token id), so
 * the whole completion is the concatenation of all token events and `done`.
 */
export type SeqEvent =
  | { type: 'accepted'; promptTokens: number; queueMs?: number; /** The engine replica's thread (set by the pool's workers). */ threadId?: number }
  | { type: 'token'; text: string; tokens: number; ids: number[] }
  | { type: 'done'; text: string; ids: number[]; finishReason: FinishReason; usage: Usage; timings: Timings }
  | { type: 'error'; error: ErrorData }

/** Per-step and per-request observations, for metrics (reported by value; the node turns them into Prometheus). */
export interface StepObservation {
  phase: 'prefill' | 'decode'
  seconds: number
  batch: number
  tokens: number
}

export interface FinishObservation {
  finishReason: FinishReason | 'abort' | 'error'
  promptTokens: number
  completionTokens: number
  queueSeconds: number
  ttftSeconds: number | null
  e2eSeconds: number
  /** Mean seconds per output token after the first. */
  tpotSeconds: number | null
  /** Gaps between consecutive output tokens, seconds. */
  interTokenSeconds: number[]
}

export interface EngineStats {
  running: number
  waiting: number
  prefilling: number
  kvUsedBytes: number
  kvBudgetBytes: number
  maxRunning: number
  maxWaiting: number
  /** Date.now() of the step loop's last sign of life (a step, or an idle tick). */
  heartbeat: number
}
