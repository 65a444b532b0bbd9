// bench/step.bench.ts --ort on a GroupQueryAttention graph: each of onnxd's decode steps is followed by one of ORT
// alone at the same batch and past, and every cell reports the median of the pairs' ratios beside both medians (the
// figure that holds on a shared host, where the wall clock of whole cells moves). The tiny preset, a few steps: the
// run is a smoke test of the pairing; the figures are the full run's (docs/benchmarks.md).
import { execFileSync } from 'node:child_process'
import { readFileSync, rmSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { tinyGqaModelDir } from '../helpers/fixtures.js'

describe('step bench, paired against ORT alone', () => {
  it('times ORT alone after each step and reports the median ratio of the pairs per cell', () => {
    const out = execFileSync(process.execPath, ['--import', 'tsx', 'bench/step.bench.ts', '--batches', '1,3', '--past', '20', '--steps', '4', '--rounds', '1', '--threads', '1', '--ort', `gqa=${tinyGqaModelDir()}:fp32`], { encoding: 'utf8' })
    const cells = out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { form: string; batch: number; run_ms: number; ort_ms: number; ort_over_onnxd: number })
    expect(cells.map((c) => [c.form, c.batch])).toEqual([['gqa', 1], ['gqa', 3]])
    for (const c of cells) {
      expect(c.run_ms).toBeGreaterThan(0)
      expect(c.ort_ms).toBeGreaterThan(0)
      // A ratio of two timings of the same graph at the same shape: positive and finite, whatever the host's load.
      expect(Number.isFinite(c.ort_over_onnxd) && c.ort_over_onnxd > 0).toBe(true)
    }
    expect(out).toMatch(/ORT \/ onnxd per round \(paired/)
    expect(out).toMatch(/^gqa B=3: [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+$/m)
    const report = /^report: (.+\.json)$/m.exec(out)
    expect(report).not.toBeNull()
    rmSync(report![1])
  }, 120_000)

  it('with --spread, times both over rows of different lengths and says so in its report', () => {
    const out = execFileSync(process.execPath, ['--import', 'tsx', 'bench/step.bench.ts', '--batches', '4', '--past', '20', '--spread', '0,8', '--steps', '3', '--rounds', '1', '--threads', '1', '--ort', `gqa=${tinyGqaModelDir()}:fp32`], { encoding: 'utf8' })
    const cells = out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { batch: number; spread: number; run_ms: number; ort_ms: number; ort_equal_ms?: number; ort_spread_over_equal?: number })
    expect(cells.map((c) => [c.batch, c.spread])).toEqual([[4, 0], [4, 8]])
    for (const c of cells) {
      expect(c.run_ms).toBeGreaterThan(0)
      expect(c.ort_ms).toBeGreaterThan(0)
    }
    // At a spread, ORT alone also runs equal rows, in turn with its spread steps after the pairs; at none it does not.
    expect(cells[0].ort_equal_ms).toBeUndefined()
    expect(cells[1].ort_equal_ms).toBeGreaterThan(0)
    expect(Number.isFinite(cells[1].ort_spread_over_equal) && cells[1].ort_spread_over_equal! > 0).toBe(true)
    expect(out).toMatch(/^gqa B=4 spread 8: [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+$/m)
    const path = /^report: (.+\.json)$/m.exec(out)![1]
    const report = JSON.parse(readFileSync(path, 'utf8')) as { options: { spreads: number[] } }
    expect(report.options.spreads).toEqual([0, 8])
    rmSync(path)
  }, 120_000)

  it('refuses a spread wider than twice the past', () => {
    expect(() => execFileSync(process.execPath, ['--import', 'tsx', 'bench/step.bench.ts', '--past', '4', '--spread', '10', `gqa=${tinyGqaModelDir()}:fp32`], { encoding: 'utf8', stdio: 'pipe' })).toThrow(/usage:/)
  })
})
