// Step-by-step decoding through the engine's KV cache (rows read in place, holes masked, only new rows fetched)
// must give the logits of one full forward pass without it.
import { describe, expect, it } from 'vitest'
import { readBundle } from '../../../src/engine/model/bundle.js'
import { DecoderSession } from '../../../src/engine/model/session.js'
import { KvCache, kvShapeOf } from '../../../src/engine/scheduler/kv.js'
import type { Runtime } from '../../../src/engine/model/runtime.js'
import { DECODER_FIXTURES, tinyPlainModelDir, fixture, haveFixtures, tinyGqaModelDir } from '../../helpers/fixtures.js'

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
      const { diff, scale } = await maxDiffCachedVsFull(tinyPlainModelDir(), runtime)
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

/**
 * Logits at a step's named positions from a session that computes only those (decoder-graph.ts positionLogits) and
 * from one that computes all: each row's last (a prompt's next token), then several per row in one step (a draft).
 */
async function maxDiffPickedVsAll(dir: string): Promise<{ diff: number; scale: number; named: boolean }> {
  const last = await DecoderSession.create(readBundle(dir))
  const all = await DecoderSession.create(readBundle(dir), { allLogits: true })
  try {
    const V = all.signature.logits.vocab
    // Two rows of 5 tokens, so a wrong row or position cannot pass.
    const n = 5
    const ids = Int32Array.from({ length: 2 * n }, (_, i) => (i * 53 + 11) % V)
    const x = { rows: 2, seq: n, pastLen: 0, ids, mask: new Uint8Array(2 * n).fill(1), positions: Int32Array.from({ length: 2 * n }, (_, i) => i % n), past: all.emptyPast(2) }
    let diff = 0
    let scale = 0
    for (const picks of [[n - 1, 2 * n - 1], [0, 2, n - 1, n + 1, n + 2, 2 * n - 1]]) {
      const a = await last.forward(x, picks)
      const b = await all.forward(x, picks)
      expect(a.logits.length).toBe(picks.length * V)
      for (let i = 0; i < picks.length * V; i++) {
        diff = Math.max(diff, Math.abs(a.logits[i] - b.logits[i]))
        scale = Math.max(scale, Math.abs(b.logits[i]))
      }
    }
    return { diff, scale, named: last.signature.logits.at !== null }
  } finally {
    await last.dispose()
    await all.dispose()
  }
}

describe('logits at named positions', () => {
  it('onnxd-tiny: the rewritten LM head gives the same logits at the last position, and at several per row', async () => {
    const { diff, scale, named } = await maxDiffPickedVsAll(tinyPlainModelDir())
    expect(named).toBe(true)
    expect(scale).toBeGreaterThan(0)
    expect(diff).toBeLessThanOrEqual(1e-4)
  })

  for (const f of DECODER_FIXTURES) {
    it.skipIf(!haveFixtures)(`${f.name}: the same logits at the named positions`, async () => {
      const { diff, scale } = await maxDiffPickedVsAll(fixture(f.name))
      expect(scale).toBeGreaterThan(0)
      expect(diff).toBeLessThanOrEqual(f.fp16 ? 1e-2 * Math.max(1, scale) : 1e-4)
    })
  }
})
