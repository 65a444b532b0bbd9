/**
 * Group commit: one batch under way at a time; the items handed in while it runs go together in the next batch, so a
 * busy caller sends one statement per batch instead of one per item, and a lone item goes out at once. Each caller
 * waits for its own item's outcome.
 */
export class GroupCommit<I, O> {
  private readonly queued: { item: I; resolve(o: O): void; reject(e: unknown): void }[] = []
  private running: Promise<void> | null = null

  /**
   * `run` gets at most `maxBatch` items and answers each one, in order; if it throws, every item of the batch fails
   * with that error.
   */
  constructor(
    private readonly run: (items: readonly I[]) => Promise<readonly PromiseSettledResult<O>[]>,
    private readonly maxBatch: number,
  ) {}

  push(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queued.push({ item, resolve, reject })
      this.running ??= this.drain()
    })
  }

  /** Settles once every item handed in so far has its outcome. */
  async idle(): Promise<void> {
    await this.running
  }

  private async drain(): Promise<void> {
    while (this.queued.length) {
      const batch = this.queued.splice(0, this.maxBatch)
      let outcomes: readonly PromiseSettledResult<O>[]
      try {
        outcomes = await this.run(batch.map((q) => q.item))
      } catch (e) {
        for (const q of batch) q.reject(e)
        continue
      }
      batch.forEach((q, i) => {
        const o = outcomes[i]
        if (o?.status === 'fulfilled') q.resolve(o.value)
        else q.reject(o ? o.reason : new Error(`group commit: no outcome for item ${i} of ${batch.length}`))
      })
    }
    this.running = null
  }
}

export const fulfilled = <O>(value: O): PromiseFulfilledResult<O> => ({ status: 'fulfilled', value })
export const rejected = (reason: unknown): PromiseRejectedResult => ({ status: 'rejected', reason })
