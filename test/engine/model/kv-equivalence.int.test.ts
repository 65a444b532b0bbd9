// Step-by-step decoding through the engine's KV cache (rows read in place, holes masked, only new rows fetched)
// must give the logits of one full forward pass without it.
import { describe, expect, it } from 'vitest'
import { readBundle } from '../../../src/engine/model/bundle.js'
import { DecoderSession } from '../../../src/engine/model/session.js'
import { KvCache, kvShapeOf } from '../../../src/engine/scheduler/kv.js'
import type { Runtime } from '../../../src/engine/model/runtime.js'
import { DECODER_FIXTURES, defaultModelDir, fixture, haveFixtures, tinyGqaModelDir } from '../../helpers/fixtures.js'

async function maxDiffCachedVsFull(dir: string, runtime: Runtime = 'js'): Promise<{ diff: number; scale: number }> {
  const s = await DecoderSession.create(readBundle(dir), { allLogits: true, runtime })
  try {
    expect(s.runtime).toBe(runtime)
    const V = s.signature.logits.vocab
    const n = 7
    const ids = Int32Array.from({ length: n }, (_, i) => (i * 37 + 5) % V)
    const full = await s.forward(
      { rows: 1, seq: n, pastLen: 0, ids, mask: new Uint8Array(n).fill(1), positions: Int32Array.from({ length: n }, (_, i) => i), past: s.emptyPast(1) },
      Array.from({ length: n }, (_, i) => i),
    )
    // A copy: runtime 'capi' returns views over buffers its next step reuses.
    full.logits = full.logits.slice()
    const kv = new KvCache(kvShapeOf(s.signature.kv))
    kv.addRows(1)
    let diff = 0
    let scale = 0
    for (let i = 0; i < n; i++) {
      const mask = new Uint8Array(kv.cap + 1)
      kv.maskRow(mask, 0, 1, 1)
      const step = await s.forward({ rows: 1, seq: 1, pastLen: kv.cap, ids: ids.subarray(i, i + 1), mask, positions: Int32Array.of(i), past: kv.past() }, [0])
      kv.append(step.present, [1])
      // Past the first step the cache has more slots than tokens: the holes are masked out.
      if (i > 0) expect(kv.cap).toBeGreaterThan(kv.lens[0])
      for (let v = 0; v < V; v++) {
        diff = Math.max(diff, Math.abs(step.logits[v] - full.logits[i * V + v]))
        scale = Math.max(scale, Math.abs(full.logits[i * V + v]))
      }
    }
    return { diff, scale }
  } finally {
    await s.dispose()
  }
}

describe.skipIf(!haveFixtures)('KV cache equivalence on the shared fixtures', () => {
  for (const f of DECODER_FIXTURES) {
    it(`${f.name}: cached decoding equals the full forward pass`, async () => {
      const { diff, scale } = await maxDiffCachedVsFull(fixture(f.name))
      expect(scale).toBeGreaterThan(0)
      // fp32 graphs: 1e-4 absolute. fp16 graphs round every activation to 11 bits, so allow 1e-2 of the logit scale.
      expect(diff).toBeLessThanOrEqual(f.fp16 ? 1e-2 * Math.max(1, scale) : 1e-4)
    })
  }
})

describe.skipIf(!haveFixtures)('KV cache equivalence on the shared fixtures, runtime capi', () => {
  for (const f of DECODER_FIXTURES) {
    it(`${f.name}: cached decoding equals the full forward pass`, async () => {
      const { diff, scale } = await maxDiffCachedVsFull(fixture(f.name), 'capi')
      expect(scale).toBeGreaterThan(0)
      expect(diff).toBeLessThanOrEqual(f.fp16 ? 1e-2 * Math.max(1, scale) : 1e-4)
    })
  }
})

describe('KV cache equivalence on the embedded default model, both forms and both runtimes', () => {
  for (const runtime of ['js', 'capi'] as const) {
    it(`onnxd-tiny (${runtime}): cached decoding equals the full forward pass`, async () => {
      const { diff, scale } = await maxDiffCachedVsFull(defaultModelDir(), runtime)
      expect(scale).toBeGreaterThan(0)
      expect(diff).toBeLessThanOrEqual(1e-4)
    })
    it(`onnxd-tiny GroupQueryAttention form, lengths fed (${runtime}): cached decoding equals the full forward pass`, async () => {
      const { diff, scale } = await maxDiffCachedVsFull(tinyGqaModelDir(), runtime)
      expect(scale).toBeGreaterThan(0)
      expect(diff).toBeLessThanOrEqual(1e-4)
    })
  }
})

/** A prompt's next-token logits from a session that computes the last position only and one that computes all. */
async function maxDiffLastOnlyVsAll(dir: string): Promise<{ diff: number; scale: number; lastOnly: boolean }> {
  const last = await DecoderSession.create(readBundle(dir))
  const all = await DecoderSession.create(readBundle(dir), { allLogits: true })
  try {
    const V = all.signature.logits.vocab
    // Two rows of 5 tokens, so a wrong row or position cannot pass.
    const n = 5
    const ids = Int32Array.from({ length: 2 * n }, (_, i) => (i * 53 + 11) % V)
    const x = { rows: 2, seq: n, pastLen: 0, ids, mask: new Uint8Array(2 * n).fill(1), positions: Int32Array.from({ length: 2 * n }, (_, i) => i % n), past: all.emptyPast(2) }
    const picks = [n - 1, 2 * n - 1]
    const a = await last.forward(x, picks)
    const b = await all.forward(x, picks)
    let diff = 0
    let scale = 0
    for (let i = 0; i < 2 * V; i++) {
      diff = Math.max(diff, Math.abs(a.logits[i] - b.logits[i]))
      scale = Math.max(scale, Math.abs(b.logits[i]))
    }
    await expect(last.forward(x, [0])).rejects.toThrow(/last position only/)
    return { diff, scale, lastOnly: last.signature.logits.lastOnly }
  } finally {
    await last.dispose()
    await all.dispose()
  }
}

describe('last-position logits', () => {
  it('onnxd-tiny: the rewritten LM head gives the same next-token logits', async () => {
    const { diff, scale, lastOnly } = await maxDiffLastOnlyVsAll(defaultModelDir())
    expect(lastOnly).toBe(true)
    expect(scale).toBeGreaterThan(0)
    expect(diff).toBeLessThanOrEqual(1e-4)
  })

  for (const f of DECODER_FIXTURES) {
    it.skipIf(!haveFixtures)(`${f.name}: same next-token logits`, async () => {
      const { diff, scale } = await maxDiffLastOnlyVsAll(fixture(f.name))
      expect(scale).toBeGreaterThan(0)
      expect(diff).toBeLessThanOrEqual(f.fp16 ? 1e-2 * Math.max(1, scale) : 1e-4)
    })
  }
})
