// Synthetic bench reports for the report, chart and compare tests: every figure set from a few knobs.
import { levelFigures } from '../../src/bench/metrics.js'
import type { RequestRecord } from '../../src/bench/client.js'
import { REPORT_KIND, REPORT_SCHEMA, type BenchReport, type ScenarioName, type ScenarioResult } from '../../src/bench/report.js'

/** `n` identical successful records: TTFT `ttft` ms, then `out - 1` tokens `tpot` ms apart. */
export function records(n: number, o: { ttft: number; tpot: number; out: number; prompt: number }): RequestRecord[] {
  return Array.from({ length: n }, (_, i) => ({
    ok: true,
    status: '200',
    cut: false,
    startMs: i,
    ttftMs: o.ttft,
    itlMs: new Array<number>(o.out - 1).fill(o.tpot),
    e2eMs: o.ttft + (o.out - 1) * o.tpot,
    promptTokens: o.prompt,
    cachedTokens: 0,
    outputTokens: o.out,
  }))
}

/** A scenario whose level at concurrency c has output throughput `tps(c)` tokens/s and TPOT `tpot` ms. */
export function scenarioOf(name: ScenarioName, levels: number[], tps: (c: number) => number, tpot = 20): ScenarioResult {
  return {
    name,
    label: name,
    url: 'http://127.0.0.1:1',
    provider: 'cpu',
    deadline_s: null,
    levels: levels.map((c) => {
      const n = 2 * c
      const out = 10
      // duration so that (n * out) / duration = tps(c)
      return levelFigures(records(n, { ttft: 50, tpot, out, prompt: 20 }), (n * out) / tps(c), c, Infinity)
    }),
  }
}

export function fakeReport(over: Partial<BenchReport> = {}): BenchReport {
  const cs = [1, 4, 16, 64]
  return {
    bench: REPORT_KIND,
    schema: REPORT_SCHEMA,
    scenario: 'standard',
    baseline: null,
    target_ratios: [],
    llama_cpp_ratios: [],
    run_order: [],
    notes: [],
    created: '2026-01-01T00:00:00.000Z',
    config: { prompt_len: '20', output_len: '10', request_rate: 'inf', seed: 0, ignore_eos: true },
    machine: { node: 'v20', os: 'linux', cpu: 'test cpu', cores: 2, memoryGiB: 8, cpuFlags: [], onnxruntime: '1.30.0', onnxd: '0.1.0', provider: 'cpu', loadavg_start: [0, 0, 0], loadavg_end: [0, 0, 0] },
    versions: { onnxd: '0.1.0' },
    model: { id: 'm', dir: null, preset: null, builder_version: null, vocab: 100, matmul_params: 1000, flops_per_output_token: 2000 },
    scenarios: [scenarioOf('onnxd', cs, (c) => 10 * c, 18), scenarioOf('unbatched', cs, () => 10), scenarioOf('peer', cs, () => 8, 20)],
    references: {
      ort_ceiling: {
        threads: 0,
        past: 25,
        decode: cs.map((c) => ({ batch: c, past: 25, ms: 100, rsd: 1, runs: 5, tokens_per_s: 10 * c * 1.25 })),
        prefill: { prompt: 20, rows: 2, ms: 20, rsd: 1, runs: 5, tokens_per_s: 2000 },
        runs: {},
      },
      matmul_peak: { threads: 0, gflops: 100, points: [{ size: 512, ms: 1, rsd: 1, runs: 5, gflops: 100 }], runs: {} },
    },
    efficiency: [],
    targets: [],
    summary: [],
    drift: { unbatched_step: null, ceiling_step: null, warning: null },
    files: { json: 'x.json', chart: 'x.svg' },
    ...over,
  }
}
