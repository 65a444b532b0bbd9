// The smoke run of bench/grammar.bench.ts (structured outputs' per-step mask cost against the decode step) on the
// tiny default model: both figures measured at batch 1 and 16, and the mask it times is a real one (it walks the
// schema to complete JSON values, restarting each). The full run is `npx tsx bench/grammar.bench.ts` on 135m.
import { describe, expect, it } from 'vitest'
import { measureMaskCost } from '../../bench/grammar.bench.js'
import { defaultModelDir } from '../helpers/fixtures.js'

describe('bench/grammar.bench.ts --smoke', () => {
  it('prints the mask cost per step at batch 1 and 16 beside the step itself', async () => {
    const rows = await measureMaskCost(defaultModelDir(), [1, 16], 30)
    expect(rows.map((r) => r.batch)).toEqual([1, 16])
    for (const r of rows) {
      expect(r.mask_ms).toBeGreaterThan(0)
      expect(r.step_ms).toBeGreaterThan(0)
      expect(r.ratio).toBeCloseTo(r.mask_ms / r.step_ms, 9)
      console.log(`[grammar] tiny, batch ${r.batch}: mask ${r.mask_ms.toFixed(3)} ms vs decode step ${r.step_ms.toFixed(3)} ms`)
    }
  }, 60_000)
})
