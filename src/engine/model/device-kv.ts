// The KV cache in GPU memory, for the C-API runtime on a GPU provider: one device tensor per past input,
// [slots, heads, cap, headDim], allocated with the session's device allocator and never read by JS. A GroupQueryAttention
// step binds the first `hi` slots of each tensor as both its past and its present (ORT's past_present_share_buffer), so
// ORT appends each row's new keys and values in place on the device. A plain-op graph's step binds them as its past
// (each slot's whole cap, masked past its length), writes its new rows to device tensors (DeviceNewRows), and a second
// small graph scatters those into each slot after its length (capi-session.ts appendGraph). Per step only ids,
// positions, lengths (a plain graph's, from which it builds its mask: decoder-graph.ts maskFromLengths, and its scatter
// index) and the next tokens (or the sampling rows' logits) cross between host and device.
//
// Two pools per session: the running batch's, and a one-slot staging pool where a prompt is prefilled (ORT's WebGPU
// GroupQueryAttention takes several new tokens over a cache at batch 1 only). A prefilled row joins the batch by one
// device-side copy into a free slot (DeviceCopier: ScatterND in place, on the same provider). Rows never move after
// that: the scheduler's row order is a map onto slots (DeviceKv.slotOf), so that a row leaving is a change of the map.
// A step runs over slots [0, hi) of its pool: free slots below hi ride along as dummy rows, which write past their
// own length (the prompt a slot keeps for prefix caching, or zero) and are not read back. A slot keeps the prompt its
// last row joined with (notePrompt), so a later prompt that starts the same way is copied from it into the staging
// row (cachedPrompt, loadPrompt) instead of computed: prefix caching on the device, in the pool's own slots, as
// llama-server's slots keep their prompts. Imports: ort-capi and step-io types only.
import { OnnxdError } from '../../shared/errors.js'
import type { DeviceAllocator, DeviceTensor } from './ort-capi.js'
import { truncatedLength, type KvRows, type KvTensor, type Signature } from './step-io.js'

/** The slot of a row another cache took. */
const TAKEN = -1

/** Slot strides are multiples of this (as the host cache's chunk). */
const CAP_STEP = 64

/** What sizes a pool when it is (re)allocated: the scheduler's KV budget and row limit, and the model's context. */
export interface DevicePoolLimits {
  budgetBytes: number
  maxRows: number
  contextLength: number
}

/** Copies slot `fromSlot` of one pool's tensors into slot `slot` of another's, on the device. */
export type DeviceCopier = (from: readonly DeviceTensor[], fromSlot: number, to: readonly DeviceTensor[], slot: number) => void

/** The device tensors of one pool, and which cache owns each slot. */
export class DevicePool {
  private tensors: DeviceTensor[] = []
  /** Views of the tensors' first `viewRows` slots, bound by steps over that many slots. */
  private views: DeviceTensor[] = []
  private viewRows = 0
  private owners: Array<DeviceKv | null> = []
  /**
   * The prompt whose keys and values slot s holds from its start (noted when a row joins it), or null: kept after the
   * row leaves, until the slot is taken again or the pool reallocated, so that a later prompt starting the same way
   * copies them instead of computing them (llama-server's slot prompt cache, on the device).
   */
  private prompts: Array<readonly number[] | null> = []
  slots = 0
  cap = 0
  /** What the scheduler reserved last: rows and slots per row (the pool's size when next allocated). */
  private want = { rows: 1, slots: CAP_STEP }
  limits: DevicePoolLimits = { budgetBytes: Number.MAX_SAFE_INTEGER, maxRows: 64, contextLength: 4096 }
  /** Allocations so far (what a test watches: steady serving allocates none). */
  allocations = 0

  constructor(
    private readonly allocator: DeviceAllocator,
    private readonly kv: Signature['kv'],
    /** The running pool, for a staging pool: it takes that pool's slot length, and one slot. */
    private readonly stagingFor: DevicePool | null = null,
    /**
     * Allocated once, at the model's context length, and kept until the session closes (WebGPU graph capture: the
     * captured step reads and writes the tensors' addresses as they were when it was captured).
     */
    readonly fixed = false,
  ) {}

  /** The tensors, [slots, heads, cap, headDim] each. */
  get all(): readonly DeviceTensor[] {
    return this.tensors
  }

  /** Bytes of one token of one row, over every past tensor. */
  get bytesPerToken(): number {
    return this.kv.pastNames.length * this.kv.heads * this.kv.headDim * (this.kv.dtype === 'float16' ? 2 : 4)
  }

  bytes(): number {
    return this.slots * this.cap * this.bytesPerToken
  }

  /** One more than the highest occupied slot: a step runs over slots [0, hi). */
  get hi(): number {
    for (let s = this.owners.length - 1; s >= 0; s--) if (this.owners[s]) return s + 1
    return 0
  }

  get occupied(): number {
    return this.owners.reduce((n, o) => n + (o ? 1 : 0), 0)
  }

  /**
   * The length of the row in slot `s`; for a free slot, the length of the prompt it keeps (0 for none), so that a step
   * running it as a dummy row writes after that prompt, not over it.
   */
  lenAt(s: number): number {
    const o = this.owners[s]
    return o ? o.lens[o.rowOf(s)] : (this.prompts[s]?.length ?? 0)
  }

  reserve(rows: number, slots: number): void {
    this.want = { rows: Math.max(this.want.rows, rows), slots: Math.max(this.want.slots, slots) }
  }

  /**
   * Whether a sequence of `tokens` tokens (prompt + max_tokens) can take a slot now: a free slot with room, or an
   * empty pool (which is then reallocated at its size).
   */
  admits(tokens: number): boolean {
    if (this.occupied === 0) return true
    return this.occupied < this.slots && tokens <= this.cap
  }

  /** Takes the lowest free slot for `owner`, allocating the tensors when the pool is empty and too small or has none. */
  take(owner: DeviceKv): number {
    if (this.occupied === 0) this.size()
    const s = this.owners.indexOf(null)
    if (s < 0 || s >= this.slots) throw new OnnxdError('internal', `no free KV slot on the device (${this.slots} slots)`)
    this.owners[s] = owner
    this.prompts[s] = null
    return s
  }

  /** Slot `s` holds `prompt`'s keys and values from its start. */
  notePrompt(s: number, prompt: readonly number[]): void {
    this.prompts[s] = prompt
  }

  /**
   * The slot holding the longest start of `ids` (at most `limit` tokens, in whole blocks of `block`), and how many
   * tokens of it; null when none holds a block.
   */
  longestPrompt(ids: readonly number[], limit: number, block: number): { slot: number; tokens: number } | null {
    let best: { slot: number; tokens: number } | null = null
    this.prompts.forEach((p, slot) => {
      if (!p) return
      const n = Math.min(p.length, limit)
      let k = 0
      while (k < n && p[k] === ids[k]) k++
      const tokens = Math.floor(k / block) * block
      if (tokens > 0 && tokens > (best?.tokens ?? 0)) best = { slot, tokens }
    })
    return best
  }

  give(s: number, owner: DeviceKv): void {
    this.owners[s] = owner
  }

  free(s: number): void {
    this.owners[s] = null
  }

  /**
   * (Re)allocates the tensors for what was reserved: `cap` slots per row (the longest reserved sequence, at least
   * what the budget gives each of the rows when they are as long as the model's context allows), and as many rows as
   * the budget holds at that cap, up to the row limit. Only while no slot is occupied.
   */
  private size(): void {
    const per = this.bytesPerToken
    const roundUp = (n: number): number => Math.ceil(n / CAP_STEP) * CAP_STEP
    let slots: number
    let cap: number
    if (this.stagingFor) {
      // A staging pool: one slot as long as the running pool's, which is sized first when it has none.
      if (this.stagingFor.occupied === 0) this.stagingFor.size()
      slots = 1
      cap = this.stagingFor.cap
    } else {
      const { budgetBytes, maxRows, contextLength } = this.limits
      if (this.fixed) {
        // Once, for good: slots as long as the context (or the whole budget, where one context does not fit in it),
        // and as many as the budget holds, up to the row limit. Rows past that wait for a slot (admits).
        if (this.tensors.length) {
          if (this.want.slots > this.cap) throw new OnnxdError('internal', `the device KV pool is fixed at slots of ${this.cap}; ${this.want.slots} were asked`)
          return
        }
        cap = roundUp(Math.min(contextLength, Math.max(1, Math.floor(budgetBytes / per))))
        slots = Math.max(1, Math.min(maxRows, Math.floor(budgetBytes / (cap * per))))
      } else {
        const need = roundUp(this.want.slots)
        // Big enough already (rows joining and leaving keep it): no reallocation.
        if (this.tensors.length && this.cap >= need && this.slots >= this.want.rows) return
        slots = Math.max(1, this.want.rows, Math.min(maxRows, Math.floor(budgetBytes / (need * per))))
        cap = Math.max(need, Math.min(roundUp(contextLength), Math.floor(budgetBytes / (slots * per) / CAP_STEP) * CAP_STEP))
      }
      this.want = { rows: 1, slots: CAP_STEP }
    }
    if (this.tensors.length && cap === this.cap && slots === this.slots) return
    this.dispose()
    const { heads: H, headDim: D, dtype } = this.kv
    this.tensors = this.kv.pastNames.map(() => this.allocator.alloc(dtype, [slots, H, cap, D]))
    this.allocations++
    this.slots = slots
    this.cap = cap
    this.owners = Array.from({ length: slots }, () => null)
    this.prompts = Array.from({ length: slots }, () => null)
  }

  /** Each past tensor's first `rows` slots, [rows, heads, cap, headDim]: what a step over those slots binds. */
  bound(rows: number): DeviceTensor[] {
    if (rows > this.slots) throw new OnnxdError('internal', `a step over ${rows} slots of ${this.slots}`)
    if (rows !== this.viewRows) {
      for (const v of this.views) v.dispose()
      const { heads: H, headDim: D } = this.kv
      this.views = rows === this.slots ? [] : this.tensors.map((t) => this.allocator.prefix(t, [rows, H, this.cap, D]))
      this.viewRows = rows
    }
    return rows === this.slots ? this.tensors : this.views
  }

  /** Gives the device memory back when no slot is occupied (the scheduler is idle), unless the pool is fixed. */
  release(): void {
    if (this.occupied === 0 && !this.fixed) this.dispose()
  }

  /** Frees the tensors and the allocator: the session is going. */
  close(): void {
    this.dispose()
    this.allocator.dispose()
  }

  dispose(): void {
    for (const v of this.views) v.dispose()
    for (const t of this.tensors) t.dispose()
    this.views = []
    this.viewRows = 0
    this.tensors = []
    this.owners = []
    this.prompts = []
    this.slots = 0
    this.cap = 0
  }
}

/**
 * Where a plain-op graph's step writes its new keys and values on the device: one tensor per present output, [rows,
 * heads, seq, headDim] for a step over `rows` slots of `seq` new tokens (views over buffers kept across steps, grown
 * when a step needs more). The step's second graph scatters them into the pool (capi-session.ts appendGraph).
 */
export class DeviceNewRows {
  private tensors: DeviceTensor[] = []
  private views: DeviceTensor[] = []
  private viewKey = ''
  /** Allocations so far (a few while the step shapes grow, then none). */
  allocations = 0

  constructor(
    private readonly allocator: DeviceAllocator,
    private readonly kv: Signature['kv'],
  ) {}

  /** Each present's tensor for a step over `rows` slots of `seq` new tokens. */
  bound(rows: number, seq: number): DeviceTensor[] {
    const { heads: H, headDim: D, dtype } = this.kv
    const dims = [rows, H, seq, D]
    const key = dims.join(',')
    if (key === this.viewKey) return this.views
    const count = rows * H * seq * D
    this.disposeViews()
    if (!this.tensors.length || this.tensors[0].count < count) {
      for (const t of this.tensors) t.dispose()
      // Twice what the last shape needed: the prefill chunks and the decode batch settle after a few steps.
      const n = Math.max(count, 2 * (this.tensors[0]?.count ?? 0))
      this.tensors = this.kv.presentNames.map(() => this.allocator.alloc(dtype, [n]))
      this.allocations++
    }
    this.views = this.tensors.map((t) => this.allocator.prefix(t, dims))
    this.viewKey = key
    return this.views
  }

  private disposeViews(): void {
    for (const v of this.views) v.dispose()
    this.views = []
    this.viewKey = ''
  }

  dispose(): void {
    this.disposeViews()
    for (const t of this.tensors) t.dispose()
    this.tensors = []
  }
}

/** A session's device caches: the running pool, the staging pool, and the copy from one to the other. */
export class DeviceCaches {
  readonly running: DevicePool
  readonly staging: DevicePool
  /** A plain-op graph's new rows before they are scattered into a pool (null for GroupQueryAttention, which appends in place). */
  readonly newRows: DeviceNewRows | null

  constructor(
    allocator: DeviceAllocator,
    kv: Signature['kv'],
    readonly copy: DeviceCopier,
    /** The running pool is allocated once and kept (DevicePool.fixed). */
    fixed = false,
  ) {
    this.running = new DevicePool(allocator, kv, null, fixed)
    this.staging = new DevicePool(allocator, kv, this.running, fixed)
    this.newRows = kv.present === 'new' ? new DeviceNewRows(allocator, kv) : null
  }

  set limits(l: DevicePoolLimits) {
    this.running.limits = l
  }

  close(): void {
    this.newRows?.dispose()
    this.staging.dispose()
    this.running.close()
  }
}

/** A cache of rows over a DevicePool: the running batch, or a prefill group in the staging pool. */
export class DeviceKv implements KvRows {
  readonly lens: number[] = []
  /** Row r's slot in the pool. */
  readonly slotOf: number[] = []

  constructor(
    readonly pool: DevicePool,
    private readonly caches: DeviceCaches,
  ) {}

  get rows(): number {
    return this.lens.length
  }

  get cap(): number {
    return this.pool.cap
  }

  /** Row r's slot, or TAKEN when another cache took the row (takeRow). */
  rowOf(slot: number): number {
    return this.slotOf.indexOf(slot)
  }

  bytes(): number {
    return this.pool.slots ? Math.round((this.pool.bytes() * this.rows) / this.pool.slots) : 0
  }

  /** Reserves in the running pool (a staging pool takes its slot length from it). */
  reserve(rows: number, slots: number, maxRows = rows): void {
    this.caches.running.reserve(this.pool === this.caches.running ? Math.max(rows, maxRows) : 1, slots)
  }

  addRows(n: number): void {
    for (let i = 0; i < n; i++) {
      this.slotOf.push(this.pool.take(this))
      this.lens.push(0)
    }
  }

  makeRoom(counts: readonly number[]): void {
    for (let r = 0; r < this.rows; r++) {
      if (this.lens[r] + counts[r] > this.cap) throw new OnnxdError('internal', `row ${r} would hold ${this.lens[r] + counts[r]} tokens; its device slot holds ${this.cap}`)
    }
  }

  /** The device step builds its own mask from the rows' lengths. */
  maskRow(): void {}

  past(): KvTensor[] {
    return []
  }

  /** The step wrote the new rows in place on the device: only the lengths move. */
  append(_present: KvTensor[], counts: readonly number[]): void {
    for (let r = 0; r < this.rows; r++) this.lens[r] += counts[r]
  }

  /** Only the length moves: the slot's later tokens stay on the device until the row's next step writes over them. */
  truncate(r: number, len: number): void {
    this.lens[r] = truncatedLength(this.lens[r], len)
  }

  /**
   * Appends row `r` of `src` as a new last row: its slot changes owner, nothing moves. The row stays in `src` (its
   * row numbers do not change, as with a host cache), marked as taken: `src` no longer steps or frees it.
   */
  takeRow(src: KvRows, r: number): void {
    if (!(src instanceof DeviceKv) || src.caches !== this.caches) throw new Error('a device cache takes rows from its own session only')
    const from = src.slotOf[r]
    if (from < 0) throw new Error(`row ${r} was taken already`)
    let slot = from
    if (src.pool === this.pool) this.pool.give(slot, this)
    else {
      // From the staging pool (one slot): copied on the device into a free slot here.
      slot = this.pool.take(this)
      this.caches.copy(src.pool.all, 0, this.pool.all, slot)
      src.pool.free(from)
    }
    this.slotOf.push(slot)
    this.lens.push(src.lens[r])
    src.slotOf[r] = TAKEN
  }

  removeRow(r: number): void {
    if (this.slotOf[r] >= 0) this.pool.free(this.slotOf[r])
    const last = this.rows - 1
    this.slotOf[r] = this.slotOf[last]
    this.lens[r] = this.lens[last]
    this.slotOf.pop()
    this.lens.pop()
  }

  clear(): void {
    for (const s of this.slotOf) if (s >= 0) this.pool.free(s)
    this.slotOf.length = 0
    this.lens.length = 0
  }

  release(): void {
    if (this.rows === 0) this.pool.release()
  }

  /** Row r holds `prompt` from its start (after a prefill): later prompts that start the same way may copy it. */
  notePrompt(r: number, prompt: readonly number[]): void {
    if (this.slotOf[r] >= 0) this.pool.notePrompt(this.slotOf[r], prompt)
  }

  /**
   * The longest start of `ids` (at most `limit` tokens, whole blocks of `block`) that a slot of the running pool holds,
   * or null (device-side prefix caching: slots keep the prompt a row left in them).
   */
  cachedPrompt(ids: readonly number[], limit: number, block: number): { slot: number; tokens: number } | null {
    return this.caches.running.longestPrompt(ids, limit, block)
  }

  /** Fills the empty row r with the first `tokens` tokens of running-pool slot `slot` (a cachedPrompt() hit), on the device. */
  loadPrompt(r: number, hit: { slot: number; tokens: number }): void {
    if (this.lens[r] !== 0) throw new Error(`row ${r} is not empty`)
    if (hit.tokens > this.cap) throw new Error(`a prefix of ${hit.tokens} tokens does not fit slots of ${this.cap}`)
    this.caches.copy(this.caches.running.all, hit.slot, this.pool.all, this.slotOf[r])
    this.lens[r] = hit.tokens
  }

  /** Whether a sequence of `tokens` tokens can join the running pool now (a free slot with room for it). */
  admits(tokens: number): boolean {
    return this.caches.running.admits(tokens)
  }

  /**
   * Whether a step over this cache covers its one row's slot alone (slot 0, nothing above it occupied): what
   * GroupQueryAttention needs of a step whose row carries several tokens over a past (batch 1).
   */
  get stepsAlone(): boolean {
    return this.rows === 1 && this.pool.hi === 1
  }

  /** The most new tokens per row a step can carry now: every slot below hi takes that many past its length. */
  room(): number {
    let longest = 0
    for (let s = 0; s < this.pool.hi; s++) longest = Math.max(longest, this.pool.lenAt(s))
    return this.cap - longest
  }
}
