// deviceDraft (scheduler/batcher.ts): on a device cache every draft goes in padded to one width, 2^m - 1 tokens for
// the least m that holds k, so that drafting runs one step shape (each new shape costs WebGPU its shaders' compiles);
// the pads copy the draft's last token, and a draft that would not fit the slots the step covers is dropped.
import { describe, expect, it } from 'vitest'
import { deviceDraft } from '../../../src/engine/scheduler/batcher.js'

describe('deviceDraft', () => {
  it('pads every draft to 2^m - 1 tokens, the least that holds k, with copies of its last token', () => {
    expect(deviceDraft([5], 4, 100)).toEqual([5, 5, 5, 5, 5, 5, 5])
    expect(deviceDraft([5, 6, 7], 4, 100)).toEqual([5, 6, 7, 7, 7, 7, 7])
    expect(deviceDraft([5, 6, 7, 8], 4, 100)).toEqual([5, 6, 7, 8, 8, 8, 8])
    expect(deviceDraft([9, 8, 7], 3, 100)).toEqual([9, 8, 7])
    expect(deviceDraft([9], 1, 100)).toEqual([9])
    expect(deviceDraft([1, 2], 8, 100)).toHaveLength(15)
  })

  it('gives no draft where none was found, or where the padded one would not fit the room left', () => {
    expect(deviceDraft([], 4, 100)).toEqual([])
    expect(deviceDraft([5, 6], 4, 6)).toEqual([])
    expect(deviceDraft([5, 6], 4, 7)).toHaveLength(7)
  })
})
