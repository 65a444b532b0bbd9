// deviceDrafts (scheduler/batcher.ts): on a device cache a step's drafts go in padded to one width, 2^m - 1 tokens
// for the least m that holds k, so that drafting runs one step shape per row count (each new shape costs WebGPU its
// shaders' compiles); the pads copy a draft's last token, or the row's own token where it found none (a device step
// feeds every row as many tokens); drafts that would not fit the slots the step covers are dropped.
import { describe, expect, it } from 'vitest'
import { deviceDrafts } from '../../../src/engine/scheduler/batcher.js'

describe('deviceDrafts', () => {
  it('pads every draft to 2^m - 1 tokens, the least that holds k, with copies of its last token', () => {
    expect(deviceDrafts([[5]], [1], 4, 100)).toEqual([[5, 5, 5, 5, 5, 5, 5]])
    expect(deviceDrafts([[5, 6, 7]], [1], 4, 100)).toEqual([[5, 6, 7, 7, 7, 7, 7]])
    expect(deviceDrafts([[5, 6, 7, 8]], [1], 4, 100)).toEqual([[5, 6, 7, 8, 8, 8, 8]])
    expect(deviceDrafts([[9, 8, 7]], [1], 3, 100)).toEqual([[9, 8, 7]])
    expect(deviceDrafts([[9]], [1], 1, 100)).toEqual([[9]])
    expect(deviceDrafts([[1, 2]], [1], 8, 100)[0]).toHaveLength(15)
  })

  it("gives a row that found no draft copies of its own token, beside a row that found one", () => {
    expect(deviceDrafts([[5, 6], [], [7]], [1, 2, 3], 2, 100)).toEqual([[5, 6, 6], [2, 2, 2], [7, 7, 7]])
  })

  it('gives no drafts where none was found, or where the padded ones would not fit the room left', () => {
    expect(deviceDrafts([[], []], [1, 2], 4, 100)).toEqual([[], []])
    expect(deviceDrafts([[5, 6]], [1], 4, 6)).toEqual([[]])
    expect(deviceDrafts([[5, 6]], [1], 4, 7)[0]).toHaveLength(7)
  })
})
