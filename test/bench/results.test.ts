// The heading of a kept result names the host it ran on (src/bench/results.ts, docs/benchmarks.md "Results"). This
// project's runs came from hosts of one model name ("AMD EPYC") with and without AVX-512 VNNI, on which ORT's integer
// kernels differ by more than the ratios the runs are read for; the heading says which.
import { describe, expect, it } from 'vitest'
import { hostOf } from '../../src/bench/results.js'

describe("a kept result's host", () => {
  it("names the CPU's SIMD extensions where the report recorded them", () => {
    const m = { cpu: 'AMD EPYC', cores: 2, provider: 'cpu', cpuFlags: ['avx', 'avx2', 'fma', 'avx512f', 'avx512_vnni'], loadavg_start: [0.5], loadavg_end: [2.1] }
    expect(hostOf(m)).toBe('AMD EPYC (avx avx2 fma avx512f avx512_vnni), 2 cores, cpu, load 0.5 → 2.1')
    expect(hostOf({ ...m, cpuFlags: ['avx', 'avx2', 'fma'] })).toBe('AMD EPYC (avx avx2 fma), 2 cores, cpu, load 0.5 → 2.1')
  })

  it('reads as before for a report without them (the attack bench, older schemas)', () => {
    expect(hostOf({ cpu: 'Intel(R) Xeon(R)', cores: 4 })).toBe('Intel Xeon, 4 cores')
    expect(hostOf(undefined, 'AMD EPYC', 2)).toBe('AMD EPYC, 2 cores')
  })
})
