// The smoke run of bench/grammar.bench.ts (structured outputs' per-step mask cost against the decode step) on the
// tiny default model: both figures measured at batch 1 and 16, each the median of the steps asked for, and the mask
// it times is the schema's own: every row's text under it is a JSON object of the schema in the making, and every
// value it completed parses and satisfies the schema. The full run is `npx tsx bench/grammar.bench.ts` on 135m.
import { Ajv } from 'ajv'
import { describe, expect, it } from 'vitest'
import { measureMaskCost, SCHEMA } from '../../bench/grammar.bench.js'
import { tinyPlainModelDir } from '../helpers/fixtures.js'

describe('bench/grammar.bench.ts --smoke', () => {
  it('times real schema masks and decode steps at batch 1 and 16', async () => {
    const valid = new Ajv({ strict: false }).compile(SCHEMA)
    const steps = 100
    const rows = await measureMaskCost(tinyPlainModelDir(), [1, 16], steps)
    expect(rows.map((r) => r.batch)).toEqual([1, 16])
    for (const r of rows) {
      // Each figure is a median over the steps it says, at that batch.
      expect(r.mask_steps).toBe(steps)
      expect(r.decode_steps).toBeGreaterThan(0)
      expect(Number.isFinite(r.mask_ms) && Number.isFinite(r.step_ms)).toBe(true)
      // Under the mask every row writes the schema's object, its first property first (free tokens of a
      // random-weight model would not; a row may be anywhere in it, or have just finished a value), and what it finished
      // is a value of the schema.
      expect(r.walking).toHaveLength(r.batch)
      const head = '{"name":"'
      for (const text of r.walking) expect(text.startsWith(head) || head.startsWith(text), text).toBe(true)
      expect(r.values.length, 'values completed').toBeGreaterThan(0)
      for (const v of r.values) expect(valid(JSON.parse(v)), v).toBe(true)
      console.log(`[grammar] tiny, batch ${r.batch}: mask ${r.mask_ms.toFixed(3)} ms vs decode step ${r.step_ms.toFixed(3)} ms (${r.values.length} values completed)`)
    }
  }, 60_000)
})
