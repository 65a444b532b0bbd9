// The WebGPU provider (issue #33) computes the CPU's logits: a prompt step over an empty cache (plain graphs take one
// masked dummy past slot there, empty-past.ts) and then decode steps through the engine's KV cache, fed the CPU's
// greedy tokens, on the tiny preset in both forms and on every shared decoder fixture. Tolerances: float32 graphs
// 1e-4 absolute; float16 graphs (weights, activations and cache rounded to 11 bits) 1e-2 of the largest logit (at
// least 1e-2). Every step's argmax must be the CPU's. Skipped, saying why, where no WebGPU adapter exists.
import { describe, expect, it } from 'vitest'
import { readBundle } from '../../../src/engine/model/bundle.js'
import { DecoderSession } from '../../../src/engine/model/session.js'
import type { ForwardInput } from '../../../src/engine/model/step-io.js'
import { KvCache, kvShapeOf } from '../../../src/engine/scheduler/kv.js'
import { DECODER_FIXTURES, tinyPlainModelDir, fixture, haveFixtures, tinyGqaModelDir } from '../../helpers/fixtures.js'
import { noWebgpu, webgpuTitle } from '../../helpers/webgpu.js'

/** Each step's last-position logits: a 5-token prompt, then `steps - 1` decode steps fed `tokens` (or its own argmax). */
async function trace(dir: string, provider: 'cpu' | 'webgpu', steps: number, tokens?: number[]): Promise<{ logits: Float32Array[]; argmax: number[] }> {
  const s = await DecoderSession.create(readBundle(dir), { provider, runtime: 'js' })
  try {
    expect(s.provider).toBe(provider)
    const V = s.signature.logits.vocab
    const kv = new KvCache(kvShapeOf(s.signature.kv))
    kv.addRows(1)
    const logits: Float32Array[] = []
    const argmax: number[] = []
    let ids = Int32Array.from({ length: 5 }, (_, i) => (i * 37 + 5) % V)
    for (let step = 0; step < steps; step++) {
      const n = ids.length
      kv.makeRoom([n])
      const mask = new Uint8Array(kv.cap + n)
      kv.maskRow(mask, 0, n, n)
      const x: ForwardInput = {
        rows: 1,
        seq: n,
        pastLen: kv.cap,
        ids,
        mask,
        lengths: Int32Array.of(kv.lens[0] + n),
        positions: Int32Array.from({ length: n }, (_, j) => kv.lens[0] + j),
        past: kv.past(),
      }
      const out = await s.forward(x, [n - 1])
      kv.append(out.present, [n])
      const l = out.logits.slice(0, V)
      let a = 0
      for (let v = 1; v < V; v++) if (l[v] > l[a]) a = v
      logits.push(l)
      argmax.push(a)
      ids = Int32Array.of(tokens?.[step] ?? a)
    }
    return { logits, argmax }
  } finally {
    await s.dispose()
  }
}

const MODELS = [
  { name: 'onnxd-tiny (plain)', dir: tinyPlainModelDir, fp16: false, needsFixtures: false },
  { name: 'onnxd-tiny (GroupQueryAttention)', dir: tinyGqaModelDir, fp16: false, needsFixtures: false },
  ...DECODER_FIXTURES.map((f) => ({ name: f.name, dir: () => fixture(f.name), fp16: f.fp16, needsFixtures: true })),
]

describe.skipIf(noWebgpu !== null)(webgpuTitle("WebGPU logits equal the CPU provider's"), () => {
  for (const m of MODELS) {
    // Lavapipe compiles each new shape's shaders on the CPU: a cold first step can take 40 s on 2 cores.
    it.skipIf(m.needsFixtures && !haveFixtures)(`${m.name}: prompt over an empty cache, then 3 decode steps`, { timeout: 240_000 }, async () => {
      const cpu = await trace(m.dir(), 'cpu', 4)
      const gpu = await trace(m.dir(), 'webgpu', 4, cpu.argmax)
      let diff = 0
      let scale = 0
      cpu.logits.forEach((l, i) =>
        l.forEach((v, j) => {
          diff = Math.max(diff, Math.abs(v - gpu.logits[i][j]))
          scale = Math.max(scale, Math.abs(v))
        }),
      )
      expect(scale).toBeGreaterThan(0)
      expect(diff).toBeLessThanOrEqual(m.fp16 ? 1e-2 * Math.max(1, scale) : 1e-4)
      expect(gpu.argmax).toEqual(cpu.argmax)
    })
  }
})
