// Stop strings over streamed text: what may be streamed now, what is held back, and where generation stops. Imports: nothing.

export interface StopVerdict {
  /** Text safe to stream now (never retracted later). */
  emit: string
  /** A stop string completed: `emit` ends right before it, and the stop string itself is dropped (as OpenAI does). */
  stopped: boolean
  /** The stop string that matched, when stopped. */
  stop?: string
}

/**
 * Matches stop strings across arbitrary delta boundaries. Any tail of the text that could still grow into a stop
 * string is held back, so a client never sees text that a later stop would cut off.
 *
 * When several stop strings match, the one that completes first in the text wins (the verdict does not depend on
 * how the text was split into deltas); among those ending at the same place, the longest, so no part of a stop
 * string is ever emitted.
 */
export class StopMatcher {
  private readonly stops: readonly string[]
  private readonly maxLen: number
  private held = ''
  private done = false

  constructor(stops: readonly string[]) {
    this.stops = stops.filter((s) => s.length > 0)
    this.maxLen = this.stops.reduce((m, s) => Math.max(m, s.length), 0)
  }

  get stopped(): boolean {
    return this.done
  }

  push(textDelta: string): StopVerdict {
    if (this.done) return { emit: '', stopped: true }
    if (this.stops.length === 0) return { emit: textDelta, stopped: false }
    const text = this.held + textDelta

    // `held` contains no complete stop string, so any match must end inside the new delta.
    let bestStart = -1
    let bestEnd = Infinity
    let bestStop = ''
    const from = Math.max(0, this.held.length - this.maxLen + 1)
    for (const s of this.stops) {
      const at = text.indexOf(s, from)
      if (at < 0) continue
      const end = at + s.length
      if (end < bestEnd || (end === bestEnd && at < bestStart)) {
        bestStart = at
        bestEnd = end
        bestStop = s
      }
    }
    if (bestStart >= 0) {
      this.done = true
      this.held = ''
      return { emit: text.slice(0, bestStart), stopped: true, stop: bestStop }
    }

    const keep = this.holdback(text)
    this.held = text.slice(text.length - keep)
    return { emit: text.slice(0, text.length - keep), stopped: false }
  }

  /** End of generation: the held-back tail was not a stop string after all, so it is returned for emission. */
  flush(): string {
    const rest = this.done ? '' : this.held
    this.held = ''
    return rest
  }

  /** Length of the longest suffix of `text` that is a proper prefix of some stop string. */
  private holdback(text: string): number {
    for (let k = Math.min(text.length, this.maxLen - 1); k > 0; k--) {
      const start = text.length - k
      for (const s of this.stops) {
        if (s.length > k && text.startsWith(s.slice(0, k), start)) return k
      }
    }
    return 0
  }
}
