// The engine's phases of one completion as spans under the node's SERVER span: `queue` (from the node's submit,
// tokenizing included, to admission into a prefill group), `prefill` (to the first token) and `decode` (to the last).
// The engine runs in worker threads and knows nothing of OpenTelemetry: its events carry the instants (PhaseMarks, on
// the first token, on done and on a failure inside a replica), and the spans are made here after the fact, when the
// answer ends, with those instants as their start and end. A request cut short before the engine reported (the client
// gone, the drain's deadline, a failure before any replica) ends its open phase at the answer's end, as an error.
// Imports: engine types, shared tracing, @opentelemetry/api.
import { SpanKind, SpanStatusCode, type Attributes, type Tracer } from '@opentelemetry/api'
import type { PhaseMarks, SeqEvent } from '../engine/index.js'
import { epochNow, type RequestSpan } from '../shared/tracing.js'

export class PhaseTrace {
  /** When the node handed the request to the engine. */
  readonly #submittedAt = epochNow()
  #marks: PhaseMarks | null = null
  #error: string | null = null
  #done = false
  readonly #prefill: Attributes = {}
  readonly #decode: Attributes = {}

  constructor(
    private readonly tracer: Tracer,
    private readonly request: RequestSpan,
  ) {
    request.onEnd((endAt, failure) => this.#emit(endAt, failure))
  }

  /** Each engine event of the sequence, as it arrives (SeqChannel's observer). */
  event(e: SeqEvent): void {
    const span = this.request.span
    switch (e.type) {
      case 'accepted':
        this.#prefill['onnxd.prompt_tokens'] = e.promptTokens
        if (e.threadId !== undefined) span.setAttribute('thread.id', e.threadId)
        break
      case 'token':
        if (e.marks) this.#marks = e.marks
        break
      case 'done': {
        if (e.marks) this.#marks = e.marks
        this.#done = true
        const cached = e.usage.prompt_tokens_details?.cached_tokens ?? 0
        span.setAttributes({
          'gen_ai.usage.input_tokens': e.usage.prompt_tokens,
          'gen_ai.usage.output_tokens': e.usage.completion_tokens,
          'gen_ai.usage.cache_read.input_tokens': cached,
          'gen_ai.response.finish_reasons': [e.finishReason],
        })
        Object.assign(this.#prefill, { 'onnxd.prompt_tokens': e.usage.prompt_tokens, 'onnxd.cached_prompt_tokens': cached })
        Object.assign(this.#decode, { 'onnxd.completion_tokens': e.usage.completion_tokens, 'onnxd.finish_reason': e.finishReason })
        break
      }
      case 'error':
        if (e.marks) this.#marks = e.marks
        this.#error ??= e.error.code
        break
    }
  }

  /** The phase spans, each instant kept within [submit, end] and after the one before it (threads' clocks agree to
   * well under a millisecond, but a span must never start before its parent). */
  #emit(endAt: number, failure: string | null): void {
    const m = this.#marks
    const at = (t: number | null | undefined, after: number): number | null => (t === null || t === undefined ? null : Math.min(Math.max(t, after), endAt))
    const start = Math.min(this.#submittedAt, endAt)
    const admitted = at(m?.admitted, start)
    const first = admitted === null ? null : at(m?.firstToken, admitted)
    const last = at(m?.end, first ?? admitted ?? start) ?? endAt
    // A sequence that finished is not failed by what came after it (a client gone while its answer was written).
    const error = this.#error ?? (this.#done ? null : failure)
    const phases: [name: string, from: number, to: number, attributes: Attributes][] = [['queue', start, admitted ?? last, {}]]
    if (admitted !== null) phases.push(['prefill', admitted, first ?? last, this.#prefill])
    if (first !== null) phases.push(['decode', first, last, this.#decode])
    const parent = this.request.context
    phases.forEach(([name, from, to, attributes], i) => {
      const span = this.tracer.startSpan(name, { kind: SpanKind.INTERNAL, startTime: from, attributes }, parent)
      // The phase the request ended in carries its failure.
      if (error !== null && i === phases.length - 1) {
        span.setAttribute('error.type', error)
        span.setStatus({ code: SpanStatusCode.ERROR, message: error })
      }
      span.end(to)
    })
  }
}
