// The masked dummy past slot of a WebGPU step over an empty cache (empty-past.ts): when it applies, the input it
// makes (a zero slot in front of every row, masked out), and its removal from 'appended' presents, 4-D and stacked.
import { describe, expect, it } from 'vitest'
import { dropPastSlot, needsPastSlot, withPastSlot } from '../../../src/engine/model/empty-past.js'
import type { ForwardInput } from '../../../src/engine/model/step-io.js'

const input = (o: Partial<ForwardInput> = {}): ForwardInput => ({
  rows: 2,
  seq: 3,
  pastLen: 0,
  ids: Int32Array.of(1, 2, 3, 4, 5, 6),
  // Row 1 is left-padded by one.
  mask: Uint8Array.of(1, 1, 1, 0, 1, 1),
  positions: Int32Array.of(0, 1, 2, 0, 0, 1),
  past: [
    { data: new Float32Array(0), dims: [2, 4, 0, 8] },
    { data: new Uint16Array(0), dims: [2, 2, 4, 0, 8] },
  ],
  ...o,
})

describe('empty-past', () => {
  it('applies to an empty past of a masked graph whose presents are not written in place', () => {
    const graph = { masked: true, present: 'new' as const, chunkedPrefill: true }
    expect(needsPastSlot(input(), graph)).toBe(true)
    expect(needsPastSlot(input(), { ...graph, present: 'appended' })).toBe(true)
    expect(needsPastSlot(input({ pastLen: 64 }), graph)).toBe(false)
    expect(needsPastSlot(input(), { ...graph, masked: false })).toBe(false)
    expect(needsPastSlot(input(), { ...graph, present: 'in-place' })).toBe(false)
    // A graph without chunked prefill takes several new tokens only over an empty past; one token it takes over any.
    expect(needsPastSlot(input(), { ...graph, chunkedPrefill: false })).toBe(false)
    expect(needsPastSlot(input({ seq: 1, rows: 1, mask: Uint8Array.of(1) }), { ...graph, chunkedPrefill: false })).toBe(true)
  })

  it('puts one zero slot, masked out, in front of every row', () => {
    const x = withPastSlot(input())
    expect(x.pastLen).toBe(1)
    expect([...x.mask]).toEqual([0, 1, 1, 1, 0, 0, 1, 1])
    expect(x.past.map((t) => t.dims)).toEqual([
      [2, 4, 1, 8],
      [2, 2, 4, 1, 8],
    ])
    expect(x.past[0].data).toBeInstanceOf(Float32Array)
    expect(x.past[1].data).toBeInstanceOf(Uint16Array)
    expect(x.past.every((t) => t.data.length === t.dims.reduce((a, b) => a * b) && t.data.every((v) => v === 0))).toBe(true)
    expect([...x.ids]).toEqual([1, 2, 3, 4, 5, 6])
    expect([...x.positions]).toEqual([0, 1, 2, 0, 0, 1])
  })

  it("cuts the slot off an 'appended' present, 4-D and stacked 5-D", () => {
    // [rows 1, heads 2, 1 + 2 slots, headDim 2]: slot 0 holds 9s.
    const four = { data: Float32Array.of(9, 9, 1, 2, 3, 4, 9, 9, 5, 6, 7, 8), dims: [1, 2, 3, 2] }
    expect(dropPastSlot(four)).toEqual({ data: Float32Array.of(1, 2, 3, 4, 5, 6, 7, 8), dims: [1, 2, 2, 2] })
    const five = { data: Uint16Array.of(9, 1, 2, 9, 3, 4), dims: [2, 1, 1, 3, 1] }
    expect(dropPastSlot(five)).toEqual({ data: Uint16Array.of(1, 2, 3, 4), dims: [2, 1, 1, 2, 1] })
  })
})
