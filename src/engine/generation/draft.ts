// Draft tokens by n-gram lookup in a sequence's own tokens (prompt lookup decoding, vLLM's `ngram` speculative
// method): where the sequence's last n tokens occurred before, the tokens that followed them then are guessed to
// follow now. A decode step feeds the draft after the row's token and checks it against the model's own greedy
// picks (scheduler/batcher.ts), so output is unchanged and a good guess yields several tokens from one step. It pays
// where outputs repeat their input: code edits, extraction, quoting, JSON over known keys. Imports: nothing.

/** The longest suffix looked up first; shorter ones down to MIN_NGRAM are tried when it is not found. */
export const MAX_NGRAM = 3
export const MIN_NGRAM = 1

/**
 * Up to `k` tokens guessed to follow the sequence `head` + `tail` (its prompt and its output, kept apart so that
 * neither is copied): the tokens after the latest earlier occurrence of its last n tokens, n from MAX_NGRAM down to
 * MIN_NGRAM. Empty when no suffix occurred before, or k is 0.
 */
export function ngramDraft(head: readonly number[], tail: readonly number[], k: number): number[] {
  const len = head.length + tail.length
  if (k <= 0 || len < 2) return []
  const at = (i: number): number => (i < head.length ? head[i] : tail[i - head.length])
  for (let n = Math.min(MAX_NGRAM, len - 1); n >= MIN_NGRAM; n--) {
    const suffix = len - n
    // The latest match that has at least one token after it before the suffix itself.
    for (let start = suffix - 1; start >= 0; start--) {
      let j = 0
      while (j < n && at(start + j) === at(suffix + j)) j++
      if (j < n) continue
      const from = start + n
      const out: number[] = []
      for (let i = from; i < len && out.length < k; i++) out.push(at(i))
      return out
    }
  }
  return []
}
