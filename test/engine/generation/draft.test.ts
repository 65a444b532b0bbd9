import { describe, expect, it } from 'vitest'
import { ngramDraft } from '../../../src/engine/generation/draft.js'

describe('ngramDraft: draft tokens from the sequence’s own earlier tokens', () => {
  it('continues the latest earlier occurrence of the last three tokens', () => {
    // "... 5 6 7 8 9 ... 5 6 7" → 8 9 follow.
    expect(ngramDraft([1, 5, 6, 7, 8, 9, 2], [5, 6, 7], 4)).toEqual([8, 9, 2, 5])
  })

  it('takes the latest occurrence, not the first', () => {
    expect(ngramDraft([3, 4, 1, 3, 4, 2, 0], [3, 4], 1)).toEqual([2])
  })

  it('falls back to shorter suffixes, down to one token', () => {
    // No earlier "8 9 7", no "9 7"; "7" occurred before, followed by 4.
    expect(ngramDraft([7, 4, 8], [9, 7], 2)).toEqual([4, 8])
  })

  it('prefers the longest suffix that occurred before', () => {
    // "2 3" occurred followed by 9; "3" alone last occurred followed by 5.
    expect(ngramDraft([2, 3, 9, 3, 5, 2], [3], 1)).toEqual([9])
  })

  it('drafts nothing without a repeat, for k 0, or for a sequence of one token', () => {
    expect(ngramDraft([1, 2, 3], [4, 5], 4)).toEqual([])
    expect(ngramDraft([1, 2, 1], [2], 0)).toEqual([])
    expect(ngramDraft([1], [], 4)).toEqual([])
  })

  it('spans the prompt and the output as one sequence', () => {
    // The suffix "6 1" straddles nothing here, but its earlier occurrence ends in the prompt and continues in the output.
    expect(ngramDraft([6, 1], [2, 6, 1], 3)).toEqual([2, 6, 1])
  })
})
