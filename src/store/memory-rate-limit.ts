// In-process fixed-window rate-limit counters: the default for a single facade. Imports: store interfaces.
import type { RateLimitCheck, RateLimitHit, RateLimitStore } from './interfaces.js'

interface Window {
  start: number
  count: number
}

/** Counters live in a Map; windows that have ended are swept once the map grows past `sweepAt` entries. */
export class MemoryRateLimitStore implements RateLimitStore {
  private readonly windows = new Map<string, Window>()

  constructor(private readonly sweepAt = 10_000) {}

  async hits(checks: readonly RateLimitCheck[], windowMs: number, nowMs: number): Promise<RateLimitHit[]> {
    const out: RateLimitHit[] = []
    for (const c of checks) {
      const h = this.hit(c.bucket, c.limit, windowMs, nowMs)
      out.push(h)
      if (!h.allowed) break
    }
    return out
  }

  private hit(bucket: string, limit: number, windowMs: number, nowMs: number): RateLimitHit {
    const start = nowMs - (nowMs % windowMs)
    let w = this.windows.get(bucket)
    if (!w || w.start !== start) {
      if (!w && this.windows.size >= this.sweepAt) this.sweep(nowMs, windowMs)
      w = { start, count: 0 }
      this.windows.set(bucket, w)
    }
    w.count++
    return { allowed: w.count <= limit, count: w.count, remaining: Math.max(0, limit - w.count), resetAtMs: start + windowMs }
  }

  private sweep(nowMs: number, windowMs: number): void {
    for (const [k, w] of this.windows) if (w.start + windowMs <= nowMs) this.windows.delete(k)
  }

  async close(): Promise<void> {
    this.windows.clear()
  }
}
