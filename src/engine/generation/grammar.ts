// Structured outputs: the tokens a JSON grammar allows at each step, as a bitmask over the vocabulary. A request's
// response_format or constrained tools become a grammar (grammar-bounds.ts refuses one past its bounds first, here;
// grammar-source.ts builds it on the grammar thread), compiled once per schema against the model's vocabulary; each
// sequence walks it with a matcher: the mask before a step, the pick accepted after it.
//
// xgrammar runs on a thread of its own (grammar-thread.ts), never on the replica's step loop: a compile may take
// seconds, and its matchers' masks are computed there too. This side keeps what is needed to rebuild that thread at
// any moment: each live matcher's grammar and the tokens it accepted. The thread is replaced (live matchers
// replayed on the new one, other requests untouched) when a compile runs past `compileMs` (that request: 422), when
// xgrammar traps inside WebAssembly (that request: 422 or 500), and when its heap grows past `heapBytes` (its memory
// goes back to the system; nobody fails). Imports: node, shared errors and types, the protocol, grammar-source.ts.
import { Worker } from 'node:worker_threads'
import { OnnxdError } from '../../shared/errors.js'
import type { StructuredOutput } from '../../shared/sampling.js'
import { requestField } from './grammar-bounds.js'
import { checkBounds, fieldOf } from './grammar-source.js'
import type { GrammarReply, GrammarRequest, GrammarThreadData, GrammarVocabulary, MaskResult } from './grammar-protocol.js'

export type { GrammarVocabulary } from './grammar-protocol.js'

export interface GrammarLimits {
  /** A compile running longer is stopped (its thread replaced) and its request refused with a 422. */
  compileMs: number
  /** The grammar thread's WebAssembly heap past which the thread is replaced, to give its memory back. */
  heapBytes: number
  /** Compiled grammars kept on the thread, least recently used evicted first. */
  cached: number
}

export const DEFAULT_GRAMMAR_LIMITS: GrammarLimits = { compileMs: 10_000, heapBytes: 512 * 1024 ** 2, cached: 32 }

/** The thread's entry: the built .js, or the .ts source under tsx (tests, `npx tsx`). */
function spawnThread(data: GrammarThreadData): Worker {
  const fromTs = import.meta.url.endsWith('.ts')
  const url = new URL(`./grammar-thread.${fromTs ? 'ts' : 'js'}`, import.meta.url)
  if (!fromTs) return new Worker(url, { workerData: data })
  // A Worker cannot start from a .ts file on Node 20 even with tsx's hooks in execArgv: they are registered first.
  const boot = `import('tsx/esm/api').then((t) => t.register()).then(() => import(${JSON.stringify(url.href)}))`
  return new Worker(boot, { eval: true, workerData: data })
}

interface Pending {
  msg: Exclude<GrammarRequest, { type: 'close' }>
  resolve: (r: GrammarReply) => void
  reject: (e: OnnxdError) => void
  /** For an open: the field its grammar comes from. */
  field?: string
}

/** One model's grammars, on one thread; the vocabulary is read on the first structured request. */
export class Grammars {
  private thread: Worker | null = null
  private data: GrammarThreadData | null = null
  private nextReq = 1
  private nextMatcher = 1
  private readonly pending = new Map<number, Pending>()
  private readonly live = new Map<number, TokenMask>()
  private compileTimer: NodeJS.Timeout | null = null
  /**
   * A grammar is being opened: the thread may be compiling it, or about to, and masks asked for now would wait for
   * that (up to compileMs). A cache hit opens in well under a millisecond.
   */
  get compiling(): boolean {
    for (const p of this.pending.values()) if (p.msg.type === 'open') return true
    return false
  }
  /** The heap right after the last replacement: the live grammars' own share, which replacing cannot give back. */
  private floorBytes = 0
  private batch: { mask: TokenMask; accept: number | null; resolve: (r: MaskResult) => void; reject: (e: OnnxdError) => void }[] = []
  private closed = false
  /** Thread replacements so far (tests and metrics read it). */
  replacements = 0

  constructor(
    private readonly vocabulary: () => GrammarVocabulary,
    /** Tokens that end a sequence (the model's EOS): allowed wherever the value may end, and only there. */
    private readonly stopIds: readonly number[],
    private readonly limits: GrammarLimits = DEFAULT_GRAMMAR_LIMITS,
  ) {}

  /**
   * A fresh matcher of `spec`'s grammar: compact JSON (no free whitespace, so a model cannot spend its tokens on
   * spaces). A schema past a bound, or with a constraint it cannot enforce, is a 422 naming it.
   */
  async matcher(spec: StructuredOutput): Promise<TokenMask> {
    const field = fieldOf(spec)
    checkBounds(spec)
    const mask = new TokenMask(this, this.nextMatcher++, JSON.stringify(spec), spec)
    const opened = await this.send({ type: 'open', req: this.nextReq++, m: mask.id, key: mask.key, spec, replay: [] }, field)
    if (this.closed) throw new OnnxdError('not_ready', 'engine is shutting down', { retryAfterS: 1 })
    if (opened.type === 'opened' && opened.bits) mask.bits = opened.bits
    this.live.set(mask.id, mask)
    return mask
  }

  /** Accepts `accept` on `mask`'s matcher and computes its next mask; the steps of one turn share one message. */
  step(mask: TokenMask, accept: number | null): Promise<MaskResult> {
    return new Promise((resolve, reject) => {
      if (this.batch.length === 0) queueMicrotask(() => this.flush())
      this.batch.push({ mask, accept, resolve, reject })
    })
  }

  private flush(): void {
    const batch = this.batch
    this.batch = []
    const msg: GrammarRequest = { type: 'next', req: this.nextReq++, items: batch.map((b) => ({ m: b.mask.id, accept: b.accept })) }
    this.send(msg).then(
      (reply) => {
        if (reply.type !== 'masks') return batch.forEach((b) => b.reject(new OnnxdError('internal', 'the grammar thread answered out of turn')))
        batch.forEach((b, i) => {
          if (b.accept !== null) b.mask.accepted.push(b.accept)
          b.resolve(reply.results[i]!)
        })
      },
      (e: OnnxdError) => batch.forEach((b) => b.reject(e)),
    )
  }

  /** Lets `mask`'s matcher go. */
  release(mask: TokenMask): void {
    if (!this.live.delete(mask.id)) return
    this.thread?.postMessage({ type: 'close', m: mask.id } satisfies GrammarRequest)
  }

  async close(): Promise<void> {
    this.closed = true
    this.clearTimer()
    const t = this.thread
    this.thread = null
    for (const p of this.pending.values()) p.reject(new OnnxdError('not_ready', 'engine is shutting down', { retryAfterS: 1 }))
    this.pending.clear()
    if (t) await t.terminate()
  }

  private send(msg: Pending['msg'], field?: string): Promise<GrammarReply> {
    if (this.closed) return Promise.reject(new OnnxdError('not_ready', 'engine is shutting down', { retryAfterS: 1 }))
    return new Promise((resolve, reject) => {
      this.pending.set(msg.req, { msg, resolve, reject, field })
      const t = this.threadOf()
      // Held while anything waits on it (a process whose only work is a compile must not exit); let go when idle.
      t.ref()
      t.postMessage(msg)
    })
  }

  private threadOf(): Worker {
    if (this.thread) return this.thread
    this.data ??= { vocabulary: this.vocabulary(), stopIds: [...this.stopIds], maxCached: this.limits.cached }
    const t = spawnThread(this.data)
    t.unref()
    // A thread that dies before its first answer could not start (a broken install): replacing it would only loop.
    let answered = false
    const died = (why: string): void => {
      if (this.thread !== t) return
      if (answered) this.replace(null, why)
      else this.failAll(new OnnxdError('internal', `the grammar thread could not start: ${why}`))
    }
    t.on('message', (r: GrammarReply) => {
      answered = true
      if (this.thread === t) this.onReply(r)
    })
    t.on('error', (e) => died(e.message.slice(0, 200)))
    t.on('exit', (code) => died(`it exited (code ${code})`))
    this.thread = t
    return t
  }

  private onReply(r: GrammarReply): void {
    queueMicrotask(() => this.pending.size === 0 && this.thread?.unref())
    if (r.type === 'compiling') {
      this.clearTimer()
      this.compileTimer = setTimeout(() => this.replace(r.req, null), this.limits.compileMs)
      this.compileTimer.unref()
      return
    }
    const p = this.pending.get(r.req)
    if (!p) return
    if (r.type === 'failed') {
      if (r.fatal) return this.replace(r.req, r.message)
      this.pending.delete(r.req)
      this.clearTimer()
      // The converter's own 422 (a keyword it cannot enforce) names its path already.
      if (r.refusal) return p.reject(new OnnxdError('invalid_value', r.refusal.message, r.refusal.param ? { param: r.refusal.param } : {}))
      return p.reject(this.refusal(p, r.message))
    }
    this.pending.delete(r.req)
    if (r.type === 'opened') {
      this.clearTimer()
      p.resolve(r)
      // Past the heap bound: a new thread gives the memory back, unless the live grammars alone hold that much.
      if (r.heapBytes > Math.max(this.limits.heapBytes, 2 * this.floorBytes)) queueMicrotask(() => this.replace(null, null))
      return
    }
    p.resolve(r)
  }

  /** Fails every request under way and every live matcher; the next request starts a new thread. */
  private failAll(e: OnnxdError): void {
    this.clearTimer()
    const old = this.thread
    this.thread = null
    void old?.terminate()
    for (const p of this.pending.values()) p.reject(e)
    this.pending.clear()
    for (const mask of this.live.values()) mask.broken = e
    this.live.clear()
  }

  private refusal(p: Pending, message: string): OnnxdError {
    if (p.msg.type === 'open') return new OnnxdError('invalid_value', `\`${p.field}\` cannot be compiled into a grammar: ${message}`, { param: requestField(p.field!) })
    return new OnnxdError('internal', `the grammar engine failed: ${message}`)
  }

  private clearTimer(): void {
    if (this.compileTimer) clearTimeout(this.compileTimer)
    this.compileTimer = null
  }

  /**
   * Replaces the thread. Request `culprit` (a compile past its time when `message` is null, else a trap) is refused;
   * every live matcher is rebuilt on the new thread from its grammar and accepted tokens, and every other request
   * under way is sent again there, in order.
   */
  private replace(culprit: number | null, message: string | null): void {
    if (this.closed) return
    this.clearTimer()
    const old = this.thread
    this.thread = null
    void old?.terminate()
    this.replacements++
    const c = culprit === null ? undefined : this.pending.get(culprit)
    if (c) {
      this.pending.delete(culprit!)
      c.reject(
        message === null
          ? new OnnxdError('invalid_value', `\`${c.field}\` took more than ${this.limits.compileMs} ms to compile into a grammar; send a smaller schema (fewer properties, enum values or alternatives)`, { param: requestField(c.field!) })
          : this.refusal(c, `the grammar engine failed (${message}); it was restarted`),
      )
    }
    const again = [...this.pending.values()].sort((a, b) => a.msg.req - b.msg.req)
    this.pending.clear()
    const thread = this.threadOf()
    let floor = 0
    for (const mask of this.live.values()) {
      const req = this.nextReq++
      const replay: GrammarRequest = { type: 'open', req, m: mask.id, key: mask.key, spec: mask.spec, replay: [...mask.accepted] }
      this.pending.set(req, {
        msg: replay,
        resolve: (r) => {
          if (r.type === 'opened') this.floorBytes = floor = Math.max(floor, r.heapBytes)
        },
        // A matcher that cannot be rebuilt fails its own sequence at its next step.
        reject: (e) => (mask.broken = e),
        field: 'the grammar',
      })
      thread.postMessage(replay)
    }
    this.floorBytes = floor
    for (const p of again) {
      this.pending.set(p.msg.req, p)
      thread.postMessage(p.msg)
    }
  }
}

/** One sequence's walk through its grammar; its matcher lives on the grammar thread. */
export class TokenMask {
  /** Bit i set: token i is allowed at this step (filled by next()). */
  bits: Int32Array = new Int32Array(0)
  /**
   * The value is complete after the tokens accepted before the last next(): nothing but an end-of-sequence token may
   * follow (the sequence ends there, without one), or one was taken.
   */
  terminated = false
  /** Tokens the thread has accepted, in order (a replaced thread's matcher is rebuilt from them). */
  readonly accepted: number[] = []
  /** Set when the thread was replaced and this matcher could not be rebuilt. */
  broken: OnnxdError | null = null
  private picked: number | null = null

  constructor(
    private readonly owner: Grammars,
    readonly id: number,
    readonly key: string,
    /** What its grammar is made from (the thread builds the grammar, and again when it is replaced). */
    readonly spec: StructuredOutput,
  ) {}

  /**
   * Accepts the picked token (sent with the next call of next()), then computes the next step's allowed tokens and
   * whether the value is complete. Throws when the grammar refused the token or its matcher was lost. The first
   * step's mask comes with the matcher: `bits` holds it before any call.
   */
  async next(): Promise<void> {
    const accept = this.picked
    this.picked = null
    if (this.broken) throw this.broken
    const r = await this.owner.step(this, accept)
    if (this.broken) throw this.broken
    if (r.rejected) throw new OnnxdError('internal', `token ${accept} is outside the grammar`)
    this.terminated = r.terminated
    this.bits = r.bits ?? new Int32Array(0)
  }

  /** The thread is compiling a grammar: this matcher's next mask may be a while (a whole compile) in coming. */
  get busy(): boolean {
    return this.owner.compiling
  }

  /** Takes `id` as the pick after this step's mask; false when the mask does not allow it (a bug: it was not applied). */
  accept(id: number): boolean {
    if (this.terminated || ((this.bits[id >> 5] ?? 0) & (1 << (id & 31))) === 0) return false
    this.picked = id
    return true
  }

  dispose(): void {
    this.owner.release(this)
  }
}
