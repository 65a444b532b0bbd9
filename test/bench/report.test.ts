import { describe, expect, it } from 'vitest'
import { chartPoints, chartSpec, renderSvg } from '../../src/bench/chart.js'
import type { ModelInfo } from '../../src/bench/model-info.js'
import { formatTable, tables, timeTable } from '../../src/bench/format.js'
import { bestOf, efficiency, hostDrift, isSkipped, llamaCppRatios, llamaCppTargets, ortSameWork, summaryLines, targetRatios, targets, type BenchReport, type CeilingReference, type ScenarioResult } from '../../src/bench/report.js'
import { fakeReport, scenarioOf } from './fixtures.js'

const model: ModelInfo = { dir: '/m', id: 'm', onnxPath: '/m/onnx/model.onnx', vocab: 100, layers: 2, hidden: 8, heads: 2, kvHeads: 1, headDim: 4, intermediate: 16, matmulParams: 1000, builderVersion: null }
const len = { prompt: 20, output: 10 }

function derive(r: BenchReport): BenchReport {
  const eff = efficiency(r, model, len)
  const tg = targets(eff, r)
  return { ...r, efficiency: eff, targets: tg, summary: summaryLines(eff, tg, r) }
}

describe('hostDrift: how much the same work moved during a run', () => {
  /** The fake report with the unbatched node's batch-1 decode step at each level, and ORT steps before/after. */
  function withSteps(unbatchedMs: number[], before: number, after: number): BenchReport {
    const r = fakeReport()
    const unb = r.scenarios.find((s) => s.name === 'unbatched')!
    if (isSkipped(unb)) throw new Error('fixture')
    unb.levels.forEach((l, i) => {
      l.engine = { decode_steps: 100, decode_seconds: unbatchedMs[i] / 10, mean_decode_batch: 1, mean_decode_step_ms: unbatchedMs[i], prefill_steps: 1, prefill_seconds: 0.1, prefill_tokens: 20, other_seconds: 0, forward_fraction: 1 }
    })
    const c = r.references.ort_ceiling as CeilingReference
    const at = (ms: number): CeilingReference['decode'] => c.decode.map((d) => ({ ...d, ms: d.batch === 64 ? ms : d.ms }))
    c.runs = { before: { decode: at(before), prefill: c.prefill }, after: { decode: at(after), prefill: c.prefill } }
    return r
  }

  it('is quiet when the same work took the same time', () => {
    expect(hostDrift(withSteps([40, 41, 40.5, 41.5], 100, 104))).toMatchObject({ warning: null })
  })

  it('warns, naming the figures, when the unbatched step or the ceiling moved by more than 15%', () => {
    const d = hostDrift(withSteps([38.8, 46.5, 58, 63.6], 100, 104))
    expect(d.unbatched_step).toBeCloseTo(63.6 / 38.8, 6)
    expect(d.warning).toMatch(/unbatched node's batch-1 decode step ranged 38\.8 \/ 46\.5 \/ 58\.0 \/ 63\.6 ms/)
    const c = hostDrift(withSteps([40, 40, 40, 40], 180, 236))
    expect(c.ceiling_step).toBeCloseTo(236 / 180, 6)
    expect(c.warning).toMatch(/ORT decode ceiling's steps differed up to 31%/)
  })
})

describe('efficiency and targets', () => {
  it('divides onnxd output tok/s by each reference at the same concurrency', () => {
    const r = derive(fakeReport())
    const at64 = r.efficiency.find((e) => e.concurrency === 64)!
    expect(at64.output_throughput).toBeCloseTo(640, 6)
    expect(at64.vs_unbatched).toBeCloseTo(64, 6)
    expect(at64.vs_peer).toBeCloseTo(80, 6)
    expect(at64.vs_ceiling).toBeCloseTo(0.8, 6)
    expect(at64.tpot_vs_peer).toBeCloseTo(18 / 20, 6)
    expect(at64.ceiling_batch_gain).toBeCloseTo(64, 6)
    expect(at64.vs_matmul_peak).toBeGreaterThan(0)
    // The same work through ORT: 64 prefills of 10 ms, then 10 steps of 100 ms -> 640 tokens in 1.64 s.
    expect(at64.vs_ceiling_with_prefill).toBeCloseTo(640 / (640 / 1.64), 6)
  })

  it("checks the issues' targets as ratios", () => {
    const r = derive(fakeReport())
    const t = Object.fromEntries(r.targets.map((g) => [g.id, g]))
    expect(t.peer_throughput).toMatchObject({ met: true, threshold: 5 })
    expect(t.peer_throughput.value).toBeCloseTo(20, 6) // lowest level >= 16: 160 / 8
    // ORT alone doing a level's work: c prefills of 10 ms, then 10 decode steps of 100 ms, for 10c tokens.
    expect(t.peer_throughput.bound).toBeCloseTo(160 / 1.16 / 8, 6)
    expect(t.unbatched_throughput.bound).toBeCloseTo(640 / 1.64 / 10, 6)
    expect(t.ceiling_throughput.bound).toBeCloseTo(640 / 1.64 / 800, 6)
    expect(t.peer_tpot).toMatchObject({ met: true, direction: '<=' })
    expect(t.unbatched_throughput).toMatchObject({ met: true })
    expect(t.ceiling_throughput.value).toBeCloseTo(0.8, 6)
  })

  it('reports a missed target as missed and an unmeasured one with its reason', () => {
    const slow = fakeReport({ scenarios: [scenarioOf('onnxd', [1, 4], () => 5, 30), { name: 'peer', label: 'peer', skipped: true, reason: 'transformers.js is not installed' }, scenarioOf('unbatched', [1, 4], () => 10)] })
    const r = derive(slow)
    const t = Object.fromEntries(r.targets.map((g) => [g.id, g]))
    expect(t.peer_throughput).toMatchObject({ value: null, met: null, reason: 'peer skipped: transformers.js is not installed' })
    expect(t.unbatched_throughput).toMatchObject({ value: null, met: null })
    expect(t.unbatched_throughput.reason).toMatch(/no level at 64/)
    expect(r.efficiency[0].vs_unbatched).toBeCloseTo(0.5, 6)
    expect(r.summary).toHaveLength(3)
  })

  it('writes one summary line each for the ceiling, the peer and unbatched', () => {
    const [ceil, peer, unb] = derive(fakeReport()).summary
    expect(ceil).toMatch(/^onnxd vs ceiling: at 64 streams 640\.0 output tok\/s = 80% of the ORT decode ceiling/)
    expect(peer).toMatch(/^onnxd vs peer .*20\.0x at 16 \(ORT alone, same work: 17\.2x\), 80\.0x at 64 .* streams \(target >= 5x: met\)/)
    expect(unb).toMatch(/^onnxd vs unbatched: .*64\.0x at 64 \(ORT alone, same work: 39\.0x\) streams \(target >= 8x at 64: met\); ORT alone gains 64\.0x from batch 1 to batch 64$/)
  })
})

describe('each target against ORT alone on its own file', () => {
  const ceiling = (ms: number): CeilingReference => ({
    threads: 0,
    past: 25,
    decode: [1, 4].map((batch) => ({ batch, past: 25, ms: ms * batch, rsd: 1, runs: 5, tokens_per_s: 1000 / ms })),
    prefill: { prompt: 20, rows: 2, ms: 20, rsd: 1, runs: 5, tokens_per_s: 2000 },
    runs: {},
  })
  const engine = { decode_steps: 10, decode_seconds: 1, mean_decode_batch: 1, mean_decode_step_ms: 5, prefill_steps: 1, prefill_seconds: 0.1, prefill_tokens: 20, other_seconds: 0.1, forward_fraction: 0.9 }
  const target = (name: string, dtype: string) => {
    const s = scenarioOf('onnxd', [1, 4], (c) => 50 * c)
    return { ...s, target: name, attention: 'gqa', dtype, levels: s.levels.map((l) => ({ ...l, engine })) }
  }
  const r = fakeReport({
    baseline: 'onnxd gqa/capi',
    scenarios: [target('onnxd gqa/capi', 'fp32'), target('onnxd gqa/capi/q4', 'q4')],
    references: { ...fakeReport().references, ort_ceiling: ceiling(20), ort_ceiling_by_form: { gqa: ceiling(20), 'gqa/q4': ceiling(6) } },
  })

  it('ratios to ORT doing the same work use the ceiling of the target\'s graph form and weight dtype', () => {
    const len = { prompt: 20, output: 10 }
    for (const t of targetRatios(r, 'onnxd gqa/capi', len)) {
      const l = (name: string) => (r.scenarios.find((s) => s.target === name) as ScenarioResult).levels.find((x) => x.max_concurrency === t.concurrency)!
      expect(t.vs_ort_same_work['onnxd gqa/capi']).toBeCloseTo(l('onnxd gqa/capi').output_throughput / ortSameWork(ceiling(20), t.concurrency, len)!, 9)
      expect(t.vs_ort_same_work['onnxd gqa/capi/q4']).toBeCloseTo(l('onnxd gqa/capi/q4').output_throughput / ortSameWork(ceiling(6), t.concurrency, len)!, 9)
    }
  })

  it('"where the time goes" puts each target\'s step beside its own ceiling\'s step at that batch', () => {
    expect(timeTable(r).map((x) => [x.target, x.conc, x['ORT step ms (B=conc)']])).toEqual([
      ['onnxd gqa/capi', 1, '20.0'],
      ['onnxd gqa/capi', 4, '80.0'],
      ['onnxd gqa/capi/q4', 1, '6.0'],
      ['onnxd gqa/capi/q4', 4, '24.0'],
    ])
  })
})

describe('ORT alone timed beside each level', () => {
  const timing = (decodeMs: number, prefillMs: number, batch: number) => ({
    decode: { batch, past: 25, ms: decodeMs, rsd: 1, runs: 5, tokens_per_s: (1000 * batch) / decodeMs },
    prefill: { prompt: 20, rows: 4, ms: prefillMs, rsd: 1, runs: 5, tokens_per_s: 80_000 / prefillMs },
  })
  /** The fake report with ORT alone timed before and after its onnxd level at 64 (the ceiling says 100 ms a step). */
  function beside(before: number, after: number): BenchReport {
    const r = fakeReport()
    const on = r.scenarios.find((s) => s.name === 'onnxd') as ScenarioResult
    const l = on.levels.find((x) => x.max_concurrency === 64)!
    l.ort_beside = { file: 'model.onnx', before: timing(before, 40, 64), after: timing(after, 40, 64) }
    l.engine = { decode_steps: 10, decode_seconds: 1.6, mean_decode_batch: 64, mean_decode_step_ms: 160, prefill_steps: 16, prefill_seconds: 0.6, prefill_tokens: 1280, other_seconds: 0.1, forward_fraction: 0.9 }
    return r
  }

  it('holds a level against ORT alone timed beside it, the mean of before and after, not against the ceiling', () => {
    const r = derive(beside(150, 250))
    const at64 = r.efficiency.find((e) => e.concurrency === 64)!
    // 64 prompts at 40 ms per 4, then 10 steps: 0.64 s + 1.5 s before, 0.64 s + 2.5 s after; mean 2.64 s for 640 tokens.
    expect(at64.ort_same_work).toBeCloseTo(640 / 2.64, 6)
    expect(at64.ort_same_work_from).toBe('beside')
    expect(at64.vs_ceiling_with_prefill).toBeCloseTo(640 / (640 / 2.64), 6)
    // The ceiling's own share stays the ceiling's (64 prefills of 10 ms and 10 steps of 100 ms, over 800 tok/s).
    expect(at64.bound_vs_ceiling).toBeCloseTo(640 / 1.64 / 800, 6)
    expect(r.summary[0]).toMatch(/, 264% of ORT doing the same prefill \+ decode work timed beside the level \(that work from the ceiling's own timings: 49% of the decode ceiling\)/)
    // A level without timings beside it still reads the ceiling.
    const at16 = r.efficiency.find((e) => e.concurrency === 16)!
    expect(at16.ort_same_work_from).toBe('ceiling')
    expect(at16.ort_same_work).toBeCloseTo(ortSameWork(r.references.ort_ceiling as CeilingReference, 16, len)!, 9)
  })

  it('puts the mean step beside the level in "where the time goes", and one timing alone counts too', () => {
    const r = beside(150, 250)
    expect(timeTable(r).find((x) => x.conc === 64)?.['ORT step ms (B=conc)']).toBe('200.0')
    const l = (r.scenarios.find((s) => s.name === 'onnxd') as ScenarioResult).levels.find((x) => x.max_concurrency === 64)!
    delete l.ort_beside!.before
    expect(ortSameWork(null, 64, len, l)).toBeCloseTo(640 / (0.64 + 2.5), 6)
    expect(timeTable(r).find((x) => x.conc === 64)?.['ORT step ms (B=conc)']).toBe('250.0')
  })

  it('puts the step over rows of spread lengths beside it where that was timed, and leaves the ratios on the step at the mean', () => {
    const r = beside(150, 250)
    const l = (r.scenarios.find((s) => s.name === 'onnxd') as ScenarioResult).levels.find((x) => x.max_concurrency === 64)!
    expect(timeTable(r).find((x) => x.conc === 64)?.['ORT, rows spread']).toBe('-')
    const spread = (ms: number) => ({ batch: 64, past: 25, ms, rsd: 1, runs: 5, tokens_per_s: 64_000 / ms })
    l.ort_beside!.before!.decode_spread = spread(180)
    l.ort_beside!.after!.decode_spread = spread(260)
    expect(timeTable(r).find((x) => x.conc === 64)?.['ORT, rows spread']).toBe('220.0')
    expect(timeTable(r).find((x) => x.conc === 64)?.['ORT step ms (B=conc)']).toBe('200.0')
    expect(ortSameWork(null, 64, len, l)).toBeCloseTo(640 / 2.64, 6)
  })

  it('warns when ORT alone moved between right before and right after a level', () => {
    expect(hostDrift(beside(150, 155))).toMatchObject({ beside_step: 155 / 150, warning: null })
    const d = hostDrift(beside(150, 250))
    expect(d.beside_step).toBeCloseTo(250 / 150, 6)
    expect(d.warning).toMatch(/ORT alone's decode step differed up to 67% between right before and right after one level/)
  })
})

describe('bestOf', () => {
  it('keeps the faster ORT step per batch and the higher matmul peak of two measurements, and both runs', () => {
    const a = fakeReport().references
    if (isSkipped(a.ort_ceiling) || isSkipped(a.matmul_peak)) throw new Error('fixture')
    const b = structuredClone(a)
    if (isSkipped(b.ort_ceiling) || isSkipped(b.matmul_peak)) throw new Error('fixture')
    b.ort_ceiling.decode[0] = { ...b.ort_ceiling.decode[0], ms: 50, tokens_per_s: 20 }
    b.ort_ceiling.decode[1] = { ...b.ort_ceiling.decode[1], ms: 150, tokens_per_s: 1 }
    b.matmul_peak.gflops = 120
    a.ort_ceiling.runs = { before: { decode: a.ort_ceiling.decode, prefill: a.ort_ceiling.prefill } }
    b.ort_ceiling.runs = { after: { decode: b.ort_ceiling.decode, prefill: b.ort_ceiling.prefill } }
    a.matmul_peak.runs = { before: 100 }
    b.matmul_peak.runs = { after: 120 }
    const best = bestOf(a, b)
    if (isSkipped(best.ort_ceiling) || isSkipped(best.matmul_peak)) throw new Error('skipped')
    expect(best.ort_ceiling.decode.map((d) => d.ms)).toEqual([50, 100, 100, 100])
    expect(Object.keys(best.ort_ceiling.runs)).toEqual(['before', 'after'])
    expect(best.matmul_peak).toMatchObject({ gflops: 120, runs: { before: 100, after: 120 } })
  })

  it("keeps the operator profile, which only the measurement before the sweep takes", () => {
    const a = fakeReport().references
    if (isSkipped(a.ort_ceiling)) throw new Error('fixture')
    const b = structuredClone(a)
    a.ort_ceiling.ops = [{ batch: 1, ops: [{ op: 'MatMul', ms: 2 }] }]
    const best = bestOf(a, b)
    if (isSkipped(best.ort_ceiling)) throw new Error('skipped')
    expect(best.ort_ceiling.ops).toEqual([{ batch: 1, ops: [{ op: 'MatMul', ms: 2 }] }])
  })
})

describe('tables', () => {
  it('has a row per target and level, and aligns numbers right', () => {
    const t = tables(derive(fakeReport()))
    expect(t.throughput).toHaveLength(12)
    expect(t.latency[0]).toMatchObject({ target: 'onnxd', conc: 1, 'TTFT p50': '50.0' })
    const text = formatTable([{ a: 'x', n: '1.0' }, { a: 'yy', n: '10.0' }])
    expect(text.split('\n')).toEqual(['a      n', '--  ----', 'x    1.0', 'yy  10.0', ''])
  })
})

describe('chart', () => {
  it('plots every series and the references, and renders to SVG with vega', async () => {
    const r = derive(fakeReport())
    const pts = chartPoints(r, model, len)
    const series = new Set(pts.map((p) => p.series))
    expect([...series].sort()).toEqual(['ORT decode ceiling', 'matmul-peak bound', 'onnxd', 'transformers.js peer', 'unbatched node'])
    expect(pts.filter((p) => p.panel === 'ttft')).toHaveLength(12)
    const svg = await renderSvg(chartSpec(r, model, len))
    expect(svg.startsWith('<svg')).toBe(true)
    for (const s of ['Output throughput', 'Time to first token, p99', 'transformers.js peer', 'ORT decode ceiling']) expect(svg).toContain(s)
  })
})

describe('onnxd against llama.cpp', () => {
  const cs = [1, 16, 64]
  const onnxd = (dtype: string, tps: (c: number) => number) => ({ ...scenarioOf('onnxd', cs, tps, 10), target: `onnxd plain/capi${dtype === 'fp32' ? '' : `/${dtype}`}`, dtype })
  const llama = (type: string, threads: number, tps: (c: number) => number) => ({ ...scenarioOf('llama.cpp', cs, tps, 30), target: `llama.cpp ${type} t${threads}`, gguf_type: type, threads })
  const scenarios = [onnxd('fp32', (c) => 40 * c), onnxd('q4', (c) => 50 * c), onnxd('fp16', () => 5), llama('f32', 1, () => 40), llama('q4_0', 1, (c) => (c === 1 ? 100 : 10 * c)), llama('q4_0', 2, () => 1), llama('q8_0', 1, () => 70)]

  it('pairs each target with the servers on its weight form, per level, as output tok/s ratios beside TTFT and TPOT', () => {
    const rs = llamaCppRatios(scenarios)
    expect(rs.map((r) => `${r.concurrency} ${r.onnxd} ${r.llama_cpp}`)).toEqual([
      ...cs.map((c) => `${c} onnxd plain/capi llama.cpp f32 t1`),
      ...cs.map((c) => `${c} onnxd plain/capi/q4 llama.cpp q4_0 t1`),
      ...cs.map((c) => `${c} onnxd plain/capi/q4 llama.cpp q4_0 t2`),
    ])
    const at16 = rs.find((r) => r.concurrency === 16 && r.llama_cpp === 'llama.cpp q4_0 t1')!
    expect(at16).toMatchObject({ dtype: 'q4', gguf_type: 'q4_0', threads: 1 })
    expect(at16.output_throughput).toBeCloseTo(800 / 160, 6)
    expect(at16.tpot_mean_ms).toEqual({ onnxd: 10, llama_cpp: 30 })
    expect(at16.ttft_p50_ms).toEqual({ onnxd: 50, llama_cpp: 50 })
  })

  it('checks >= 1x at one stream and >= 2x at the lowest level of 16+ streams for every pair', () => {
    const tg = llamaCppTargets(llamaCppRatios(scenarios))
    const byId = Object.fromEntries(tg.map((t) => [t.id, t]))
    expect(Object.keys(byId)).toEqual([
      'llama_cpp:plain/capi:f32 t1:1',
      'llama_cpp:plain/capi:f32 t1:16+',
      'llama_cpp:plain/capi/q4:q4_0 t1:1',
      'llama_cpp:plain/capi/q4:q4_0 t1:16+',
      'llama_cpp:plain/capi/q4:q4_0 t2:1',
      'llama_cpp:plain/capi/q4:q4_0 t2:16+',
    ])
    expect(byId['llama_cpp:plain/capi:f32 t1:1']).toMatchObject({ value: 1, met: true, threshold: 1 })
    expect(byId['llama_cpp:plain/capi:f32 t1:16+']).toMatchObject({ value: 16, met: true, threshold: 2 })
    expect(byId['llama_cpp:plain/capi/q4:q4_0 t1:1']).toMatchObject({ value: 0.5, met: false })
    // The lowest of 16 (800/160 = 5) and 64 (3200/640 = 5): 5.
    expect(byId['llama_cpp:plain/capi/q4:q4_0 t1:16+'].value).toBeCloseTo(5, 6)
    const one = llamaCppTargets(llamaCppRatios([onnxd('fp32', () => 1), { ...llama('f32', 1, () => 1), levels: scenarioOf('llama.cpp', [4], () => 1).levels }]))
    expect(one).toEqual([])
    const only1 = llamaCppTargets(llamaCppRatios([onnxd('fp32', () => 1), { ...llama('f32', 1, () => 2), levels: scenarioOf('llama.cpp', [1], () => 2).levels }]))
    expect(only1.map((t) => [t.id, t.met, t.reason ?? null])).toEqual([
      ['llama_cpp:plain/capi:f32 t1:1', false, null],
      ['llama_cpp:plain/capi:f32 t1:16+', null, 'no level at >= 16 streams in both'],
    ])
  })
})
