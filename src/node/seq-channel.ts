// One submitted sequence as a pull channel: turns EngineClient's push callbacks into awaitable events, and owns the
// cancel decision (client gone, drain deadline) so the engine is cancelled at most once and only while it runs.
// Imports: engine types, shared errors.
import type { EngineClient, EngineRequest, SeqEvent } from '../engine/index.js'
import { toErrorData, type ErrorData } from '../shared/errors.js'

/** The engine's events, plus `gone`: the client disconnected and the sequence was cancelled. */
export type ChannelEvent = SeqEvent | { type: 'gone' }

const isTerminal = (e: ChannelEvent): boolean => e.type === 'done' || e.type === 'error' || e.type === 'gone'

export class SeqChannel {
  readonly #queue: ChannelEvent[] = []
  #wake: (() => void) | null = null
  /** A terminal event has been queued: the engine is finished with this sequence, or we stopped listening. */
  #ended = false
  #cancel: (() => void) | null = null
  #cancelled = false

  /** `observe` hears every engine event as it arrives, also those after the channel ended (e.g. for traces). */
  constructor(engine: EngineClient, req: EngineRequest, observe?: (e: SeqEvent) => void) {
    const sink = observe
      ? (e: SeqEvent): void => {
          observe(e)
          this.#push(e)
        }
      : (e: SeqEvent): void => this.#push(e)
    try {
      // The engine may call the sink synchronously (e.g. an immediate queue_full); #push copes before #cancel is set.
      this.#cancel = engine.submit(req, sink)
    } catch (e) {
      this.#push({ type: 'error', error: toErrorData(e) })
    }
  }

  /** True once the engine has sent done or error (or the channel was ended locally). */
  get ended(): boolean {
    return this.#ended
  }

  /** Whether this channel cancelled the engine's sequence. */
  get cancelled(): boolean {
    return this.#cancelled
  }

  /** The next event, in order; after a terminal event it is not called again. */
  async next(): Promise<ChannelEvent> {
    while (this.#queue.length === 0) await new Promise<void>((resolve) => (this.#wake = resolve))
    return this.#queue.shift() as ChannelEvent
  }

  /** The client left: cancel the engine's sequence now and drop events nobody will read. */
  clientGone(): void {
    if (this.#ended) return
    this.#queue.length = 0
    this.#end({ type: 'gone' })
  }

  /** Ends the sequence with `error` (e.g. the drain deadline passed): cancels the engine and reports the error. */
  abort(error: ErrorData): void {
    if (this.#ended) return
    this.#end({ type: 'error', error })
  }

  #end(e: ChannelEvent): void {
    this.#ended = true
    this.#queue.push(e)
    const wake = this.#wake
    this.#wake = null
    wake?.()
    this.#cancelled = true
    // The cancel function may be missing if submit threw or has not returned yet; then nothing runs to cancel.
    this.#cancel?.()
  }

  #push(e: SeqEvent): void {
    if (this.#ended) return // events after cancel or after the terminal event have nowhere to go
    this.#queue.push(e)
    if (isTerminal(e)) this.#ended = true
    const wake = this.#wake
    this.#wake = null
    wake?.()
  }
}
