// The context sweep (bench/context-sweep.bench.ts) on the tiny preset at tiny contexts: every cell is there with a
// positive step time, and runtime 'capi' moves fewer bytes than 'js' on the GroupQueryAttention graph (its presents
// are the cache itself), where 'js' fetches every present in full.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { FORMS, SWEEP_RUNTIMES, formatTable, runSweep, type SweepReport } from '../../bench/context-sweep.bench.js'

let root: string
let report: SweepReport
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'onnxd-sweep-'))
  report = await runSweep({ preset: 'tiny', contexts: [16, 32], batches: [1, 2], steps: 2, modelsDir: root, intraOpThreads: 1, log: () => {} })
}, 60_000)
afterAll(async () => {
  await rm(root, { recursive: true, force: true })
})

describe('context sweep (tiny preset)', () => {
  it('has every cell, with positive times and bytes', () => {
    expect(report.cells).toHaveLength(FORMS.length * SWEEP_RUNTIMES.length * 2 * 2)
    for (const form of FORMS)
      for (const runtime of SWEEP_RUNTIMES)
        for (const batch of [1, 2])
          for (const context of [16, 32]) {
            const c = report.cells.find((x) => x.form === form && x.runtime === runtime && x.batch === batch && x.context === context)
            expect(c, `${form} ${runtime} ${batch} ${context}`).toBeDefined()
            expect(c!.steps).toBe(2)
            expect(c!.msPerStep).toBeGreaterThan(0)
            expect(c!.bytes.fed).toBeGreaterThan(0)
            expect(c!.mbPerStep).toBeGreaterThan(0)
            expect(c!.minMs).toBeGreaterThan(0)
            expect(c!.minMs).toBeLessThanOrEqual(c!.msPerStep)
          }
    expect(report.growth).toHaveLength(FORMS.length * SWEEP_RUNTIMES.length * 2)
    expect(report.system.cores).toBeGreaterThan(0)
    expect(report.system.onnxruntime).toBeTruthy()
    expect(formatTable(report)).toContain('step(hi)/step(lo)')
  })

  it('capi moves fewer bytes than js on the GQA graph at the larger context, its presents written into the cache', () => {
    for (const batch of [1, 2]) {
      const at = (runtime: string) => report.cells.find((x) => x.form === 'gqa' && x.runtime === runtime && x.batch === batch && x.context === 32)!
      expect(at('capi').presentsShared).toBe(true)
      expect(at('js').presentsShared).toBe(false)
      expect(at('capi').mbPerStep).toBeLessThan(at('js').mbPerStep)
    }
  })
})
