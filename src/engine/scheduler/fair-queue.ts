// The batcher's waiting queue: first come first served within a tenant, round-robin across tenants, so that one
// tenant's burst waits behind its own requests instead of in front of everyone else's. A tenant is an opaque id the
// caller gives (the facade: the API key); requests without one share the tenant ''. Imports: nothing.

export interface Tenanted {
  readonly tenant: string
}

export class FairQueue<T extends Tenanted> implements Iterable<T> {
  /** Each tenant's waiting items, in arrival order; a tenant is here only while it has some. */
  private readonly queues = new Map<string, T[]>()
  /** The tenants with waiting items, in the order of their next turn. */
  private readonly turns: string[] = []
  private size = 0

  get length(): number {
    return this.size
  }

  /** Queues `item` last of its tenant; a tenant with nothing waiting takes its turn after those waiting now. */
  push(item: T): void {
    const q = this.queues.get(item.tenant)
    if (q) q.push(item)
    else {
      this.queues.set(item.tenant, [item])
      this.turns.push(item.tenant)
    }
    this.size++
  }

  /** The item shift() would take. */
  peek(): T | undefined {
    const t = this.turns[0]
    return t === undefined ? undefined : this.queues.get(t)![0]
  }

  /** Takes the first item of the tenant whose turn it is; that tenant's next turn comes after the others'. */
  shift(): T | undefined {
    const t = this.turns.shift()
    if (t === undefined) return undefined
    const q = this.queues.get(t)!
    const item = q.shift()!
    if (q.length) this.turns.push(t)
    else this.queues.delete(t)
    this.size--
    return item
  }

  /**
   * Puts back items shift() took and the caller did not keep, in the order given: each first of its tenant, and
   * its tenant's turn next (the turn it had was spent without it).
   */
  unshift(...items: T[]): void {
    for (let i = items.length - 1; i >= 0; i--) {
      const item = items[i]!
      const q = this.queues.get(item.tenant)
      if (q) {
        q.unshift(item)
        this.turns.splice(this.turns.indexOf(item.tenant), 1)
      } else this.queues.set(item.tenant, [item])
      this.turns.unshift(item.tenant)
      this.size++
    }
  }

  /** Removes and returns the items that `drop` picks; the others keep their places. */
  removeWhere(drop: (item: T) => boolean): T[] {
    const dropped: T[] = []
    for (const [t, q] of this.queues) {
      const kept = q.filter((item) => !(drop(item) && dropped.push(item)))
      if (kept.length === q.length) continue
      this.size -= q.length - kept.length
      if (kept.length) this.queues.set(t, kept)
      else {
        this.queues.delete(t)
        this.turns.splice(this.turns.indexOf(t), 1)
      }
    }
    return dropped
  }

  clear(): void {
    this.queues.clear()
    this.turns.length = 0
    this.size = 0
  }

  /** Every waiting item, tenant by tenant in turn order (not the order shift() would give them in). */
  *[Symbol.iterator](): Iterator<T> {
    for (const t of this.turns) yield* this.queues.get(t)!
  }
}
