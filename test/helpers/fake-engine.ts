// A scripted EngineClient for HTTP tests: token deltas from a script or driven by hand, pauses on deferred
// promises (never timers), recorded cancellations, any PoolHealth on demand. Never loads ONNX Runtime.
import type { EngineClient, EngineObserver, EngineRequest, FinishReason, PoolHealth, SeqEvent } from '../../src/engine/index.js'
import type { ErrorCode, ErrorData, ErrorDetails } from '../../src/shared/errors.js'

import { deferred, type Deferred } from './deferred.js'

export { deferred, type Deferred }

/** One step of a script: what the fake engine emits next, or a pause until a promise settles. */
export type ScriptStep =
  | { accept: number }
  | { token: string; ids?: number[] }
  | { done: FinishReason; text?: string; ids?: number[] }
  | { error: ErrorCode; message?: string; details?: ErrorDetails }
  | { wait: Promise<unknown> }

/** A fixed script for every request, or one built per request. */
export type Script = ScriptStep[] | ((req: EngineRequest, seq: FakeSeq) => ScriptStep[])

/** The default answer: two deltas, then `length`. */
export const DEFAULT_SCRIPT: ScriptStep[] = [{ accept: 3 }, { token: 'Hel' }, { token: 'lo' }, { done: 'length' }]

/** Deterministic timings (milliseconds) reported by every fake sequence. */
export const FAKE_TIMINGS = { queue_ms: 1, ttft_ms: 5, total_ms: 20 }

/** One submitted sequence. Drive it by hand in manual mode (`accept`, `token`, `done`, `error`). */
export class FakeSeq {
  readonly events: SeqEvent[] = []
  /** Resolves when the node cancels this sequence. */
  readonly cancellation = deferred<void>()
  /** Resolves when the sequence has sent done or error. */
  readonly finished = deferred<void>()
  #text = ''
  #ids: number[] = []
  #promptTokens = 0
  #nextId = 100

  constructor(
    readonly req: EngineRequest,
    private readonly sink: (e: SeqEvent) => void,
    private readonly onEnd: (seq: FakeSeq, reason: FinishReason | 'abort' | 'error') => void,
  ) {}

  get cancelled(): boolean {
    return this.cancellation.settled
  }

  get active(): boolean {
    return !this.cancelled && !this.finished.settled
  }

  get text(): string {
    return this.#text
  }

  get ids(): number[] {
    return [...this.#ids]
  }

  get promptTokens(): number {
    return this.#promptTokens
  }

  accept(promptTokens = 3): void {
    this.#promptTokens = promptTokens
    this.#emit({ type: 'accepted', promptTokens, queueMs: FAKE_TIMINGS.queue_ms })
  }

  token(text: string, ids: number[] = [this.#nextId++]): void {
    this.#text += text
    this.#ids.push(...ids)
    this.#emit({ type: 'token', text, tokens: ids.length, ids })
  }

  /**
   * Ends the sequence. Like the real engine, `done` is the last delta: `tail` is text and ids not yet sent as
   * tokens (text a detokenizer held back, the last sampled token), empty by default.
   */
  done(finishReason: FinishReason = 'stop', tail: { text?: string; ids?: number[] } = {}): void {
    const text = tail.text ?? ''
    const ids = tail.ids ?? []
    this.#text += text
    this.#ids.push(...ids)
    this.#emit({
      type: 'done',
      text,
      ids,
      finishReason,
      usage: { prompt_tokens: this.#promptTokens, completion_tokens: this.#ids.length },
      timings: { ...FAKE_TIMINGS },
    })
    this.finished.resolve()
    this.onEnd(this, finishReason)
  }

  error(code: ErrorCode, message = `fake ${code}`, details?: ErrorDetails): void {
    const error: ErrorData = { code, message, ...(details ? { details } : {}) }
    this.#emit({ type: 'error', error })
    this.finished.resolve()
    this.onEnd(this, 'error')
  }

  /** What EngineClient.submit returns. */
  cancel(): void {
    if (!this.active) return
    this.cancellation.resolve()
    this.onEnd(this, 'abort')
  }

  #emit(e: SeqEvent): void {
    // A real pool sends nothing after a cancel or after the terminal event.
    if (!this.active) return
    this.events.push(e)
    this.sink(e)
  }
}

export interface FakeEngineOptions {
  /** What each request gets; `manual` leaves every sequence to the test. Default: DEFAULT_SCRIPT. */
  script?: Script | 'manual'
  health?: Partial<PoolHealth>
  /** Receives onStep/onFinish like the real pool's observer would. */
  observer?: EngineObserver
  /** What countTokens answers (default: one token per character of the prompt, or of the messages' contents). */
  countTokens?: (req: Pick<EngineRequest, 'messages' | 'prompt' | 'tools'>) => Promise<number>
}

export const READY_HEALTH: PoolHealth = {
  status: 'ready',
  model: 'onnxd-tiny',
  provider: 'cpu',
  // What a CPU node runs by default (model/runtime.ts defaultRuntime).
  runtime: 'capi',
  contextLength: 2048,
  configuredWorkers: 1,
  workers: [{ threadId: 1, ready: true, heartbeatAgeMs: 0, stats: null }],
  running: 0,
  waiting: 0,
  capacity: 320,
  freeSlots: 64,
  kvUsedBytes: 0,
  prefixCacheBytes: 0,
  kvBudgetBytes: 64 * 1024 * 1024,
  restarts: 0,
}

export class FakeEngine implements EngineClient {
  readonly submissions: FakeSeq[] = []
  /** Request ids of cancelled sequences, in order. */
  readonly cancellations: string[] = []
  drainCalls = 0
  closed = false
  #health: PoolHealth
  readonly #waiters: Array<{ index: number; d: Deferred<FakeSeq> }> = []

  constructor(private readonly opts: FakeEngineOptions = {}) {
    this.#health = { ...READY_HEALTH, ...opts.health }
  }

  setHealth(h: Partial<PoolHealth>): void {
    this.#health = { ...this.#health, ...h }
  }

  /** The `index`-th submission (0-based), once it has arrived. */
  submission(index: number): Promise<FakeSeq> {
    const seq = this.submissions[index]
    if (seq) return Promise.resolve(seq)
    const d = deferred<FakeSeq>()
    this.#waiters.push({ index, d })
    return d.promise
  }

  async ready(): Promise<void> {}

  submit(req: EngineRequest, sink: (e: SeqEvent) => void): () => void {
    const seq = new FakeSeq(req, sink, (s, reason) => this.#ended(s, reason))
    this.submissions.push(seq)
    for (const w of this.#waiters.filter((w) => w.index === this.submissions.length - 1)) w.d.resolve(seq)
    const script = this.opts.script ?? DEFAULT_SCRIPT
    if (script !== 'manual') void this.#run(seq, typeof script === 'function' ? script(req, seq) : script)
    return () => seq.cancel()
  }

  /** The prompts countTokens was asked about, in order. */
  readonly counted: Pick<EngineRequest, 'messages' | 'prompt' | 'tools'>[] = []

  countTokens(req: Pick<EngineRequest, 'messages' | 'prompt' | 'tools'>): Promise<number> {
    this.counted.push(req)
    if (this.opts.countTokens) return this.opts.countTokens(req)
    return Promise.resolve((req.prompt ?? (req.messages ?? []).map((m) => m.content).join('')).length)
  }

  health(): PoolHealth {
    const active = this.submissions.filter((s) => s.active).length
    return { ...this.#health, running: this.#health.running || active }
  }

  drain(): void {
    this.drainCalls++
    this.#health = { ...this.#health, status: 'draining' }
  }

  async close(): Promise<void> {
    this.closed = true
  }

  async #run(seq: FakeSeq, steps: ScriptStep[]): Promise<void> {
    await Promise.resolve() // like the pool, answer after submit has returned
    for (const step of steps) {
      if (!seq.active) return
      if ('wait' in step) await step.wait
      else if ('accept' in step) {
        seq.accept(step.accept)
        this.opts.observer?.onStep?.({ phase: 'prefill', seconds: 0.004, batch: 1, tokens: step.accept, bytesIn: 0, bytesOut: 0 })
      } else if ('token' in step) {
        seq.token(step.token, step.ids)
        this.opts.observer?.onStep?.({ phase: 'decode', seconds: 0.002, batch: 1, tokens: 1, bytesIn: 0, bytesOut: 0 })
      } else if ('done' in step) seq.done(step.done, { text: step.text, ids: step.ids })
      else seq.error(step.error, step.message, step.details)
    }
  }

  #ended(seq: FakeSeq, reason: FinishReason | 'abort' | 'error'): void {
    if (reason === 'abort') this.cancellations.push(seq.req.request_id)
    const n = seq.ids.length
    this.opts.observer?.onFinish?.({
      finishReason: reason,
      promptTokens: seq.promptTokens,
      completionTokens: n,
      prefixQueryTokens: 0,
      prefixHitTokens: 0,
      queueSeconds: FAKE_TIMINGS.queue_ms / 1000,
      ttftSeconds: n > 0 ? FAKE_TIMINGS.ttft_ms / 1000 : null,
      e2eSeconds: FAKE_TIMINGS.total_ms / 1000,
      tpotSeconds: n > 1 ? (FAKE_TIMINGS.total_ms - FAKE_TIMINGS.ttft_ms) / 1000 / (n - 1) : null,
      interTokenSeconds: Array.from({ length: Math.max(0, n - 1) }, () => 0.0075),
    })
  }
}

export function fakeEngine(opts: FakeEngineOptions = {}): FakeEngine {
  return new FakeEngine(opts)
}
