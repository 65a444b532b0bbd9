// Native-call gates: shared memory through which the pool learns when a worker thread may be terminated safely.
// A worker thread terminated while it is inside ONNX Runtime (a session being created or run) aborts the whole
// process when the native call returns into the dying thread ("terminate called after throwing an instance of
// 'Napi::Error'"). So each worker marks the stretches where it is in native code, and the pool terminates a worker
// only after it has switched that worker's gate from idle to stopped: from then on the worker refuses to enter.
//
// Layout of the pool's SharedArrayBuffer (Int32): [0] closing flag, then SLOTS pairs (threadId, state). A worker
// claims a free slot with its threadId as it starts (state busy: it is about to load a model), and checks the
// closing flag after claiming, so a pool that closes either sees the slot or is seen by the worker.
const CLOSING = 0
const SLOTS = 256
const IDLE = 0
const BUSY = 1
const STOPPED = 2

/** The shared buffer a pool hands its workers (in workerData). */
export function gateBuffer(): SharedArrayBuffer {
  return new SharedArrayBuffer(4 * (1 + 2 * SLOTS))
}

const idAt = (slot: number): number => 1 + 2 * slot
const stateAt = (slot: number): number => 2 + 2 * slot

/** The worker side: one thread's gate around its native calls. */
export class NativeGate {
  private constructor(
    private readonly a: Int32Array,
    private readonly state: number,
  ) {}

  /** Claims a slot for `threadId`, busy (loading). Null when the pool is already closing: then load nothing. */
  static claim(buf: SharedArrayBuffer, threadId: number): NativeGate | null {
    const a = new Int32Array(buf)
    for (let s = 0; s < SLOTS; s++) {
      if (Atomics.compareExchange(a, idAt(s), 0, threadId) !== 0) continue
      // Busy before the closing check: a pool that set the flag after that check sees busy and waits.
      Atomics.store(a, stateAt(s), BUSY)
      if (Atomics.load(a, CLOSING) === 1) return null
      return new NativeGate(a, stateAt(s))
    }
    throw new Error(`no free native-call gate among ${SLOTS}`)
  }

  /** Before a native call: false once the pool has stopped this worker, and then the call must not start. */
  enter(): boolean {
    return Atomics.compareExchange(this.a, this.state, IDLE, BUSY) !== STOPPED
  }

  /** After a native call (and once the model has loaded). */
  exit(): void {
    Atomics.compareExchange(this.a, this.state, BUSY, IDLE)
  }
}

/** The pool side: stops gates and frees the slots of threads that are gone. */
export class GateTable {
  private readonly a: Int32Array

  constructor(readonly buffer: SharedArrayBuffer) {
    this.a = new Int32Array(buffer)
  }

  /** From now on, workers that have not claimed a slot yet will not load anything. */
  close(): void {
    Atomics.store(this.a, CLOSING, 1)
  }

  private slotOf(threadId: number): number {
    for (let s = 0; s < SLOTS; s++) if (Atomics.load(this.a, idAt(s)) === threadId) return s
    return -1
  }

  /**
   * Tries to stop `threadId`'s gate: true when the thread is outside native code and will stay there, so it can be
   * terminated. A thread without a slot has not loaded anything: true when the pool is closing (it never will).
   */
  tryStop(threadId: number): boolean {
    const s = this.slotOf(threadId)
    if (s < 0) return Atomics.load(this.a, CLOSING) === 1
    const was = Atomics.compareExchange(this.a, stateAt(s), IDLE, STOPPED)
    return was === IDLE || was === STOPPED
  }

  /** Polls tryStop every `everyMs` until it succeeds or `timeoutMs` passes; resolves whether it stopped. */
  async stop(threadId: number, timeoutMs: number, everyMs = 5): Promise<boolean> {
    const until = Date.now() + timeoutMs
    while (!this.tryStop(threadId)) {
      if (Date.now() >= until) return false
      await new Promise((r) => setTimeout(r, everyMs))
    }
    return true
  }

  /** Frees the slots of threads not in `alive`. */
  release(alive: ReadonlySet<number>): void {
    for (let s = 0; s < SLOTS; s++) {
      const id = Atomics.load(this.a, idAt(s))
      if (id !== 0 && !alive.has(id)) Atomics.compareExchange(this.a, idAt(s), id, 0)
    }
  }
}
