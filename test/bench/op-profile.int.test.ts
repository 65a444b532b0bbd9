// ORT's profiler on the embedded tiny models: through the C API on the GroupQueryAttention graph (refs/capi.ts
// profileCapiDecode), through onnxruntime-node on the plain one (refs/ort.ts profileDecode). Each batch's step by
// operator type, and no trace file left behind, also when a step fails.
import { readdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { profileCapiDecode } from '../../src/bench/refs/capi.js'
import { profileDecode } from '../../src/bench/refs/ort.js'
import { tinyGqaModelDir, tinyPlainModelDir } from '../helpers/fixtures.js'

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

  it('does the same through onnxruntime-node on the plain graph, whose attention is MatMul and Softmax', async () => {
    const r = await profileDecode({ onnxPath: join(tinyPlainModelDir(), 'onnx', 'model.onnx'), threads: 1, batches: [1, 3], past: 24, greedy: true })
    expect(r.map((d) => d.batch)).toEqual([1, 3])
    for (const d of r) {
      expect(d.ops.map((o) => o.op)).toEqual(expect.arrayContaining(['MatMul', 'Softmax']))
      expect(d.ops.map((o) => o.ms)).toEqual([...d.ops.map((o) => o.ms)].sort((x, y) => y - x))
    }
    expect(traces()).toEqual([])
    await expect(profileDecode({ onnxPath: join(tinyPlainModelDir(), 'onnx', 'model.onnx'), threads: 1, batches: [1], past: 4096, greedy: true })).rejects.toThrow()
    expect(traces()).toEqual([])
  })
})
