// The continuous-batching step loop of one engine replica: admits waiting sequences into a prefill group, runs
// prefill in chunks of at most `maxBatchedTokens` tokens between decode steps of the running batch, merges a
// prefilled group into the running batch, and drops finished or cancelled rows at once.
//
// Stall bound: a running stream waits at most one prefill chunk (<= maxBatchedTokens prompt tokens) between two
// of its decode steps, because the loop alternates one chunk and one decode step. Graphs that cannot take a chunk
// on top of a cache (see DecoderSession.chunkedPrefill) prefill a whole group at once: then the bound is one
// group, whose rows x prompt width admit() keeps within maxBatchedTokens unless a single prompt is longer.
import type { LoadedModel } from '../model/load.js'
import type { KvRows } from '../model/step-io.js'
import { DeviceKv } from '../model/device-kv.js'
import { OnnxdError, toErrorData } from '../../shared/errors.js'
import type { EngineStats, FinishObservation, StepObservation } from '../types.js'
import { KvCache, kvShapeOf, type KvShape } from './kv.js'
import type { Sequence } from './sequence.js'
import { FairQueue } from './fair-queue.js'
import { planStep } from './step-plan.js'
import { PREFIX_BLOCK, PrefixCache, type PrefixHit } from './prefix-cache.js'

/** A prompt without a cached prefix (or with prefix caching off). */
const NO_HIT: PrefixHit = { tokens: 0, blocks: [] }

/**
 * Asks for the next step's grammar masks of the rows that have one (structured outputs) and waits for them, unless
 * the grammar thread is compiling: then a compile may stand before them, and only what is already there is taken (a
 * row without its mask sits the step out, see decodeStep). Returns whether every row's mask is there.
 */
async function prepareGrammars(seqs: readonly Sequence[]): Promise<boolean> {
  // Most steps have none: no array is made for them.
  if (!seqs.some((s) => s.constrained)) return true
  const all = Promise.all(seqs.map((s) => s.prepare()))
  if (seqs.some((s) => s.maskSlow)) await Promise.race([all, new Promise((r) => setImmediate(r))])
  else await all
  return seqs.every((s) => s.maskReady)
}

/** The largest prefill cache kept for the next group, in multiples of the batched-token budget (Batcher.spare). */
const SPARE_TOKENS = 4

/** Fewest prompt columns per row a prefill chunk is cut to when a group has many rows (see admit()). */
const MIN_CHUNK = 32

/** What a row that sits a step out feeds. */
const NO_TOKENS: readonly number[] = []

export interface BatcherOptions {
  /** Max sequences decoding together (running batch rows plus the prefill group). */
  maxRunning: number
  /** Max sequences waiting for admission; beyond it submit() throws queue_full. */
  maxWaiting: number
  /** Max prompt tokens (rows x chunk length) in one prefill forward. */
  maxBatchedTokens: number
  /**
   * KV-cache budget in bytes for the worst case of every admitted sequence reaching its max_tokens. The prefix
   * cache lives in what admitted sequences leave of it, and gives room back as they need it.
   */
  kvBudgetBytes: number
  /** Automatic prefix caching (prefix-cache.ts): prompts reuse the KV rows of cached prefixes. */
  prefixCaching: boolean
  /**
   * Speculative decoding by n-gram lookup (generation/draft.ts): up to this many draft tokens per row and decode step,
   * checked in the step itself, in steps where every row decodes greedily; 0 is off.
   */
  speculativeTokens: number
  /**
   * Drafts only while at most this many rows run: a draft widens the whole step, which pays where a step costs about
   * the same for a few more tokens (few rows) and costs more than it saves where the step is compute-bound.
   */
  speculativeMaxRows: number
}

export interface BatcherObserver {
  onStep?(s: StepObservation): void
  onFinish?(f: FinishObservation): void
}

/** Sequences being prefilled together: prompts left-padded to one length and consumed column by column. */
interface PrefillGroup {
  seqs: Sequence[]
  width: number
  /** Columns of the padded prompt matrix already in the cache. */
  cursor: number
  /** The prompts' tokens after their cached prefixes, left-padded to `width`. */
  ids: Int32Array
  pads: number[]
  /** Each row's cached prefix, in tokens: the row's cache starts with it, and its positions after it. */
  cached: number[]
  kv: KvRows
}

/**
 * The drafts of a step over a device cache, as it feeds them: each padded to 2^m - 1 tokens for the smallest m that
 * holds `k` (a row then carries 2^m tokens: each new shape costs the provider its shaders' compiles, and this keeps
 * drafting to one per row count, which Engine.warmUp runs), with copies of its last token, or of the row's own token
 * (`pending`) where it found none: a device step feeds every row as many tokens. A pad is checked like a draft token,
 * so the output is unchanged (a pad the model picks is its next token). No drafts at all where none was found, or where
 * the padded ones would not fit the slots the step covers (`room` tokens after the longest).
 */
export function deviceDrafts(drafts: ReadonlyArray<readonly number[]>, pending: readonly number[], k: number, room: number): Array<readonly number[]> {
  const width = 2 ** Math.ceil(Math.log2(k + 1)) - 1
  if (width > room || drafts.every((d) => d.length === 0)) return drafts.map(() => NO_TOKENS)
  return drafts.map((d, r) => Array.from({ length: width }, (_, i) => (d.length ? d[Math.min(i, d.length - 1)] : pending[r])))
}

export class Batcher {
  /** Sequences waiting for admission: in arrival order per tenant, tenants in turn (fair-queue.ts). */
  private readonly waiting = new FairQueue<Sequence>()
  /** Row r of `kv` is running[r]. */
  private running: Sequence[] = []
  private kv: KvRows
  private group: PrefillGroup | null = null
  private wake: (() => void) | null = null
  private closed = false
  private heartbeat = Date.now()
  private readonly loopDone: Promise<void>
  private readonly kvShape: KvShape
  /** Null when off, or when the graph cannot take new tokens on top of a cache (then a prefix cannot be reused). */
  private readonly prefix: PrefixCache | null
  /** Whether decode steps may carry drafts (opts.speculativeTokens, where the session takes them). */
  private readonly speculative: boolean
  /**
   * The last prefill group's host cache, emptied, for the next group: its pages are mapped already, where a new
   * cache per group faulted in fresh pages on every prefill (135m: 24 MB for 4 prompts of 128). Kept while busy, up
   * to SPARE_TOKENS times the batched-token budget, and counted in what the cache holds.
   */
  private spare: KvCache | null = null

  constructor(
    private readonly model: LoadedModel,
    private readonly opts: BatcherOptions,
    private readonly observer: BatcherObserver = {},
  ) {
    this.kvShape = kvShapeOf(model.session.signature.kv)
    this.kv = this.newKv()
    // A device cache is never read by the host: it keeps prompts in its own slots instead (admit()).
    this.prefix = opts.prefixCaching && model.session.chunkedPrefill && !model.session.deviceResident ? new PrefixCache() : null
    this.speculative = opts.speculativeTokens > 0 && model.session.signature.nextToken !== null && model.session.multiTokenRows > 0
    if (opts.speculativeTokens > 0 && !this.speculative) {
      const why = model.session.signature.nextToken === null
        ? 'the graph gives no greedy next token (its LM head was not found, or its logits are not float32)'
        : 'the graph takes no steps of several tokens per row on top of a cache'
      process.emitWarning(`speculative decoding off: ${why}`, { code: 'ONNXD_SPECULATIVE_OFF' })
    }
    this.loopDone = this.loop()
  }

  /**
   * A cache for rows: on the session's device when it keeps its cache there (a prefill group's in its staging pool),
   * else in host memory.
   */
  private newKv(prefill = false): KvRows {
    if (prefill && this.spare) {
      const kv = this.spare
      this.spare = null
      return kv
    }
    const limits = { budgetBytes: this.opts.kvBudgetBytes, maxRows: this.opts.maxRunning, contextLength: this.model.contextLength }
    return this.model.session.deviceKv(limits, prefill) ?? new KvCache(this.kvShape)
  }

  /**
   * Whether `s` can take a slot of the device cache now (true for a host cache): a device cache's rows never move,
   * so a sequence longer than its slots waits until the cache is empty and sized again.
   */
  private fitsDevice(s: Sequence): boolean {
    return !(this.kv instanceof DeviceKv) || this.kv.admits(s.promptIds.length + s.maxTokens)
  }

  /** Drops the prefill group, emptying its rows' cache (the rows the batch took stay). */
  private dropGroup(): void {
    if (this.group) this.retire(this.group.kv)
    this.group = null
  }

  /** Empties a prefill group's cache, and keeps a host cache of a usual size as the next group's (`spare`). */
  private retire(kv: KvRows): void {
    kv.clear()
    if (kv instanceof KvCache && kv.bytes() <= SPARE_TOKENS * this.opts.maxBatchedTokens * this.model.kvBytesPerToken) this.spare = kv
  }

  /** What the caches hold: the running batch's, the prefill group's and the spare. */
  private heldBytes(): number {
    return this.kv.bytes() + (this.group?.kv.bytes() ?? 0) + (this.spare?.bytes() ?? 0)
  }

  /** Queues a sequence; throws queue_full when the waiting queue is at its bound. */
  submit(seq: Sequence): void {
    if (this.closed) throw new OnnxdError('not_ready', 'engine is shutting down', { retryAfterS: 1 })
    if (this.waiting.length >= this.opts.maxWaiting) {
      throw new OnnxdError('queue_full', `queue full (${this.opts.maxWaiting} waiting)`, { retryAfterS: 1 })
    }
    const need = this.reserveBytes([seq])
    if (need > this.opts.kvBudgetBytes) {
      throw new OnnxdError('context_length_exceeded', `prompt tokens + max_tokens need ${need} bytes of KV cache, over this node's budget of ${this.opts.kvBudgetBytes}. Given: ${seq.promptIds.length} + ${seq.maxTokens}`)
    }
    this.waiting.push(seq)
    this.wake?.()
  }

  stats(): EngineStats {
    return {
      running: this.running.length,
      waiting: this.waiting.length,
      prefilling: this.group?.seqs.length ?? 0,
      kvUsedBytes: this.heldBytes(),
      prefixCacheBytes: this.prefix?.bytes ?? 0,
      kvBudgetBytes: this.opts.kvBudgetBytes,
      maxRunning: this.opts.maxRunning,
      maxWaiting: this.opts.maxWaiting,
      heartbeat: this.heartbeat,
    }
  }

  /** Stops the loop. In-flight sequences end with `error` events unless they finished first. */
  async close(): Promise<void> {
    this.closed = true
    this.wake?.()
    await this.loopDone
  }

  /** Worst-case padded cache bytes if `extra` joined everything admitted now. */
  private reserveBytes(extra: Sequence[]): number {
    const all = [...this.running, ...(this.group?.seqs ?? []), ...extra]
    const longest = all.reduce((m, s) => Math.max(m, s.promptIds.length + s.maxTokens), 0)
    return all.length * longest * this.model.kvBytesPerToken
  }

  private async loop(): Promise<void> {
    while (!this.closed) {
      this.heartbeat = Date.now()
      this.dropCancelled()
      if (!this.group) this.admit()
      if (!this.group && this.running.length === 0) {
        // No step until a request comes: the session lets go of what its steps hold bound (runtime 'capi').
        this.model.session.idle()
        const woken = await new Promise<boolean>((r) => {
          this.wake = () => r(true)
          // Idle ticks keep the heartbeat fresh, so a quiet engine is not mistaken for a hung one.
          const t = setTimeout(() => r(false), 1000)
          t.unref?.()
        })
        this.wake = null
        // A second idle: the cache's memory goes back (it stays mapped between back-to-back requests).
        if (!woken) {
          this.kv.release()
          this.spare = null
        }
        continue
      }
      try {
        if (this.group) await this.prefillChunk()
        if (this.running.length) await this.decodeStep()
      } catch (e) {
        this.failAll(toErrorData(e).message)
      }
      // A step may block this thread from start to end (runtime 'capi' runs ORT on it) and settle in microtasks
      // alone: one turn of the event loop takes the messages that came meanwhile (new requests, cancels) before
      // the next step is planned.
      await new Promise<void>((r) => setImmediate(r))
    }
    const err = new OnnxdError('not_ready', 'engine closed before the request finished')
    for (const s of [...this.waiting, ...(this.group?.seqs ?? []), ...this.running]) s.fail(toErrorData(err))
    this.waiting.clear()
    this.running = []
    this.dropGroup()
    this.kv.clear()
    this.kv.release()
    this.spare = null
  }

  private failAll(message: string): void {
    const err = toErrorData(new OnnxdError('internal', message))
    for (const s of [...(this.group?.seqs ?? []), ...this.running]) {
      s.fail(err)
      this.observer.onFinish?.(s.observation('error'))
    }
    this.dropGroup()
    this.running = []
    this.kv.clear()
    this.kv = this.newKv()
  }

  /** Ends a cancelled sequence: its sink hears an error (nobody is listening any more) and metrics count an abort. */
  private abort(s: Sequence): void {
    s.fail({ code: 'internal', message: 'request cancelled' })
    this.observer.onFinish?.(s.observation('abort'))
  }

  private dropCancelled(): void {
    for (const s of this.waiting.removeWhere((w) => w.cancelled)) this.abort(s)
    if (this.group && this.group.seqs.every((s) => s.cancelled)) {
      for (const s of this.group.seqs) this.abort(s)
      this.dropGroup()
    }
    if (this.running.some((s) => s.cancelled)) this.keepRunning((s) => !s.cancelled)
  }

  /** Keeps the running rows that pass `keep`; dropped cancelled rows are observed as aborts. */
  private keepRunning(keep: (s: Sequence) => boolean): void {
    // From the end, so the last row that removeRow() moves into a hole has already been kept.
    for (let r = this.running.length - 1; r >= 0; r--) {
      const s = this.running[r]
      if (keep(s)) continue
      if (s.cancelled && !s.done) this.abort(s)
      this.kv.removeRow(r)
      this.running[r] = this.running[this.running.length - 1]
      this.running.pop()
    }
    this.reserveKv()
  }

  /**
   * Sizes the running cache for the worst case of everything admitted and of the requests waiting behind it, so it
   * grows in place; ahead of that, up to maxRunning rows as the KV budget holds (KvCache.reserve). A burst of
   * requests then sizes it once, where sizing it for the admitted rows alone reallocated it, and copied its rows into
   * fresh pages, log2(burst) times as the prefill groups joined.
   */
  private reserveKv(): void {
    const all = [...this.running, ...(this.group?.seqs ?? [])]
    const slots = all.reduce((m, s) => Math.max(m, s.promptIds.length + s.maxTokens), 0)
    const fit = Math.floor(this.opts.kvBudgetBytes / Math.max(1, slots * this.model.kvBytesPerToken))
    const maxRows = Math.min(this.opts.maxRunning, fit)
    this.kv.reserve(Math.max(all.length, Math.min(maxRows, all.length + this.waiting.length)), slots, maxRows)
  }

  /**
   * Moves waiting sequences into a new prefill group while slots and the KV budget allow, taking tenants in turn: a
   * tenant's next sequence comes after one of every other tenant waiting, whatever order they arrived in.
   */
  private admit(): void {
    const take: Sequence[] = []
    // A device cache prefills in a one-slot staging pool: one prompt at a time, in either graph form.
    // GroupQueryAttention takes several tokens per row at batch > 1 only over no past (DecoderSession.multiTokenRows):
    // its prompts go together only when none has a cached prefix and all fit one step whole; else one at a time.
    // Otherwise a group is as many prompts as fit one step whole, or as many as still get chunks of at least MIN_CHUNK
    // columns: many rows of a few columns each run slower (135m, 512-token steps: 16 rows x 32 columns prefill 1681
    // tokens/s, 64 x 8 only 1368).
    const inPlace = this.kvShape.present === 'in-place'
    const device = this.model.session.deviceResident
    const maxGroup = Math.max(1, Math.floor(this.opts.maxBatchedTokens / MIN_CHUNK))
    const chunked = this.model.session.chunkedPrefill
    let width = 0
    const fitsWhole = (): boolean => (take.length + 1) * Math.max(width, this.waiting.peek()!.promptIds.length) <= this.opts.maxBatchedTokens
    // Prompts that would compute a block another prompt of the group computes wait for the next group, which finds
    // it cached: n choices of one prompt, or a burst of requests on one system prompt, prefill it once.
    const later: Sequence[] = []
    // Each taken prompt's longest cached prefix, looked up once, leaving at least its last token to compute (its
    // logits are wanted).
    const hits: PrefixHit[] = []
    const together = (): boolean => !device && (inPlace ? hits.every((h) => h.tokens === 0) && fitsWhole() : (chunked && take.length < maxGroup) || fitsWhole())
    while (
      this.waiting.length &&
      (take.length === 0 || together()) &&
      this.running.length + take.length < this.opts.maxRunning &&
      this.reserveBytes([...take, this.waiting.peek()!]) <= this.opts.kvBudgetBytes &&
      this.fitsDevice(this.waiting.peek()!)
    ) {
      const s = this.waiting.shift()!
      const hit = this.prefix?.lookup(s.promptIds, s.promptIds.length - 1) ?? NO_HIT
      // A prompt with a cached prefix joins no GroupQueryAttention group: it goes alone, on top of its prefix.
      if (this.sharesUncachedBlock(s, hit.tokens, take) || (inPlace && take.length > 0 && hit.tokens > 0)) {
        later.push(s)
        continue
      }
      width = Math.max(width, s.promptIds.length)
      take.push(s)
      hits.push(hit)
    }
    this.waiting.unshift(...later)
    if (!take.length) return
    const kv = this.newKv(true)
    // A device cache's rows keep their slot to the end: it is sized for the whole sequence from the start.
    const longest = take.reduce((m, s) => Math.max(m, s.promptIds.length + (this.model.session.deviceResident ? s.maxTokens : 0)), 0)
    kv.reserve(take.length, longest)
    kv.addRows(take.length)
    if (kv instanceof KvCache) hits.forEach((h, r) => h.tokens && kv.loadPrefix(r, h.blocks, PREFIX_BLOCK))
    // On the device (one prompt per group): the running pool's slots keep the prompts their rows joined with; the
    // longest start of this prompt one of them holds is copied into its staging row. Looked up once the row has its
    // slot, since taking it may have reallocated the pool.
    const onDevice = kv instanceof DeviceKv && this.opts.prefixCaching ? kv : null
    const devHit = onDevice?.cachedPrompt(take[0].promptIds, take[0].promptIds.length - 1, PREFIX_BLOCK)
    if (onDevice && devHit) {
      onDevice.loadPrompt(0, devHit)
      hits[0] = { tokens: devHit.tokens, blocks: [] }
    }
    const cached = hits.map((h) => h.tokens)
    width = take.reduce((m, s, r) => Math.max(m, s.promptIds.length - cached[r]), 0)
    const ids = new Int32Array(take.length * width)
    const pads = take.map((s, r) => {
      const pad = width - (s.promptIds.length - cached[r])
      ids.set(s.promptIds.slice(cached[r]), r * width + pad)
      s.admitted(this.prefix || onDevice ? cached[r] : null)
      return pad
    })
    this.group = { seqs: take, width, cursor: 0, ids, pads, cached, kv }
    this.reserveKv()
    this.fitPrefixCache()
  }

  /** Whether `s` shares a whole block beyond the `cached` tokens the prefix cache gives it with a prompt in `take`. */
  private sharesUncachedBlock(s: Sequence, cached: number, take: readonly Sequence[]): boolean {
    if (!this.prefix || take.length === 0) return false
    const ids = s.promptIds
    const limit = ids.length - 1
    const need = cached + PREFIX_BLOCK
    if (need > limit) return false
    // A group member caches every whole block of its prompt when its prefill ends.
    return take.some((t) => {
      if (t.promptIds.length < need) return false
      for (let i = 0; i < need; i++) if (t.promptIds[i] !== ids[i]) return false
      return true
    })
  }

  /**
   * Evicts cached prefixes until they fit in what the admitted sequences leave of the budget: their worst case, or
   * the buffers already held for them when those are larger (slots are rounded up, and kept while busy).
   */
  private fitPrefixCache(): void {
    this.prefix?.shrinkTo(this.prefixLimit())
  }

  /** What the admitted sequences leave of the KV budget for cached prefixes (fitPrefixCache). */
  private prefixLimit(): number {
    return Math.max(0, this.opts.kvBudgetBytes - Math.max(this.reserveBytes([]), this.heldBytes()))
  }

  private async prefillChunk(): Promise<void> {
    const g = this.group!
    const rows = g.seqs.length
    let seq = this.model.session.chunkedPrefill
      ? Math.max(1, Math.min(g.width - g.cursor, Math.floor(this.opts.maxBatchedTokens / rows)))
      : g.width
    // On a device cache: within the slot's room, and in powers of two (a prompt of 100 goes in as 64 + 32 + 4), since
    // each new shape costs the provider its shaders' compiles.
    if (g.kv instanceof DeviceKv) seq = 2 ** Math.floor(Math.log2(Math.max(1, Math.min(seq, g.kv.room()))))
    const total = g.cursor + seq
    const last = total === g.width
    // The last chunk samples each row's first token: constrained rows need their first masks. Behind a grammar
    // compile, the chunk waits (the running rows step meanwhile).
    if (last && !(await prepareGrammars(g.seqs))) {
      if (this.running.length === 0) await this.waitForMasks(g.seqs)
      return
    }
    // Row r's prompt is left-padded by pads[r]: this chunk's first columns may still be padding.
    const chunk = g.pads.map((pad, r) => g.ids.subarray(r * g.width + Math.max(pad, g.cursor), r * g.width + total))
    // GroupQueryAttention takes a group's prompts together only as its first step, over no past (admit()).
    const fresh = this.kvShape.present === 'in-place' && rows > 1
    const { x, counts, first } = planStep(g.kv, this.model.session.signature, chunk, { fresh })
    // Each row's last prompt token (a chunk ends every row's prompt together).
    const picks = last ? g.seqs.map((_, r) => r * x.seq + first[r] + counts[r] - 1) : []
    const t0 = performance.now()
    const out = await this.model.session.forward(x, picks)
    this.observer.onStep?.({ phase: 'prefill', seconds: (performance.now() - t0) / 1000, batch: rows, tokens: counts.reduce((n, c) => n + c, 0), bytesIn: out.traffic.in, bytesOut: out.traffic.out })
    g.cursor = total
    g.kv.append(out.present, counts)
    if (!last) return

    // The whole prompt is in the cache: keep its blocks for later prompts, sample each row's first token, then move
    // the live rows into the batch.
    // At its bound, the prefix cache writes new blocks over the ones it evicts (prefix-cache.ts). Its bound counts
    // the group's cache, which stays held (as the spare, or in the running rows).
    const limit = this.prefixLimit()
    this.group = null
    const host = g.kv instanceof KvCache ? g.kv : null
    if (host) g.seqs.forEach((s, r) => this.prefix?.insert(s.promptIds, (from, n, into) => host.readSlots(r, from, n, into), limit))
    const V = this.model.vocab
    g.seqs.forEach((s, r) => {
      if (s.cancelled) {
        this.abort(s)
        return
      }
      // Failed while its grammar was prepared (a grammar thread fault), before its first token.
      if (s.done) {
        this.observer.onFinish?.(s.observation('error'))
        return
      }
      if (s.step(out.logits.subarray(r * V, (r + 1) * V))) this.observer.onFinish?.(s.observation('done'))
      else {
        this.kv.takeRow(g.kv, r)
        // Its slot keeps the prompt for later prompts that start the same way (prefix caching on the device).
        if (this.kv instanceof DeviceKv && this.opts.prefixCaching) this.kv.notePrompt(this.kv.rows - 1, s.promptIds)
        this.running.push(s)
      }
    })
    this.retire(g.kv)
    this.fitPrefixCache()
  }

  /**
   * Waits until one of `seqs` has its mask, a request comes (submit() wakes it), or a moment passes (cancels are
   * flags, seen by the next loop turn).
   */
  private async waitForMasks(seqs: readonly Sequence[]): Promise<void> {
    let timer: NodeJS.Timeout | undefined
    await Promise.race([
      ...seqs.map((s) => s.prepare()),
      new Promise<void>((r) => {
        this.wake = r
        timer = setTimeout(r, 50)
      }),
    ])
    clearTimeout(timer)
    this.wake = null
  }

  private async decodeStep(): Promise<void> {
    // Constrained rows hear whether their last token completed the value (then they end here) and get their masks.
    const ready = await prepareGrammars(this.running)
    if (this.running.some((s) => s.done)) {
      for (const s of this.running) if (s.done && !s.cancelled) this.observer.onFinish?.(s.observation(s.finished ? 'done' : 'error'))
      this.keepRunning((s) => !s.done && !s.cancelled)
      if (this.running.length === 0) return
    }
    // A row whose mask is behind a grammar compile sits this step out: it runs with the others, fed a pad that its
    // cache does not keep (step-plan.ts), and nothing of it is sampled. The others never wait for the compile.
    const sits = ready ? null : this.running.map((s) => !s.maskReady)
    if (sits?.every(Boolean)) {
      // Nothing to step: wait for a mask, unless a prefill is waiting to go on.
      if (!this.group) await this.waitForMasks(this.running)
      return
    }
    const kv = this.kv
    const rows = this.running.length
    const session = this.model.session
    // When every row decodes greedily the graph's argmax is the step's sampling: no logits leave ORT.
    const greedy = session.signature.nextToken !== null && this.running.every((s) => s.greedyNow)
    // Speculative decoding: each row's token and a draft after it, checked against the graph's argmax at each.
    // GroupQueryAttention takes them with one running row only (DecoderSession.multiTokenRows), and on the device only
    // while its slot is the one the step covers.
    const device = kv instanceof DeviceKv ? kv : null
    // A row behind a grammar compile sits the step out: on the device every row carries the same tokens, so no drafts.
    const draftable = rows <= Math.min(session.multiTokenRows, this.opts.speculativeMaxRows) && (device === null || ((device.stepsAlone || this.kvShape.present !== 'in-place') && sits === null))
    const found = greedy && this.speculative && draftable ? this.running.map((s) => s.draft(this.opts.speculativeTokens)) : null
    const drafts = device && found ? deviceDrafts(found, this.running.map((s) => s.pending), this.opts.speculativeTokens, device.room() - 1) : found
    const drafting = drafts !== null && drafts.some((d) => d.length > 0)
    const tokens = this.running.map((s, r) => (sits?.[r] ? NO_TOKENS : drafting ? [s.pending, ...drafts[r]] : [s.pending]))
    const { x, counts, first } = planStep(kv, session.signature, tokens)
    const t0 = performance.now()
    const out = greedy
      ? await session.forwardGreedy(x, drafting ? Array.from({ length: x.seq }, (_, j) => j) : undefined)
      : await session.forward(x, this.running.map((_, r) => r))
    const seconds = (performance.now() - t0) / 1000
    let drafted = 0
    let accepted = 0
    kv.append(out.present, counts)
    const V = this.model.vocab
    let finished = false
    const finish = (s: Sequence): void => {
      finished = true
      this.observer.onFinish?.(s.observation('done'))
    }
    this.running.forEach((s, r) => {
      if (s.cancelled || sits?.[r]) return
      if (!('tokens' in out)) {
        if (s.step(out.logits.subarray(r * V, (r + 1) * V))) finish(s)
        return
      }
      // The graph's pick after the row's token, then after each draft token while the draft was right: every pick is
      // the row's next token, the first wrong draft token ends them.
      const draft = drafting ? drafts[r] : NO_TOKENS
      const at = r * x.seq + first[r]
      let k = 0
      for (;;) {
        const token = out.tokens[at + k]
        if (s.stepToken(token)) {
          finish(s)
          // A right draft token that ends the sequence (EOS, a stop, the length) was accepted too.
          if (token === draft[k]) k++
          break
        }
        if (k === draft.length || token !== draft[k]) break
        k++
      }
      // Every draft token fed is counted, a device draft's pads too (deviceDrafts: they are checked as any guess), so
      // that each accepted one is a token that took no decode step of its own.
      drafted += draft.length
      accepted += k
      // The cache keeps the row's token and the draft tokens it accepted; the next step writes over the rest.
      if (draft.length > k) kv.truncate(r, kv.lens[r] - (draft.length - k))
    })
    this.observer.onStep?.({ phase: 'decode', seconds, batch: rows, tokens: counts.reduce((n, c) => n + c, 0), bytesIn: out.traffic.in, bytesOut: out.traffic.out, ...(drafting ? { drafted, accepted } : {}), ...(out.traffic.replayed ? { replayed: true } : {}) })
    if (finished) this.keepRunning((s) => !s.done && !s.cancelled)
  }
}
