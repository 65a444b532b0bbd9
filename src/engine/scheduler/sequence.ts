// One request's generation state: sampling, incremental detokenization, stop strings, finish rules, timings and
// its event sink. The batcher calls step() once per forward with this row's logits.
import { toErrorData, type ErrorData } from '../../shared/errors.js'
import type { LoadedModel } from '../model/load.js'
import type { FinishObservation, FinishReason, PhaseMarks, SeqEvent, TokenLogprob } from '../types.js'
import type { SamplingParams } from '../../shared/sampling.js'
import { Sampler, SamplerScratch, TokenHistory, type StepLogprobs } from '../generation/sampling.js'
import { StopMatcher } from '../generation/stopping.js'
import { IncrementalDecoder } from '../generation/detokenize.js'
import { ngramDraft } from '../generation/draft.js'
import type { TokenMask } from '../generation/grammar.js'

export type SeqSink = (e: SeqEvent) => void

export class Sequence {
  done = false
  cancelled = false
  /** The last sampled token, fed to the next decode step. */
  pending = -1
  readonly generated: number[] = []
  private finishReason: FinishReason | null = null
  /** The stop string that ended the sequence, when one did. */
  private stopSequence: string | undefined
  private readonly sampler: Sampler
  private readonly stop: StopMatcher | null
  /** Ids that end the sequence as EOS does: the model's EOS (unless ignore_eos) and the request's stop_token_ids. */
  private readonly stopIds: ReadonlySet<number>
  private readonly detok: IncrementalDecoder | null
  private readonly history: TokenHistory
  private readonly arrival = performance.now()
  private admittedAt: number | null = null
  /** Prompt tokens found in the prefix cache; null until admitted, or when prefix caching is off. */
  private cachedTokens: number | null = null
  private readonly tokenTimes: number[] = []
  /** The grammar a JSON response_format walks (null: free text). */
  private grammar: TokenMask | null = null
  /** The last token's log-probabilities as reported, until its event goes out. */
  private lastLogprobs: TokenLogprob[] | undefined
  /**
   * A constrained sequence's last token's text, held until the grammar thread has taken the token (prepare()): only
   * then is it known whether the JSON value is complete, and so whether the token goes out as a token or as the end.
   */
  private held: string | null = null
  /** The grammar's next mask, being computed on the grammar thread (null: not asked for since the last step). */
  private preparing: Promise<void> | null = null
  private prepared = false

  constructor(
    readonly id: string,
    readonly promptIds: number[],
    readonly params: SamplingParams,
    private readonly model: LoadedModel,
    private readonly sink: SeqSink,
    scratch?: SamplerScratch,
    /** Whose request this is (an opaque id; '' for none): the batcher admits tenants in turn (fair-queue.ts). */
    readonly tenant = '',
    /** Which choice of one client request's prompt this is (0: the first, or the only one). */
    readonly choice = 0,
  ) {
    this.stopIds = new Set([...(params.ignore_eos ? [] : model.eos), ...params.stop_token_ids])
    // The sampler masks them itself until min_tokens. Samplers of one thread share scratch space.
    this.sampler = new Sampler(params, model.vocab, { eosIds: [...this.stopIds], scratch })
    this.history = new TokenHistory(promptIds)
    this.stop = params.stop.length ? new StopMatcher(params.stop) : null
    const tok = model.tokenizer
    this.detok = tok ? new IncrementalDecoder((ids) => tok.decode(ids), { contextIds: promptIds }) : null
  }

  get maxTokens(): number {
    return this.params.max_tokens
  }

  /** Admission into a prefill group; `cached`: the prompt tokens its cached prefix gave (null: no prefix cache). */
  admitted(cached: number | null = null): void {
    this.admittedAt = performance.now()
    this.cachedTokens = cached
  }

  cancel(): void {
    this.cancelled = true
  }

  /** Whether this step's token is the argmax of the raw logits, which the graph can compute (see stepToken). */
  get greedyNow(): boolean {
    return this.grammar === null && this.sampler.picksArgmax(this.history)
  }

  /** Constrains every token to `g`'s grammar (before the sequence is queued); its first mask comes with it. */
  constrain(g: TokenMask): void {
    this.grammar = g
    this.preparing = Promise.resolve()
    this.prepared = true
  }

  get constrained(): boolean {
    return this.grammar !== null
  }

  /**
   * Gives the grammar the last pick and asks for its mask for the next step (once per step; the batcher awaits it
   * before the step's forward, unless the grammar thread is busy compiling: see maskReady), then sends the held
   * token: as the end when the value is complete or the length is reached. The sequence may be done after this; a
   * grammar failure fails this sequence alone.
   */
  prepare(): Promise<void> {
    if (!this.grammar || this.done) return Promise.resolve()
    this.preparing ??= this.takePick().finally(() => (this.prepared = true))
    return this.preparing
  }

  /** Whether this step's mask is there (always, unconstrained): a row without it sits the step out. */
  get maskReady(): boolean {
    return this.grammar === null || this.done || this.prepared
  }

  /** Whether its mask may be a compile away: the batcher then steps the other rows without waiting for it. */
  get maskSlow(): boolean {
    return this.grammar?.busy ?? false
  }

  private async takePick(): Promise<void> {
    const g = this.grammar
    if (!g) return
    try {
      await g.next()
    } catch (e) {
      this.fail(toErrorData(e))
      return
    }
    const text = this.held
    this.held = null
    if (text === null || this.done) return
    // The JSON value is complete: nothing may follow it.
    if (g.terminated) this.finish('stop', text)
    else if (this.atLength) this.finish('length', text)
    else this.emitToken(text)
  }

  /** The sequence ended normally (done without an error). */
  get finished(): boolean {
    return this.finishReason !== null
  }

  private get atLength(): boolean {
    return this.generated.length >= this.params.max_tokens || this.promptIds.length + this.generated.length >= this.model.contextLength
  }

  /**
   * Up to `k` tokens guessed to follow `pending` (generation/draft.ts), for a decode step to check: no more than the
   * sequence may still produce after the token that step yields anyway.
   */
  draft(k: number): number[] {
    const room = Math.min(this.params.max_tokens - this.generated.length, this.model.contextLength - this.promptIds.length - this.generated.length) - 1
    return ngramDraft(this.promptIds, this.generated, Math.min(k, room))
  }

  /** Samples the next token from this row's logits (overwriting them); returns true when the sequence has finished. */
  step(logits: Float32Array): boolean {
    // The row is this step's own copy, so sampling may overwrite it.
    const token = this.sampler.sampleInPlace(logits, this.history, this.grammar?.bits)
    return this.stepToken(token, this.params.logprobs ? this.sampler.lastLogprobs : null)
  }

  /** A step's log-probabilities as events carry them: token ids as their text and bytes. */
  private reported(lp: StepLogprobs): TokenLogprob[] {
    const tok = this.model.tokenizer
    const text = (id: number): string => tok?.tokenText(id) ?? `token_id:${id}`
    const bytes = (id: number): number[] => tok?.tokenBytes(id) ?? [...Buffer.from(text(id), 'utf8')]
    return [
      {
        token: text(lp.token),
        logprob: lp.logprob,
        bytes: bytes(lp.token),
        top_logprobs: lp.top.map((t) => ({ token: text(t.token), logprob: t.logprob, bytes: bytes(t.token) })),
      },
    ]
  }

  /**
   * Takes `token` as the next one (the graph's argmax when greedyNow), with its log-probabilities when the request
   * asks for them; returns true when the sequence has finished.
   */
  stepToken(token: number, logprobs: StepLogprobs | null = null): boolean {
    this.preparing = null
    this.prepared = false
    this.lastLogprobs = logprobs ? this.reported(logprobs) : undefined
    this.history.push(token)
    this.tokenTimes.push(performance.now())
    this.generated.push(token)
    let text = ''
    if (this.grammar && !this.grammar.accept(token)) {
      this.fail({ code: 'internal', message: `token ${token} is outside the response_format grammar` })
      return true
    }
    if (this.stopIds.has(token)) {
      this.finish('stop')
      return true
    }
    if (this.detok) {
      const delta = this.detok.push(token)
      if (this.stop) {
        const r = this.stop.push(delta)
        text = r.emit
        if (r.stopped) {
          this.finishReason = 'stop'
          this.stopSequence = r.stop
          this.emitDone(text)
          return true
        }
      } else text = delta
    }
    this.pending = token
    if (this.grammar) {
      this.held = text
      return false
    }
    if (this.atLength) {
      this.finish('length', text)
      return true
    }
    this.emitToken(text)
    return false
  }

  private emitToken(text: string): void {
    this.sink({
      type: 'token',
      text,
      tokens: 1,
      ids: this.generated.slice(-1),
      ...(this.lastLogprobs ? { logprobs: this.lastLogprobs } : {}),
      ...(this.generated.length === 1 ? { marks: this.marks(null) } : {}),
    })
  }

  /** Ends the sequence: flushes text held back by the detokenizer and the stop matcher. */
  private finish(reason: FinishReason, text = ''): void {
    this.finishReason = reason
    if (this.detok) {
      const tail = this.detok.flush()
      if (this.stop) {
        const r = this.stop.push(tail)
        text += r.emit
        if (r.stopped) {
          this.stopSequence = r.stop
          this.emitDone(text)
          return
        }
        text += this.stop.flush()
      } else text += tail
    }
    this.emitDone(text)
  }

  private emitDone(text: string): void {
    this.done = true
    this.grammar?.dispose()
    this.grammar = null
    const now = performance.now()
    const first = this.tokenTimes[0] ?? now
    this.sink({
      type: 'done',
      text,
      // finish() and stop strings only end a sequence inside step(), so the last sampled token is not yet sent.
      ids: this.generated.slice(-1),
      ...(this.lastLogprobs ? { logprobs: this.lastLogprobs } : {}),
      finishReason: this.finishReason!,
      ...(this.stopSequence !== undefined ? { stopSequence: this.stopSequence } : {}),
      usage: { prompt_tokens: this.promptIds.length, completion_tokens: this.generated.length, prompt_tokens_details: { cached_tokens: this.cachedTokens ?? 0 } },
      timings: {
        queue_ms: round((this.admittedAt ?? now) - this.arrival),
        ttft_ms: round(first - this.arrival),
        total_ms: round(now - this.arrival),
      },
      marks: this.marks(now),
    })
  }

  /** The phases' instants as epoch milliseconds (see PhaseMarks); `end` as performance.now(), or null. */
  private marks(end: number | null): PhaseMarks {
    const epoch = (t: number | null | undefined): number | null => (t === null || t === undefined ? null : performance.timeOrigin + t)
    return { arrival: epoch(this.arrival)!, admitted: epoch(this.admittedAt), firstToken: epoch(this.tokenTimes[0]), end: epoch(end) }
  }

  fail(error: ErrorData): void {
    if (this.done) return
    this.done = true
    this.grammar?.dispose()
    this.grammar = null
    this.sink({ type: 'error', error, marks: this.marks(performance.now()) })
  }

  observation(reason: FinishObservation['finishReason'] | 'done'): FinishObservation {
    const now = performance.now()
    const t = this.tokenTimes
    const gaps: number[] = []
    for (let i = 1; i < t.length; i++) gaps.push((t[i] - t[i - 1]) / 1000)
    return {
      // Done without a finish reason: it failed (a token outside its grammar), and counts as an error, not a stop.
      finishReason: reason === 'done' ? (this.finishReason ?? 'error') : reason,
      promptTokens: this.promptIds.length,
      completionTokens: this.generated.length,
      prefixQueryTokens: this.cachedTokens === null ? 0 : this.promptIds.length,
      prefixHitTokens: this.cachedTokens ?? 0,
      ...(this.choice > 0 ? { laterChoice: true } : {}),
      queueSeconds: ((this.admittedAt ?? now) - this.arrival) / 1000,
      ttftSeconds: t.length ? (t[0] - this.arrival) / 1000 : null,
      e2eSeconds: (now - this.arrival) / 1000,
      tpotSeconds: t.length > 1 ? (t[t.length - 1] - t[0]) / 1000 / (t.length - 1) : null,
      interTokenSeconds: gaps,
    }
  }
}

const round = (ms: number): number => Math.round(ms * 1000) / 1000
