// Where ORT's own decode step goes, by operator type: ORT's profile (a Chrome trace) read into each batch's kernel
// time per step (refs/capi.ts opsOfTrace), and the report's line for it (format.ts opShares).
import { describe, expect, it } from 'vitest'
import { opsOfTrace } from '../../src/bench/refs/profile.js'
import { opShares } from '../../src/bench/format.js'
import { isSkipped } from '../../src/bench/report.js'
import { resultMarkdown } from '../../src/bench/results.js'
import { fakeReport } from './fixtures.js'

/** A run span at `ts` lasting `dur` µs, with a kernel event per [op, µs] laid out inside it. */
function run(ts: number, kernels: Array<[string, number]>, dur = 1000): object[] {
  let at = ts + 1
  const ev: object[] = [{ cat: 'Session', name: 'model_run', ts, dur }]
  for (const [op, us] of kernels) {
    ev.push({ cat: 'Node', name: `/model/${op}_kernel_time`, ts: at, dur: us, args: { op_name: op } })
    // ORT writes fence events beside each kernel; they are not kernel time.
    ev.push({ cat: 'Node', name: `/model/${op}_fence_before`, ts: at, dur: 0, args: { op_name: op } })
    at += us
  }
  return ev
}

describe('opsOfTrace', () => {
  it("averages each batch's kept runs by operator type, skipping its warm-up runs, largest first", () => {
    const trace = [
      // Batch 1: one warm-up run (slow, not counted), two kept.
      ...run(0, [['MatMul', 900]]),
      ...run(10_000, [['MatMul', 300], ['GroupQueryAttention', 100], ['MatMul', 100]]),
      ...run(20_000, [['MatMul', 200], ['GroupQueryAttention', 300]]),
      // Batch 2.
      ...run(30_000, [['GroupQueryAttention', 5000]], 6000),
      ...run(40_000, [['GroupQueryAttention', 3000], ['MatMul', 1000]], 5000),
      ...run(50_000, [['GroupQueryAttention', 1000], ['MatMul', 1000]], 5000),
      // Outside every run (session start-up): not counted.
      { cat: 'Node', name: 'x_kernel_time', ts: 70_000, dur: 99, args: { op_name: 'MatMul' } },
    ]
    // Events come in any order.
    expect(opsOfTrace(trace.reverse(), 2, 1, 2)).toEqual([
      [
        { op: 'MatMul', ms: 0.3 },
        { op: 'GroupQueryAttention', ms: 0.2 },
      ],
      [
        { op: 'GroupQueryAttention', ms: 2 },
        { op: 'MatMul', ms: 1 },
      ],
    ])
  })

  it('refuses a profile that does not hold the runs made', () => {
    expect(() => opsOfTrace(run(0, [['MatMul', 10]]), 2, 1, 2)).toThrow(/holds 1 runs, not the 6 made/)
  })
})

describe('opShares', () => {
  it('names the four costliest types with their ms and share, then the rest together', () => {
    const ops = [
      { op: 'GroupQueryAttention', ms: 40 },
      { op: 'MatMul', ms: 30 },
      { op: 'Mul', ms: 10 },
      { op: 'Add', ms: 10 },
      { op: 'Gather', ms: 6 },
      { op: 'Cast', ms: 4 },
    ]
    expect(opShares(ops)).toBe('GroupQueryAttention 40.0 ms (40%), MatMul 30.0 ms (30%), Mul 10.0 ms (10%), Add 10.0 ms (10%), 2 other types 10.0 ms (10%)')
    expect(opShares(ops.slice(0, 2))).toBe('GroupQueryAttention 40.0 ms (57%), MatMul 30.0 ms (43%)')
    expect(opShares([])).toBe('no kernel time recorded')
  })
})

describe("a kept serving result's section", () => {
  it("shows ORT alone's step by operator where the run profiled it, and no such table where it did not", () => {
    const r = fakeReport()
    const plain = resultMarkdown({ file: '2026-11-28-x.json', date: '2026-11-28', json: r as unknown as Record<string, unknown> })
    expect(plain).not.toContain('by operator')
    if (isSkipped(r.references.ort_ceiling)) throw new Error('fixture')
    r.references.ort_ceiling.ops = [{ batch: 16, ops: [{ op: 'GroupQueryAttention', ms: 20 }, { op: 'MatMulNBits', ms: 30 }] }]
    const md = resultMarkdown({ file: '2026-11-28-x.json', date: '2026-11-28', json: r as unknown as Record<string, unknown> })
    expect(md).toContain("| ORT alone's decode step | batch | by operator (ORT's profiler), ms per step |")
    expect(md).toMatch(/\| [^|]+ \| 16 \| GroupQueryAttention 20\.0 ms \(40%\), MatMulNBits 30\.0 ms \(60%\) \|/)
  })
})
