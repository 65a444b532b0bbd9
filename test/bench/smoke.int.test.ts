// `onnxd bench --smoke`: the whole benchmark on the tiny preset (a node and an unbatched node started as child
// processes, the transformers.js peer, the ORT references). Checks the report's shape and that every figure in it is
// a finite number; how long it took is printed, not asserted (a loaded machine is slower).
import { existsSync, mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { LATENCIES, STATS } from '../../src/bench/metrics.js'
import { benchConfig } from '../../src/bench/options.js'
import { isSkipped, type BenchReport } from '../../src/bench/report.js'
import { runBench } from '../../src/bench/run.js'
import { packageVersion } from '../../src/bench/system.js'

/** Every number anywhere in `v`, with its path. */
function numbers(v: unknown, path = '$'): [string, number][] {
  if (typeof v === 'number') return [[path, v]]
  if (Array.isArray(v)) return v.flatMap((x, i) => numbers(x, `${path}[${i}]`))
  if (v && typeof v === 'object') return Object.entries(v).flatMap(([k, x]) => numbers(x, `${path}.${k}`))
  return []
}

describe('onnxd bench --smoke', () => {
  it('reports every figure as a finite number', async () => {
    const out = mkdtempSync(join(tmpdir(), 'onnxd-bench-smoke-'))
    const started = performance.now()
    const { report, jsonPath, chartPath } = await runBench(benchConfig(['--smoke', '--quiet', '--out', out, '--models-dir', join(process.cwd(), '.cache/models')]))
    console.log(`[bench smoke] ${((performance.now() - started) / 1000).toFixed(1)} s`)

    // On disk: the JSON is the report, the chart an SVG beside it.
    expect(JSON.parse(readFileSync(jsonPath, 'utf8'))).toEqual(JSON.parse(JSON.stringify(report)))
    expect(chartPath).toBe(jsonPath.replace(/\.json$/, '.svg'))
    expect(existsSync(chartPath!) && readFileSync(chartPath!, 'utf8').startsWith('<svg')).toBe(true)

    const r: BenchReport = report
    expect(r).toMatchObject({ bench: 'onnxd-bench', schema: 5, scenario: 'standard', baseline: null, target_ratios: [], model: { id: 'onnxd-tiny-gqa', preset: 'tiny' } })
    expect(r.machine).toMatchObject({ provider: 'cpu' })
    expect(r.machine.cores).toBeGreaterThan(0)
    expect(r.machine.cpu.length).toBeGreaterThan(0)
    expect(r.versions).toMatchObject({ 'onnxruntime-node': expect.any(String), vega: expect.any(String), 'vega-lite': expect.any(String) })
    expect(r.config).toMatchObject({ concurrency: [1, 4, 16], ignore_eos: true, smoke: true })

    // The target, llama.cpp on the same weights (F32), and both serving references, each at every level (the peer only
    // when transformers.js is here, llama.cpp when node-llama-cpp's binary loads).
    const haveTf = packageVersion('@huggingface/transformers') !== null
    const haveLlama = packageVersion('node-llama-cpp') !== null
    expect(r.scenarios.map((s) => s.name)).toEqual(['onnxd', 'llama.cpp', 'unbatched', 'peer'])
    for (const s of r.scenarios) {
      if (isSkipped(s)) {
        expect((s.name === 'peer' && !haveTf) || (s.name === 'llama.cpp' && !haveLlama), `${s.name} skipped: ${s.reason}`).toBe(true)
        continue
      }
      expect(s.levels.map((l) => l.max_concurrency)).toEqual([1, 4, 16])
      // Each was started by the bench, which timed its start to ready.
      expect(s.ready_s).toBeGreaterThan(0)
      for (const l of s.levels) {
        for (const k of LATENCIES) for (const st of STATS) expect(l).toHaveProperty(`${st}_${k}_ms`)
        expect(l.failed, `${s.name} c=${l.max_concurrency}: ${JSON.stringify(l.errors_by_status)}`).toBe(0)
        expect(l.output_throughput).toBeGreaterThan(0)
      }
      // The target itself runs every request to the end, each level between two timings of ORT alone at its batch.
      if (s.name === 'onnxd')
        for (const l of s.levels) {
          expect(l).toMatchObject({ completed: 2 * Math.max(1, l.max_concurrency), cut: 0, total_output_tokens: 16 * l.completed })
          for (const t of [l.ort_beside?.before, l.ort_beside?.after]) expect(t?.decode.batch, `ORT alone beside c=${l.max_concurrency}`).toBe(l.max_concurrency)
        }
      else for (const l of s.levels) expect(l.ort_beside).toBeUndefined()
    }
    // The unbatched node is the target's own node with one sequence at a time: vs_unbatched is batching alone.
    const [target, unbatched] = ['onnxd', 'unbatched'].map((n) => r.scenarios.find((s) => s.name === n)!)
    const serves = (s: BenchReport['scenarios'][number]) => (isSkipped(s) ? null : { attention: s.attention, runtime: s.runtime, dtype: s.dtype, prefix_caching: s.prefix_caching })
    expect(serves(unbatched!)).toEqual(serves(target!))
    expect(serves(unbatched!)?.dtype).toBe('fp32')

    // The ORT references, and the ratios against each.
    if (isSkipped(r.references.ort_ceiling) || isSkipped(r.references.matmul_peak)) throw new Error('references skipped')
    expect(r.references.ort_ceiling.decode.map((d) => d.batch)).toEqual([1, 4, 16])
    expect(r.references.matmul_peak.gflops).toBeGreaterThan(0)
    expect(r.efficiency.map((e) => e.concurrency)).toEqual([1, 4, 16])
    for (const e of r.efficiency) {
      expect(e.vs_ceiling).toBeGreaterThan(0)
      expect(e.vs_unbatched).toBeGreaterThan(0)
      expect(e.vs_matmul_peak).toBeGreaterThan(0)
      // ORT alone doing the same work never beats its own decode-only ceiling.
      expect(e.bound_vs_ceiling).toBeGreaterThan(0)
      expect(e.bound_vs_ceiling).toBeLessThan(1)
      expect(e.ort_same_work_from).toBe('beside')
      if (haveTf) expect(e.vs_peer).toBeGreaterThan(0)
    }
    expect(r.targets.map((t) => t.id)).toEqual(['peer_throughput', 'peer_tpot', 'unbatched_throughput', 'ceiling_throughput', ...(haveLlama ? ['llama_cpp:gqa/capi:f32 t1:1', 'llama_cpp:gqa/capi:f32 t1:16+'] : [])])
    for (const t of r.targets) expect(t.value !== null || (t.reason ?? '').length > 0).toBe(true)
    expect(r.summary).toHaveLength(3)

    // Every figure: a finite number.
    const bad = numbers(r).filter(([, v]) => !Number.isFinite(v))
    expect(bad).toEqual([])
  })
})
