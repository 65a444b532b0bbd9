// `onnxd bench --smoke` with several onnxd targets (graph form x step runtime x weight form, beside llama.cpp on the
// same weights) and with --scenario long, on the tiny preset: the report carries every target with the runtime its node says it serves, each level's ratios to the
// baseline and to ORT alone on the target's graph (a GroupQueryAttention graph's ceiling through the C API), and,
// when a level's cap cuts requests, a note saying so and how throughput counts them.
import { mkdtempSync, readdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { benchConfig } from '../../src/bench/options.js'
import { referenceLines } from '../../src/bench/format.js'
import { isSkipped, ortSameWork, type ScenarioResult } from '../../src/bench/report.js'
import { runBench } from '../../src/bench/run.js'
import { loadLlama } from '../../src/bench/peer/llama-cpp.js'

const llamaLoads = await loadLlama(1).then(
  async (l) => (await l.dispose(), true),
  () => false,
)

const common = ['--smoke', '--quiet', '--no-peer', '--no-unbatched', '--no-matmul', '--models-dir', join(process.cwd(), '.cache/models')]
const out = (): string[] => ['--out', mkdtempSync(join(tmpdir(), 'onnxd-bench-targets-'))]
const runs = (s: { name: string }[]): ScenarioResult[] => s.filter((x): x is ScenarioResult => x.name === 'onnxd' && !isSkipped(x as ScenarioResult))

describe('onnxd bench: several targets', () => {
  it('runs plain and gqa x js and capi, each level as ratios to the baseline and to ORT on its graph', async () => {
    const { report: r } = await runBench(benchConfig([...common, ...out(), '--attention', 'plain,gqa', '--runtime', 'js,capi', '--baseline', 'gqa/js', '--concurrency', '1,2', '--no-llama-cpp']))
    const names = ['onnxd gqa/js', 'onnxd plain/js', 'onnxd plain/capi', 'onnxd gqa/capi']
    expect(r.baseline).toBe('onnxd gqa/js')
    // The baseline first (the standard figures read it), then the others in the order asked.
    expect(runs(r.scenarios).map((s) => s.target)).toEqual(names)
    for (const s of runs(r.scenarios)) {
      // The node says which runtime serves: the one asked (no silent fallback to js).
      expect(`onnxd ${s.attention}/${s.runtime}`).toBe(s.target)
      expect(s.levels.map((l) => l.max_concurrency)).toEqual([1, 2])
      for (const l of s.levels) expect(l).toMatchObject({ failed: 0, cut: 0 })
    }
    // One after another at each level, the order reversed from one level to the next.
    const asked = ['onnxd plain/js', 'onnxd plain/capi', 'onnxd gqa/js', 'onnxd gqa/capi']
    expect(r.run_order).toEqual([
      { concurrency: 1, targets: asked },
      { concurrency: 2, targets: [...asked].reverse() },
    ])
    expect(r.target_ratios.map((t) => t.concurrency)).toEqual([1, 2])
    for (const t of r.target_ratios) {
      expect(Object.keys(t.output_throughput).sort()).toEqual([...names].sort())
      expect(t.vs_baseline['onnxd gqa/js']).toBe(1)
      for (const n of names) {
        const s = runs(r.scenarios).find((x) => x.target === n)!
        const l = s.levels.find((x) => x.max_concurrency === t.concurrency)!
        const base = runs(r.scenarios)[0].levels.find((x) => x.max_concurrency === t.concurrency)!
        expect(t.vs_baseline[n]).toBeCloseTo(l.output_throughput / base.output_throughput, 9)
        expect(t.vs_ort_same_work[n]).toBeGreaterThan(0)
      }
    }
    const forms = r.references.ort_ceiling_by_form!
    expect(Object.keys(forms).sort()).toEqual(['gqa', 'plain'])
    for (const f of Object.values(forms)) if (isSkipped(f)) throw new Error(`ceiling skipped: ${f.reason}`)
    expect(forms.gqa).toMatchObject({ api: expect.stringMatching(/C API, presents bound onto the past/) })
    expect(forms.plain).toMatchObject({ api: expect.stringMatching(/onnxruntime-node/) })
    // Both forms' ORT step by operator, each through its ceiling's API: the plain graph's attention is plain MatMuls.
    for (const [f, attention] of [['gqa', 'GroupQueryAttention'], ['plain', 'Softmax']] as const) {
      const c = forms[f]
      if (isSkipped(c)) throw new Error('skipped')
      expect(c.ops?.map((d) => d.batch), f).toEqual([1, 2])
      for (const d of c.ops!) expect(d.ops.map((o) => o.op), f).toEqual(expect.arrayContaining([attention, 'MatMul']))
    }
    // The standard figures are the baseline's: its form's ceiling.
    expect(r.references.ort_ceiling).toEqual(forms.gqa)
    expect(r.notes).toEqual([])
  }, 90_000)

  it('--dtype fp32,q4 holds each target against ORT alone running its own file: a q4 target against the q4 ceiling', async () => {
    const { report: r } = await runBench(benchConfig([...common, ...out(), '--attention', 'gqa', '--runtime', 'capi', '--dtype', 'fp32,q4', '--concurrency', '1,2', '--no-llama-cpp']))
    expect(runs(r.scenarios).map((s) => [s.target, s.dtype])).toEqual([
      ['onnxd gqa/capi', 'fp32'],
      ['onnxd gqa/capi/q4', 'q4'],
    ])
    const forms = r.references.ort_ceiling_by_form!
    expect(Object.keys(forms).sort()).toEqual(['gqa', 'gqa/q4'])
    const [fp32, q4] = [forms.gqa, forms['gqa/q4']]
    if (isSkipped(fp32) || isSkipped(q4)) throw new Error('a ceiling was skipped')
    expect([fp32.file, q4.file]).toEqual(['model.onnx', 'model_q4.onnx'])
    // The standard figures are the baseline's (float32) ceiling's.
    expect(r.references.ort_ceiling).toEqual(fp32)
    const len = { prompt: Number(r.config.prompt_len), output: Number(r.config.output_len) }
    // Each level against ORT alone timed beside it on the target's own file.
    for (const t of r.target_ratios) {
      const l = (name: string) => runs(r.scenarios).find((s) => s.target === name)!.levels.find((x) => x.max_concurrency === t.concurrency)!
      expect([l('onnxd gqa/capi').ort_beside?.file, l('onnxd gqa/capi/q4').ort_beside?.file]).toEqual(['model.onnx', 'model_q4.onnx'])
      expect(t.vs_ort_same_work['onnxd gqa/capi']).toBeCloseTo(l('onnxd gqa/capi').output_throughput / ortSameWork(null, t.concurrency, len, l('onnxd gqa/capi'))!, 9)
      expect(t.vs_ort_same_work['onnxd gqa/capi/q4']).toBeCloseTo(l('onnxd gqa/capi/q4').output_throughput / ortSameWork(null, t.concurrency, len, l('onnxd gqa/capi/q4'))!, 9)
    }
    expect(referenceLines(r).filter((x) => x.startsWith('ORT decode ceiling')).map((x) => x.split(':')[0])).toEqual([
      'ORT decode ceiling (gqa graph) (model.onnx, ORT\'s C API, presents bound onto the past, one decode step, past 24)',
      'ORT decode ceiling (gqa/q4 graph) (model_q4.onnx, ORT\'s C API, presents bound onto the past, one decode step, past 24)',
    ])
    // Where ORT's own step goes, by operator, at each level's batch: attention in both files, and each file's own
    // matrix products (float MatMul, 4-bit MatMulNBits), from ORT's profiler; its trace file is gone.
    for (const [c, product] of [[fp32, 'MatMul'], [q4, 'MatMulNBits']] as const) {
      expect(c.ops?.map((d) => d.batch)).toEqual([1, 2])
      for (const d of c.ops!) {
        expect(d.ops.map((o) => o.op)).toEqual(expect.arrayContaining(['GroupQueryAttention', product]))
        expect(d.ops.every((o) => o.ms > 0)).toBe(true)
        expect(d.ops.map((o) => o.ms)).toEqual([...d.ops.map((o) => o.ms)].sort((x, y) => y - x))
      }
    }
    expect(readdirSync(tmpdir()).filter((f) => f.startsWith(`onnxd-ort-profile-${process.pid}`))).toEqual([])
    expect(referenceLines(r).filter((x) => x.startsWith('ORT decode step')).map((x) => x.split(':')[0])).toEqual([
      "ORT decode step (gqa graph) at B=1 by operator (ORT's profiler)",
      "ORT decode step (gqa graph) at B=2 by operator (ORT's profiler)",
      "ORT decode step (gqa/q4 graph) at B=1 by operator (ORT's profiler)",
      "ORT decode step (gqa/q4 graph) at B=2 by operator (ORT's profiler)",
    ])
  }, 90_000)

  it('--scenario long: gqa/js and gqa/capi, one wave per level, a capped level cut with a note', async () => {
    // Outputs far longer than the cap lets the tiny model stream: every level is cut.
    const { report: r } = await runBench(benchConfig([...common, ...out(), '--scenario', 'long', '--output-len', '1900', '--duration', '0.4']))
    expect(r.scenario).toBe('long')
    expect(r.config).toMatchObject({ prompt_len: '64', output_len: '1900', concurrency: [1, 4], duration_s: 0.4, num_requests: 'concurrency (one wave)' })
    expect(runs(r.scenarios).map((s) => s.target)).toEqual(['onnxd gqa/js', 'onnxd gqa/capi'])
    expect(r.baseline).toBe('onnxd gqa/js')
    expect(r.scenarios.filter((s) => s.name !== 'onnxd').every((s) => isSkipped(s as ScenarioResult))).toBe(true)
    for (const s of runs(r.scenarios))
      for (const l of s.levels) {
        expect(l.completed + l.failed + l.cut).toBe(l.max_concurrency)
        expect(l.cut).toBeGreaterThan(0)
        // Throughput counts what the cut requests streamed.
        expect(l.cut_output_tokens).toBeGreaterThan(0)
        expect(l.output_throughput).toBeCloseTo((l.total_output_tokens + l.cut_output_tokens) / l.duration, 6)
        expect(r.notes.some((n) => n.startsWith(`${s.target} c=${l.max_concurrency}: cut at the 0.4 s cap`))).toBe(true)
      }
    expect(r.notes).toContain('output throughput = output tokens received / elapsed, counting the streamed tokens of requests a cap cut')
    expect(r.target_ratios.map((t) => Object.keys(t.vs_baseline))).toEqual([['onnxd gqa/js', 'onnxd gqa/capi'], ['onnxd gqa/js', 'onnxd gqa/capi']])
    expect(isSkipped(r.references.ort_ceiling) ? r.references.ort_ceiling.reason : r.references.ort_ceiling.api).toMatch(/C API/)
  }, 90_000)

  it('--scenario chat: prompts on one shared system prompt, the node with prefix caching against the node without, beside llama.cpp with its prompt cache', async () => {
    const { report: r } = await runBench(benchConfig([...common, ...out(), '--scenario', 'chat']))
    expect(r.scenario).toBe('chat')
    expect(r.config).toMatchObject({ shared_prefix_len: 64, prompt_len: '8', concurrency: [1, 4] })
    expect(runs(r.scenarios).map((s) => s.target).sort()).toEqual(['onnxd gqa/capi', 'onnxd gqa/capi/no-prefix-cache'])
    const on = runs(r.scenarios).find((s) => s.target === 'onnxd gqa/capi')!
    const off = runs(r.scenarios).find((s) => s.target === 'onnxd gqa/capi/no-prefix-cache')!
    expect([on.prefix_caching, off.prefix_caching]).toEqual([true, false])
    expect(r.baseline).toBe('onnxd gqa/capi/no-prefix-cache')
    for (const l of on.levels) {
      expect(l.completed).toBeGreaterThan(0)
      // Every request after the first few finds the shared prompt's whole blocks (64 tokens) in the cache.
      expect(l.cached_input_tokens).toBeGreaterThanOrEqual((l.completed - 1) * 64)
      expect(l.cached_input_tokens).toBeLessThan(l.total_input_tokens)
    }
    for (const l of off.levels) expect(l.cached_input_tokens).toBe(0)
    for (const t of r.target_ratios) expect(Object.keys(t.vs_baseline).sort()).toEqual(['onnxd gqa/capi', 'onnxd gqa/capi/no-prefix-cache'])
    expect(isSkipped(r.references.ort_ceiling) && r.references.ort_ceiling.reason).toMatch(/not part of --scenario chat/)
    // llama.cpp on the F32 GGUF runs in the same rotation with llama-server's per-slot prompt cache: a request on a
    // sequence that served the shared prompt before evaluates only its own tokens, and its ratio is taken against
    // the node with prefix caching on only.
    const llama = r.scenarios.find((s): s is ScenarioResult => s.name === 'llama.cpp' && !isSkipped(s as ScenarioResult))
    if (!llamaLoads) return
    expect(llama).toMatchObject({ target: 'llama.cpp f32 t1', prompt_cache: true })
    expect(r.run_order[0].targets).toContain('llama.cpp f32 t1')
    for (const l of llama!.levels) {
      expect(l).toMatchObject({ failed: 0, cut: 0 })
      expect(l.cached_input_tokens).toBeGreaterThanOrEqual(64)
      expect(l.cached_input_tokens).toBeLessThan(l.total_input_tokens)
    }
    expect(r.llama_cpp_ratios.map((p) => `${p.concurrency} ${p.onnxd} ${p.llama_cpp} ${p.prompt_cache}`)).toEqual(['1 onnxd gqa/capi llama.cpp f32 t1 true', '4 onnxd gqa/capi llama.cpp f32 t1 true'])
    for (const p of r.llama_cpp_ratios) expect(p.prompt_cached!.llama_cpp).toBeGreaterThan(0)
  }, 120_000)

  it.skipIf(!llamaLoads)('--dtype fp32,q4 runs llama.cpp on F32 and Q4_0 GGUF of the same weights in the rotation, each pair as ratios', async () => {
    const { report: r } = await runBench(benchConfig([...common, ...out(), '--runtime', 'capi', '--dtype', 'fp32,q4', '--concurrency', '1,2', '--no-ceiling']))
    const llama = r.scenarios.filter((s): s is ScenarioResult => s.name === 'llama.cpp' && !isSkipped(s as ScenarioResult))
    expect(llama.map((s) => [s.target, s.gguf_type, s.threads])).toEqual([
      ['llama.cpp f32 t1', 'f32', 1],
      ['llama.cpp q4_0 t1', 'q4_0', 1],
    ])
    expect(runs(r.scenarios).map((s) => [s.target, s.dtype])).toEqual([
      ['onnxd gqa/capi', 'fp32'],
      ['onnxd gqa/capi/q4', 'q4'],
    ])
    for (const s of [...llama, ...runs(r.scenarios)]) {
      expect(s.levels.map((l) => l.max_concurrency)).toEqual([1, 2])
      // Every request streamed the whole output: the same work on both sides.
      for (const l of s.levels) expect(l).toMatchObject({ failed: 0, cut: 0, total_output_tokens: l.completed * 16 })
    }
    // One rotation: the llama.cpp servers take turns with the onnxd targets, reversed from level to level.
    const asked = ['onnxd gqa/capi', 'onnxd gqa/capi/q4', 'llama.cpp f32 t1', 'llama.cpp q4_0 t1']
    expect(r.run_order).toEqual([
      { concurrency: 1, targets: asked },
      { concurrency: 2, targets: [...asked].reverse() },
    ])
    expect(r.llama_cpp_ratios.map((p) => `${p.concurrency} ${p.onnxd} ${p.llama_cpp}`)).toEqual(['1 onnxd gqa/capi llama.cpp f32 t1', '2 onnxd gqa/capi llama.cpp f32 t1', '1 onnxd gqa/capi/q4 llama.cpp q4_0 t1', '2 onnxd gqa/capi/q4 llama.cpp q4_0 t1'])
    for (const p of r.llama_cpp_ratios) expect(p.output_throughput).toBeCloseTo(p.onnxd_output_throughput / p.llama_cpp_output_throughput, 9)
    expect(r.targets.filter((t) => t.id.startsWith('llama_cpp:')).map((t) => t.id)).toEqual([
      'llama_cpp:gqa/capi:f32 t1:1',
      'llama_cpp:gqa/capi:f32 t1:16+',
      'llama_cpp:gqa/capi/q4:q4_0 t1:1',
      'llama_cpp:gqa/capi/q4:q4_0 t1:16+',
    ])
  }, 120_000)
})
