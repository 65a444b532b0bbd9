import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { caveats, compareReports, formatComparison, readReport } from '../../src/bench/compare.js'
import { fakeReport, scenarioOf } from './fixtures.js'

describe('compareReports', () => {
  const a = fakeReport()
  const b = fakeReport({
    scenarios: [scenarioOf('onnxd', [1, 4, 16, 64], (c) => 20 * c, 9), scenarioOf('unbatched', [1, 4], () => 10), scenarioOf('peer', [1, 4, 16, 64], () => 8, 20)],
  })

  it('gives B/A for every figure matched by target and concurrency', () => {
    const rows = compareReports(a, b)
    const get = (where: string, figure: string) => rows.find((r) => r.where === where && r.figure === figure)!
    expect(get('onnxd c=64', 'output_throughput').ratio).toBeCloseTo(2, 10)
    expect(get('onnxd c=64', 'output_throughput').better).toBe(true)
    expect(get('onnxd c=1', 'mean_tpot_ms').ratio).toBeCloseTo(0.5, 10)
    expect(get('onnxd c=1', 'mean_tpot_ms').better).toBe(true) // lower latency is better
    expect(get('peer c=16', 'output_throughput')).toMatchObject({ ratio: 1, better: null })
    // unbatched c=16 is in A only: not compared
    expect(rows.some((r) => r.where === 'unbatched c=16')).toBe(false)
    expect(get('ORT ceiling B=64', 'tokens_per_s').ratio).toBe(1)
    expect(get('matmul peak', 'gflops').ratio).toBe(1)
  })

  it('matches several onnxd targets by name, and a single-target run with a report that names none', () => {
    const t = (target: string, k: number) => ({ ...scenarioOf('onnxd', [1, 4], (c) => k * c), target })
    const x = fakeReport({ baseline: 'onnxd gqa/js', scenarios: [t('onnxd gqa/js', 10), t('onnxd gqa/capi', 20)] })
    const y = fakeReport({ baseline: 'onnxd gqa/js', scenarios: [t('onnxd gqa/capi', 30), t('onnxd gqa/js', 10)] })
    const rows = compareReports(x, y)
    const get = (where: string) => rows.find((r) => r.where === where && r.figure === 'output_throughput')!
    expect(get('onnxd gqa/capi c=4').ratio).toBeCloseTo(1.5, 10)
    expect(get('onnxd gqa/js c=1').ratio).toBeCloseTo(1, 10)
    // Schema 2 (no target names) against a one-target run of schema 3: the onnxd scenarios still pair up.
    const old = fakeReport({ scenarios: [scenarioOf('onnxd', [1], () => 10)] })
    const one = fakeReport({ scenarios: [t('onnxd plain/js', 20)] })
    expect(compareReports(old, one).find((r) => r.figure === 'output_throughput')!.ratio).toBeCloseTo(2, 10)
  })

  it('prints a table with the ratios', () => {
    const text = formatComparison(compareReports(a, b), 'a.json', 'b.json')
    expect(text).toMatch(/^A: a\.json\nB: b\.json/)
    expect(text).toMatch(/onnxd c=64\s+output_throughput\s+640\.00\s+1280\.00\s+2\.000x\s+better/)
  })

  it('notes what else differs between the runs: machine, model build, a host that moved', () => {
    expect(caveats(a, b)).toEqual([])
    const elsewhere = fakeReport({
      machine: { ...a.machine, cpu: 'other cpu' },
      model: { ...a.model, builder_version: '3' },
      drift: { unbatched_step: 1.6, ceiling_step: 1.2, warning: "the host's speed moved during this run (...)" },
    })
    const notes = caveats(a, elsewhere)
    expect(notes).toEqual([
      'cpu differs: A test cpu x2, B other cpu x2; B/A mixes that with the change',
      'model differs: A m (builder -), B m (builder 3); B/A mixes that with the change',
      "B: the host's speed moved during this run (...)",
    ])
    expect(formatComparison(compareReports(a, elsewhere), 'a.json', 'b.json', notes)).toMatch(/^A: a\.json\nB: b\.json\nnote: cpu differs/)
    // A report written before drift existed (schema 1) compares without a note for it.
    const { drift: _, ...old } = a
    expect(caveats(old as typeof a, a)).toEqual([])
  })

  it('reads reports from disk and refuses other JSON', () => {
    const dir = mkdtempSync(join(tmpdir(), 'onnxd-compare-'))
    writeFileSync(join(dir, 'a.json'), JSON.stringify(a))
    writeFileSync(join(dir, 'x.json'), '{"bench": "other"}')
    expect(readReport(join(dir, 'a.json')).scenarios).toHaveLength(3)
    expect(() => readReport(join(dir, 'x.json'))).toThrow(/not an onnxd bench report/)
  })
})
