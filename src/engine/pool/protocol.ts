// Messages between the pool (main thread) and engine workers. Plain data only (structured clone).
import type { MessagePort } from 'node:worker_threads'
import type { EngineRequest, EngineStats, FinishObservation, StepObservation } from '../types.js'
import type { EngineOptions } from '../engine.js'
import type { Message } from '../tokenizer/tokenizer.js'
import type { PromptBound } from '../tokenizer/prompt.js'
import type { ErrorData } from '../../shared/errors.js'
import type { Runtime } from '../model/runtime.js'
import type { FunctionTool } from '../../shared/tools.js'

/** What each worker is started with. */
export interface WorkerData {
  engine: EngineOptions
  /** BroadcastChannel name on which workers report readiness, stats and observations. */
  channel: string
  /** The pool's native-call gates (gate.ts). */
  gates: SharedArrayBuffer
  faultInjection: boolean
}

/** What each tokenizer thread is started with. */
export interface TokenizerWorkerData {
  modelDir: string
  modelId?: string
  /** A chat template in place of the bundle's. */
  chatTemplate?: string
}

/** A tokenizer-thread task: what bounds a prompt's size, or a text prompt to tokenize. */
export type TokenizeTask = { kind: 'info' } | { kind: 'encode'; messages?: Message[]; prompt?: string; tools?: FunctionTool[] }

export type TokenizeReply =
  | ({ kind: 'info' } & PromptBound)
  | { kind: 'ids'; ids: number[] }
  | { kind: 'error'; error: ErrorData }

/** A piscina task. `request` resolves when its sequence ends; its events flow over `port`. */
export type Task =
  | { kind: 'request'; req: EngineRequest; port: MessagePort }
  | { kind: 'crash' }
  | { kind: 'stall'; ms: number }

/** Main -> worker, on a request's port. */
export type PortCommand = { type: 'cancel' }

/** Worker -> main, on the broadcast channel. */
export type Broadcast =
  | { type: 'ready'; threadId: number; model: string; contextLength: number; provider: string; runtime: Runtime; weights: string | null; stats: EngineStats }
  | { type: 'failed'; threadId: number; error: string }
  | { type: 'stats'; threadId: number; stats: EngineStats }
  /**
   * Metric observations, batched: a message per observation woke the main thread once more per step, on the cores
   * the steps run on. Sent when a sequence finished (right after its step), every 64 steps, and with the stats.
   */
  | { type: 'observed'; threadId: number; steps: StepObservation[]; finishes: FinishObservation[] }
