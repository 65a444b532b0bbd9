// Step-by-step decoding through the engine's KV cache (rows read in place, holes masked, only new rows fetched)
// must give the logits of one full forward pass without it.
import { describe, expect, it } from 'vitest'
import { readBundle } from '../../../src/engine/model/bundle.js'
import { DecoderSession } from '../../../src/engine/model/session.js'
import { KvCache } from '../../../src/engine/scheduler/kv.js'
import { DECODER_FIXTURES, defaultModelDir, fixture, haveFixtures } from '../../helpers/fixtures.js'

async function maxDiffCachedVsFull(dir: string): Promise<{ diff: number; scale: number }> {
  const s = await DecoderSession.create(readBundle(dir))
  try {
    const V = s.signature.logits.vocab
    const n = 7
    const ids = Int32Array.from({ length: n }, (_, i) => (i * 37 + 5) % V)
    const full = await s.forward(
      { rows: 1, seq: n, pastLen: 0, ids, mask: new Uint8Array(n).fill(1), positions: Int32Array.from({ length: n }, (_, i) => i), past: s.emptyPast(1) },
      Array.from({ length: n }, (_, i) => i),
    )
    const { pastNames, stacked, heads, headDim, dtype, present } = s.signature.kv
    const kv = new KvCache({ tensors: pastNames.length, outer: stacked ? 2 : 1, heads, headDim, dtype, present })
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

describe('KV cache equivalence on the embedded default model', () => {
  it('onnxd-tiny: cached decoding equals the full forward pass', async () => {
    const { diff, scale } = await maxDiffCachedVsFull(defaultModelDir())
    expect(scale).toBeGreaterThan(0)
    expect(diff).toBeLessThanOrEqual(1e-4)
  })
})
