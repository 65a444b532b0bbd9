// ORT's profiler through the C API on the embedded tiny GroupQueryAttention model (refs/capi.ts profileCapiDecode):
// each batch's step by operator type, and no trace file left behind, also when a step fails.
import { readdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { profileCapiDecode } from '../../src/bench/refs/capi.js'
import { tinyGqaModelDir } from '../helpers/fixtures.js'

const traces = (): string[] => readdirSync(tmpdir()).filter((f) => f.startsWith(`onnxd-ort-profile-${process.pid}`))

describe("ORT's decode step by operator", () => {
  it('gives each batch its operator types, attention and matrix products among them, largest first', () => {
    const r = profileCapiDecode({ onnxPath: join(tinyGqaModelDir(), 'model.onnx'), threads: 1, batches: [1, 3], past: 24, greedy: true })
    expect(r.map((d) => d.batch)).toEqual([1, 3])
    for (const d of r) {
      expect(d.ops.map((o) => o.op)).toEqual(expect.arrayContaining(['GroupQueryAttention', 'MatMul']))
      expect(d.ops.every((o) => o.ms > 0)).toBe(true)
      expect(d.ops.map((o) => o.ms)).toEqual([...d.ops.map((o) => o.ms)].sort((x, y) => y - x))
    }
    expect(traces()).toEqual([])
  })

  it('throws when a step fails and leaves no trace file', () => {
    // A past beyond the model's rotary tables: ORT refuses the step.
    expect(() => profileCapiDecode({ onnxPath: join(tinyGqaModelDir(), 'model.onnx'), threads: 1, batches: [1], past: 4096, greedy: true })).toThrow()
    expect(traces()).toEqual([])
  })
})
