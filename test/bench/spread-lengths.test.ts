// The row lengths bench/step.bench.ts --spread gives onnxd and ORT alone: a continuous batch's rows, which joined at
// different steps, spread evenly around the past, so that the step's mean length stays the past's.
import { describe, expect, it } from 'vitest'
import { spreadLengths } from '../../src/bench/refs/ort.js'

describe('spreadLengths', () => {
  it('gives every row the past at a spread of 0', () => {
    expect(spreadLengths(4, 192, 0)).toEqual([192, 192, 192, 192])
  })

  it('spreads more rows than positions evenly over the spread, around the past', () => {
    const lens = spreadLengths(64, 192, 16)
    expect(Math.min(...lens)).toBe(184)
    expect(Math.max(...lens)).toBe(199)
    // Each of the 16 lengths held by 4 rows.
    for (let l = 184; l < 200; l++) expect(lens.filter((x) => x === l)).toHaveLength(4)
    expect(lens.reduce((a, b) => a + b, 0) / lens.length).toBe(191.5)
  })

  it('spaces fewer rows than positions apart over the whole spread', () => {
    expect(spreadLengths(4, 192, 128)).toEqual([128, 160, 192, 224])
  })
})
