// One `onnxd bench` run: builds or resolves the bundles (one per graph form the targets serve), measures the ORT
// references on each form, drives the onnxd targets (form x runtime x weights) and the llama.cpp servers level by level
// in one rotation, then the unbatched node and the transformers.js peer through the same levels, and builds the
// report, the chart and the printed tables.
// Imports: every bench module; the builder (to build presets).
import { loadavg } from 'node:os'
import { writeFileSync } from 'node:fs'
import { basename, join } from 'node:path'
import type { Agent } from 'undici'
import { DEFAULT_BATCHER, readBundle } from '../engine/bench-surface.js'
import { existsSync } from 'node:fs'
import { BUILDER_VERSION, configJson, presetOf, type Attention } from '../builder/index.js'
import { ensureBundle, ensureGguf } from './bundles.js'
import { chartRenderer, chartSpec } from './chart.js'
import { createAgent, getJson, type Endpoint, type Sampling } from './client.js'
import { engineTime, scrapeStepTotals } from './engine-metrics.js'
import { runLevel } from './loadgen.js'
import { levelFigures } from './metrics.js'
import { flopsPerToken, readModelInfo, type ModelInfo } from './model-info.js'
import { describeConfig, requestsFor, servedFile, type BenchConfig, type LlamaSpec, type TargetDtype, type TargetSpec } from './options.js'
import { Progress } from './progress.js'
import { measureCapiCeiling, profileCapiDecode, usesGroupQueryAttention } from './refs/capi.js'
import { measureCeiling, measureMatmulPeak, profileDecode, type DecodeCeiling, type PrefillTiming } from './refs/ort.js'
import type { DecodeOps } from './refs/profile.js'
import {
  REPORT_KIND,
  REPORT_SCHEMA,
  efficiency,
  summaryLines,
  hostDrift,
  isSkipped,
  targetRatios,
  targets,
  writeJson,
  type BenchReport,
  type CeilingReference,
  type Lengths,
  type LevelResult,
  type OrtTiming,
  type ScenarioName,
  type ScenarioResult,
  type Skipped,
  bestOf,
  llamaCppRatios,
  llamaCppTargets,
  ceilingKey,
} from './report.js'
import { packageVersion, stamp, systemInfo } from './system.js'
import { freePort, spawnTarget, type Child } from './targets/spawn.js'
import { makeWorkload, maxLength, meanLength, type PromptForm, type WorkloadSpec } from './workload.js'

export interface BenchResult {
  report: BenchReport
  jsonPath: string
  chartPath: string | null
}

const skipped = (reason: string): Skipped => ({ skipped: true, reason })

/** A bundle the run serves: its directory and graph form (null: a remote target without --model). */
interface Bundle {
  dir: string | null
  form: Attention | null
  model: ModelInfo | null
}

/** The bundles the run uses, by graph form: built from the preset in each form the targets ask, or the one given. */
async function bundles(cfg: BenchConfig, log: Progress): Promise<{ byForm: Map<Attention | null, Bundle>; preset: string | null }> {
  const t = cfg.target
  const byForm = new Map<Attention | null, Bundle>()
  if (t.kind === 'spawn' && t.preset) {
    const shape = configJson(presetOf(t.preset), { preset: t.preset, seed: 0 })
    const forms = [...new Set(cfg.targets.map((x) => x.attention))]
    for (const form of forms) {
      const variants = [...new Set(cfg.targets.flatMap((x) => {
        const { dtype } = servedFile(x.dtype)
        return x.attention === form && dtype !== 'fp32' ? [dtype] : []
      }))]
      const dir = await ensureBundle(cfg.modelsDir, t.preset, form, (s) => log.step(s), variants)
      log.step(`model: preset ${t.preset} (${form} attention) in ${dir}`)
      byForm.set(form, { dir, form, model: readModelInfo(dir, shape) })
    }
    return { byForm, preset: t.preset }
  }
  const dir = t.model
  const form: Attention | null = dir ? (existsSync(join(dir, 'genai_config.json')) && !existsSync(join(dir, 'config.json')) ? 'gqa' : 'plain') : null
  byForm.set(null, { dir, form, model: dir ? readModelInfo(dir) : null })
  return { byForm, preset: null }
}

interface Driven {
  ep: Endpoint
  /** The execution provider and step runtime the target reports in /health (null when it does not say). */
  provider: string | null
  runtime: string | null
  /** Seconds the bench waited for a target it started to be ready (null for one reached at a URL). */
  readyS: number | null
  stop(): Promise<void>
}

/** A llama.cpp server to start: its settings and the GGUF file it serves. */
interface LlamaRun {
  spec: LlamaSpec
  gguf: string
}

/** Tokens one request of the workload can hold (prompt and output), for llama.cpp's per-sequence context. */
const contextPerRequest = (cfg: BenchConfig): number => (cfg.prompts ? 4096 : cfg.sharedPrefixLen + maxLength(cfg.promptLen) + maxLength(cfg.outputLen) + 16)

/**
 * The flags of a node the bench starts on `dir`: the target's runtime, weights and prefix caching. The unbatched
 * reference is the baseline target's node (`spec`) with at most one sequence running, so that `vs_unbatched` compares
 * batching alone.
 */
export function nodeArgs(cfg: Pick<BenchConfig, 'provider' | 'nodeArgs'>, dir: string, port: number, spec: TargetSpec | null, unbatched: boolean): string[] {
  const args = ['--model', dir, '--port', String(port), '--host', '127.0.0.1', '--log-level', 'warn', ...(spec ? ['--runtime', spec.runtime] : []), ...(cfg.provider === 'cpu' ? [] : ['--provider', cfg.provider]), ...cfg.nodeArgs]
  if (spec && !spec.prefixCaching) args.push('--no-prefix-caching')
  const served = spec && servedFile(spec.dtype)
  if (served && served.dtype !== 'fp32') args.push('--dtype', served.dtype)
  if (served?.nbitsAsInt8) args.push('--nbits-as-int8')
  if (unbatched) args.push('--max-running', '1')
  return args
}

/** Starts (or reaches) one target and learns the model id it serves. */
async function reach(kind: ScenarioName, cfg: BenchConfig, dir: string | null, agent: Agent, spec: TargetSpec | null, llama: LlamaRun | null = null): Promise<Driven> {
  let child: Child | null = null
  let url: string
  const t = cfg.target
  if (kind === 'llama.cpp' && llama) {
    const port = await freePort()
    const args = ['--model', llama.gguf, '--port', String(port), '--threads', String(llama.spec.threads), '--sequences', String(Math.max(...cfg.concurrency)), '--context-per-sequence', String(contextPerRequest(cfg)), '--gpu', llama.spec.gpu, ...(llama.spec.promptCache ? [] : ['--no-prompt-cache'])]
    child = await spawnTarget({ entry: '../peer/llama-cpp', args, what: `the ${llama.spec.name} server`, readyTimeoutS: cfg.readyTimeoutS, agent, port })
    url = child.url
  } else if (kind === 'peer') {
    const port = await freePort()
    child = await spawnTarget({ entry: '../peer/server', args: ['--model', dir!, '--port', String(port)], what: 'the transformers.js peer', readyTimeoutS: cfg.readyTimeoutS, agent, port })
    url = child.url
  } else if (t.kind === 'spawn' || kind === 'unbatched') {
    const port = await freePort()
    const args = nodeArgs(cfg, dir!, port, spec, kind === 'unbatched')
    child = await spawnTarget({ entry: './node-main', args, what: kind === 'unbatched' ? 'the unbatched node' : 'the onnxd node', readyTimeoutS: cfg.readyTimeoutS, agent, port })
    url = child.url
  } else url = t.url
  const protocol = t.kind === 'facade' && kind === 'onnxd' ? 'openai' : 'node'
  const apiKey = t.kind === 'facade' && kind === 'onnxd' ? t.apiKey : undefined
  let model = cfg.servedModel
  const health = protocol === 'node' ? ((await getJson(agent, `${url}/health`))?.body as { models?: string[]; provider?: string; runtime?: string } | undefined) : undefined
  model ??= health?.models?.[0] ?? null
  if (!model && protocol === 'openai') {
    const m = await getJson(agent, `${url}/v1/models`, { authorization: `Bearer ${apiKey}` })
    model = ((m?.body as { data?: { id: string }[] } | undefined)?.data ?? [])[0]?.id ?? null
  }
  if (!model) {
    await child?.stop()
    throw new Error(`${url}: cannot tell which model it serves; pass --served-model`)
  }
  return { ep: { url, protocol, model, ...(apiKey ? { apiKey } : {}) }, provider: health?.provider ?? null, runtime: health?.runtime ?? null, readyS: child?.readyS ?? null, stop: async () => void (await child?.stop()) }
}

const LABELS: Record<ScenarioName, string> = {
  onnxd: 'onnxd',
  unbatched: 'onnxd node, unbatched (max running 1)',
  peer: 'transformers.js pipeline behind node:http, one request at a time',
  'llama.cpp': 'llama.cpp (node-llama-cpp) behind node:http, one sequence per stream, stepped together',
}

/** One target, started (and warmed up), ready to run levels. */
interface Running {
  kind: ScenarioName
  d: Driven
  agent: Agent
  out: ScenarioResult
}

interface Load {
  cfg: BenchConfig
  form: PromptForm
  log: Progress
  /** The workload's mean lengths, and the past the ORT references time their decode steps over. */
  len: Lengths
  past: number
}

/** Starts one target and sends it its untimed warm-up requests. */
async function start(
  kind: ScenarioName,
  x: Load,
  b: Pick<Bundle, 'dir' | 'form'>,
  spec: TargetSpec | null,
  levels: number[],
  llama: LlamaRun | null = null,
  /** What the node it starts serves, when not a target's own (the unbatched reference: the baseline's). */
  serves: TargetSpec | null = spec,
): Promise<Running> {
  const dir = b.dir
  const { cfg, form, log } = x
  const agent = createAgent(Math.max(...levels, cfg.warmup))
  const name = spec?.name ?? llama?.spec.name ?? kind
  log.step(`${name}: starting`)
  let d: Driven
  try {
    d = await reach(kind, cfg, dir, agent, serves, llama)
  } catch (e) {
    await agent.close()
    throw e
  }
  try {
    if (spec && d.runtime && d.runtime !== spec.runtime) log.step(`warning: ${name} asked for runtime ${spec.runtime}, the node serves with ${d.runtime}`)
    if (cfg.warmup > 0) {
      const warm = makeWorkload({ ...workloadSpec(cfg), seed: cfg.seed + 7919 }, form, cfg.warmup)
      await runLevel(agent, d.ep, warm, sampling(cfg), { concurrency: cfg.warmup, requestRate: Infinity, deadlineS: null, seed: cfg.seed }, {}, `${kind}-warmup`)
    }
  } catch (e) {
    await d.stop()
    await agent.close()
    throw e
  }
  const serving = (t: TargetSpec): string => `${t.attention} attention, runtime ${t.runtime}, ${t.dtype} weights${t.prefixCaching ? '' : ', prefix caching off'}`
  const label =
    kind === 'onnxd'
      ? `onnxd ${d.ep.protocol === 'openai' ? 'facade' : 'node'} (${cfg.target.kind === 'spawn' ? `started by the bench${spec ? `: ${serving(spec)}` : ''}` : d.ep.url})`
      : kind === 'unbatched' && serves
        ? `${LABELS[kind]}: the baseline's node (${serving(serves)})`
        : llama
        ? `${LABELS[kind]}: ${llama.spec.type.toUpperCase()} GGUF of the same weights, ${llama.spec.threads} thread${llama.spec.threads > 1 ? 's' : ''}${llama.spec.gpu === 'none' ? '' : `, ${llama.spec.gpu} build, every layer on the GPU`}, prompt cache ${llama.spec.promptCache ? 'on' : 'off'}`
        : LABELS[kind]
  const deadline = kind === 'onnxd' || kind === 'llama.cpp' ? cfg.durationS : cfg.refDurationS
  const out: ScenarioResult = {
    name: kind,
    target: name,
    ...(serves ? { attention: b.form ?? serves.attention, runtime: d.runtime ?? serves.runtime, dtype: serves.dtype, prefix_caching: serves.prefixCaching } : {}),
    ...(llama ? { gguf_type: llama.spec.type, threads: llama.spec.threads, prompt_cache: llama.spec.promptCache } : {}),
    label,
    url: d.ep.url,
    provider: d.provider,
    ready_s: d.readyS,
    deadline_s: deadline,
    levels: [],
  }
  return { kind, d, agent, out }
}

/** The llama.cpp servers to start, each with its GGUF file written (from the preset's weights, or the --model bundle's);
 * the ones that cannot be, and why (also when the run has none: --no-llama-cpp, another scenario). */
async function llamaRuns(cfg: BenchConfig, preset: string | null, dir: string | null, log: Progress): Promise<{ llamas: LlamaRun[]; notWritten: BenchReport['scenarios'] }> {
  const off = (reason: string, target?: string): BenchReport['scenarios'][number] => ({ name: 'llama.cpp', ...(target ? { target } : {}), label: LABELS['llama.cpp'], ...skipped(reason) })
  if (cfg.llamaCppOff) return { llamas: [], notWritten: [off(cfg.llamaCppOff)] }
  const from = preset ? { preset } : dir ? { dir } : null
  const llamas: LlamaRun[] = []
  const notWritten: BenchReport['scenarios'] = []
  const files = new Map<string, string | Error>()
  for (const spec of cfg.llamaCpp) {
    if (!files.has(spec.type)) {
      try {
        files.set(spec.type, from ? await ensureGguf(cfg.modelsDir, from, spec.type, (s) => log.step(s)) : new Error('no local model bundle: pass --model DIR'))
      } catch (e) {
        files.set(spec.type, e as Error)
      }
    }
    const f = files.get(spec.type)!
    if (typeof f === 'string') llamas.push({ spec, gguf: f })
    else notWritten.push(off(`no GGUF: ${f.message}`, spec.name))
  }
  return { llamas, notWritten }
}

const workloadSpec = (cfg: BenchConfig): WorkloadSpec => ({
  promptLen: cfg.promptLen,
  outputLen: cfg.outputLen,
  file: cfg.prompts ?? undefined,
  seed: cfg.seed,
  sharedPrefixLen: cfg.sharedPrefixLen,
})
const sampling = (cfg: BenchConfig): Sampling => ({ temperature: cfg.temperature, ignoreEos: cfg.ignoreEos })

/** Runs one level on a started target and records its figures. */
async function level(r: Running, c: number, x: Load): Promise<void> {
  const { cfg, form, log } = x
  const { d, agent, out } = r
  const items = makeWorkload(workloadSpec(cfg), form, requestsFor(cfg, c))
  const bar = log.level(`${out.target} c=${c}`, items.length, out.deadline_s)
  const before = d.ep.protocol === 'node' ? await scrapeStepTotals(agent, d.ep.url) : null
  const run = await runLevel(agent, d.ep, items, sampling(cfg), { concurrency: c, requestRate: cfg.requestRate, deadlineS: out.deadline_s, seed: cfg.seed }, bar, `${r.kind}-c${c}`)
  const after = before ? await scrapeStepTotals(agent, d.ep.url) : null
  const fig: LevelResult = levelFigures(run.records, run.durationS, c, cfg.requestRate)
  if (before && after) fig.engine = engineTime(before, after, run.durationS)
  bar.done(`${fig.completed} ok, ${fig.failed} failed, ${fig.cut} cut in ${fig.duration.toFixed(1)} s; ${fig.output_throughput.toFixed(1)} out tok/s; TTFT p99 ${fig.p99_ttft_ms.toFixed(0)} ms; TPOT mean ${fig.mean_tpot_ms.toFixed(1)} ms`)
  out.levels.push(fig)
}

async function stopAll(rs: Running[]): Promise<void> {
  for (const r of rs) {
    await r.d.stop()
    await r.agent.close()
  }
}

/** Drives one reference target (the unbatched node, serving as `serves`; the peer) through its levels. */
async function drive(kind: ScenarioName, x: Load, dir: string | null, serves: TargetSpec | null): Promise<ScenarioResult> {
  const levels = kind === 'peer' ? x.cfg.peerConcurrency : x.cfg.concurrency
  const r = await start(kind, x, { dir, form: null }, null, levels, null, serves)
  try {
    for (const c of [...levels].sort((a, b) => a - b)) await level(r, c, x)
    return r.out
  } finally {
    await stopAll([r])
  }
}

/**
 * Drives the onnxd targets and the llama.cpp servers: all started up front (idle ones only hold memory; llama.cpp's
 * threads sleep while it has no work), then at each level one after another, never together, in alternating order
 * from level to level so that none always runs first on a host whose speed drifts. A llama.cpp server that cannot
 * start is reported skipped with the reason; the rest run.
 */
async function driveTargets(
  x: Load,
  bundleOf: (spec: TargetSpec | null) => Bundle,
  llamas: LlamaRun[],
): Promise<{ runs: ScenarioResult[]; skipped: BenchReport['scenarios']; order: BenchReport['run_order'] }> {
  const specs: (TargetSpec | null)[] = x.cfg.targets.length ? x.cfg.targets : [null]
  const running: Running[] = []
  const order: BenchReport['run_order'] = []
  const notStarted: BenchReport['scenarios'] = []
  try {
    // How ORT alone runs each onnxd target's file, resolved once per target (it reads the file's head).
    const ortOf = new Map<Running, OrtFile>()
    for (const spec of specs) {
      const b = bundleOf(spec)
      const r = await start('onnxd', x, b, spec, x.cfg.concurrency)
      running.push(r)
      const f = besideFile(x, b, spec)
      if (f) ortOf.set(r, f)
    }
    for (const l of llamas) {
      try {
        running.push(await start('llama.cpp', x, { dir: null, form: null }, null, x.cfg.concurrency, l))
      } catch (e) {
        const reason = `failed to start: ${(e as Error).message.split('\n').slice(0, 6).join(' | ')}`
        x.log.step(`${l.spec.name}: skipped: ${reason}`)
        notStarted.push({ name: 'llama.cpp', target: l.spec.name, label: LABELS['llama.cpp'], ...skipped(reason) })
      }
    }
    const levels = [...x.cfg.concurrency].sort((a, b) => a - b)
    for (let i = 0; i < levels.length; i++) {
      const now = i % 2 === 0 ? running : [...running].reverse()
      order.push({ concurrency: levels[i], targets: now.map((r) => r.out.target ?? r.kind) })
      for (const r of now) {
        const f = ortOf.get(r)
        if (f) await besideLevel(x, f, levels[i], r, () => level(r, levels[i], x))
        else await level(r, levels[i], x)
      }
    }
    return { runs: running.map((r) => r.out), skipped: notStarted, order }
  } finally {
    await stopAll(running)
  }
}

/** Mean prompt and output lengths of the workload (the references are timed at these). */
function lengths(cfg: BenchConfig, form: PromptForm): Lengths {
  if (!cfg.prompts) return { prompt: cfg.sharedPrefixLen + Math.round(meanLength(cfg.promptLen)), output: Math.round(meanLength(cfg.outputLen)) }
  const items = makeWorkload({ promptLen: cfg.promptLen, outputLen: cfg.outputLen, file: cfg.prompts, seed: cfg.seed }, form, 64)
  const words = (s: string): number => s.split(/\s+/).filter(Boolean).length
  const p = items.map((i) => ('input_ids' in i.input ? i.input.input_ids.length : 'prompt' in i.input ? words(i.input.prompt) : i.input.messages.reduce((a, m) => a + words(m.content), 0)))
  return { prompt: Math.round(p.reduce((a, b) => a + b, 0) / p.length), output: Math.round(items.reduce((a, i) => a + i.maxTokens, 0) / items.length) }
}

type References = BenchReport['references']

/** Why the ORT references are not measured in this run, or null when they are. */
const ceilingOff = (cfg: BenchConfig): string | null =>
  cfg.references.ceiling ? null : cfg.scenario === 'chat' ? 'not part of --scenario chat (ORT alone shares no cache between requests)' : 'disabled by --no-ceiling'

/** How ORT alone runs one weight dtype's file of a bundle: the file the node serves for it (found by the engine's own
 * rule), through the C API with presents bound onto the past on cpu and webgpu for a GroupQueryAttention graph (the
 * cache on the device on webgpu), else through onnxruntime-node's session.run. */
interface OrtFile {
  onnxPath: string
  /** Its 4-bit weights on int8 kernels, as the target's node runs them (--nbits-as-int8). */
  nbitsAsInt8: boolean
  capi: boolean
  api: string
}

function ortFile(cfg: BenchConfig, model: ModelInfo, form: TargetDtype): OrtFile {
  const { dtype, nbitsAsInt8 } = servedFile(form)
  const onnxPath = dtype === 'fp32' ? model.onnxPath : readBundle(model.dir, { dtype }).onnxPath
  const capi = (cfg.provider === 'cpu' || cfg.provider === 'webgpu') && usesGroupQueryAttention(onnxPath)
  const api = capi ? `ORT's C API, presents bound onto the past${cfg.provider === 'webgpu' ? ' in device memory, on webgpu' : ''}` : `onnxruntime-node session.run${cfg.provider === 'cpu' ? '' : ` on ${cfg.provider}`}`
  return { onnxPath, nbitsAsInt8, capi, api: nbitsAsInt8 ? `${api}, 4-bit weights as int8` : api }
}

/** ORT alone's decode steps at `batches` over `past` and one prefill, on `f`, timed as refs/ time them: prefill as the
 * engine runs it, as many prompts per run as its default token budget holds. */
function ortTimer(cfg: BenchConfig, f: OrtFile, len: Lengths, past: number, batches: number[], log: Progress) {
  const prefillRows = Math.max(1, Math.min(Math.max(...cfg.concurrency), Math.floor(DEFAULT_BATCHER.maxBatchedTokens / len.prompt)))
  const o = { onnxPath: f.onnxPath, nbitsAsInt8: f.nbitsAsInt8, batches, past, prompt: len.prompt, prefillRows, threads: cfg.threads, provider: cfg.provider, greedy: cfg.temperature === 0, budget: cfg.refBudget, onStep: (s: string) => log.step(`  ${s}`) }
  return {
    o,
    measure: async (spread?: number): Promise<{ decode: DecodeCeiling[]; prefill: PrefillTiming; spread: DecodeCeiling[] }> =>
      f.capi ? measureCapiCeiling({ ...o, spread }) : { ...(await measureCeiling(o)), spread: [] },
  }
}

/** The file ORT alone runs beside an onnxd target's levels; none when the references are off or the bundle is not
 * local, or when it cannot be read (logged). */
function besideFile(x: Load, b: Bundle, spec: TargetSpec | null): OrtFile | null {
  if (ceilingOff(x.cfg) || !b.model) return null
  try {
    return ortFile(x.cfg, b.model, spec?.dtype ?? 'fp32')
  } catch (e) {
    x.log.step(`warning: no ORT alone beside ${spec?.name ?? 'the target'}'s levels: ${(e as Error).message}`)
    return null
  }
}

/**
 * One level of an onnxd target between two timings of ORT alone doing its work on the target's file, at the level's
 * batch, while the target's node sits idle: the level's ratio to ORT then holds the host's speed of that minute, not
 * the ceiling's (report.ts OrtBeside). A timing that fails is logged and left out.
 */
async function besideLevel(x: Load, f: OrtFile, c: number, r: Running, run: () => Promise<void>): Promise<void> {
  const { o, measure } = ortTimer(x.cfg, f, x.len, x.past, [c], x.log)
  const time = async (when: 'before' | 'after'): Promise<OrtTiming | undefined> => {
    x.log.step(`ORT alone on ${basename(f.onnxPath)} ${when} this level (${f.api}): a decode step at batch ${c} over a past of ${x.past}, prefill of ${o.prefillRows} x ${x.len.prompt}`)
    try {
      // A GroupQueryAttention graph's step also over rows of lengths spread as the level's rows are (its output
      // length wide): ORT's attention over rows of unequal lengths costs more than over rows all at the mean.
      const t = await measure(x.len.output)
      const spread = t.spread[0]
      return { decode: t.decode[0], prefill: t.prefill, ...(spread ? { decode_spread: spread } : {}) }
    } catch (e) {
      x.log.step(`warning: ORT alone ${when} the level at ${c} failed: ${(e as Error).message}`)
      return undefined
    }
  }
  const before = await time('before')
  await run()
  const after = await time('after')
  const l = r.out.levels.at(-1)
  if (l && (before || after)) l.ort_beside = { file: basename(f.onnxPath), ...(before ? { before } : {}), ...(after ? { after } : {}) }
}

/** The ORT decode ceiling of one bundle over one weight dtype's file: through the C API with presents on the past
 * for a GroupQueryAttention graph (refs/capi.ts), else through onnxruntime-node (refs/ort.ts). */
async function ceilingOf(cfg: BenchConfig, model: ModelInfo | null, dtype: TargetDtype, len: Lengths, past: number, when: 'before' | 'after', log: Progress): Promise<CeilingReference | Skipped> {
  const off = ceilingOff(cfg)
  if (off) return skipped(off)
  if (!model) return skipped('no local model bundle: pass --model DIR')
  try {
    const f = ortFile(cfg, model, dtype)
    const { onnxPath, capi, api } = f
    const { o, measure } = ortTimer(cfg, f, len, past, [...new Set(cfg.concurrency)].sort((a, b) => a - b), log)
    const { prefillRows } = o
    log.step(`ORT ceiling of ${model.id}${dtype === 'fp32' ? '' : ` (${dtype})`} (${when} the sweep, ${api}): decode steps at batch ${cfg.concurrency.join(', ')} over a past of ${past}, prefill of ${prefillRows} x ${len.prompt}`)
    const c = await measure()
    // Where ORT's own step goes, by operator (its profiler, a session of its own): once, before the sweep, on the CPU.
    let ops: DecodeOps[] | undefined
    if (cfg.provider === 'cpu' && when === 'before') {
      log.step(`  ORT's decode step by operator (its profiler) at batch ${o.batches.join(', ')}`)
      // A breakdown, not a figure the run is judged by: if it fails, the ceiling stands without it.
      try {
        ops = capi ? profileCapiDecode(o) : await profileDecode(o)
      } catch (e) {
        log.step(`  warning: ORT's profile failed, no breakdown by operator: ${(e as Error).message}`)
      }
    }
    return { threads: cfg.threads, api, ...(cfg.provider === 'cpu' ? {} : { provider: cfg.provider }), file: basename(onnxPath), past, ...c, ...(ops ? { ops } : {}), runs: { [when]: { decode: c.decode, prefill: c.prefill } } }
  } catch (e) {
    return skipped(`failed: ${(e as Error).message}`)
  }
}

/** The ORT ceilings of every graph form and weight dtype the targets serve (ort_ceiling: the baseline's), and the matmul peak. */
async function measureReferences(cfg: BenchConfig, baseSpec: TargetSpec | null, bundleOf: (spec: TargetSpec | null) => Bundle, len: Lengths, past: number, when: 'before' | 'after', log: Progress): Promise<References> {
  const forms: Record<string, CeilingReference | Skipped> = {}
  let ceiling: References['ort_ceiling'] | null = null
  const base = bundleOf(baseSpec)
  const baseKey = ceilingKey(base.form ?? '', baseSpec?.dtype)
  for (const spec of cfg.targets) {
    const b = bundleOf(spec)
    const key = ceilingKey(b.form ?? '', spec.dtype)
    if (key in forms) continue
    forms[key] = await ceilingOf(cfg, b.model, spec.dtype, len, past, when, log)
    if (b === base && key === baseKey) ceiling = forms[key]
  }
  ceiling ??= await ceilingOf(cfg, base.model, baseSpec?.dtype ?? 'fp32', len, past, when, log)
  let matmul: References['matmul_peak'] = skipped(cfg.scenario !== 'standard' ? `not part of --scenario ${cfg.scenario}` : cfg.provider !== 'cpu' ? `the CPU's matmul peak: not measured with --provider ${cfg.provider}` : 'disabled by --no-matmul')
  if (cfg.references.matmul) {
    log.step(`matmul peak (${when} the sweep): square MatMul ${cfg.matmulSizes.join(', ')} through ORT`)
    const m = await measureMatmulPeak(cfg.matmulSizes, cfg.threads, cfg.refBudget, (s) => log.step(`  ${s}`))
    matmul = { threads: cfg.threads, ...m, runs: { [when]: m.gflops } }
  }
  return { ort_ceiling: ceiling, matmul_peak: matmul, ...(cfg.targets.length > 1 ? { ort_ceiling_by_form: forms } : {}) }
}

/** What a reader must know: how throughput counts requests a deadline cut, and every level that was cut. */
function cutNotes(scenarios: BenchReport['scenarios'], cfg: BenchConfig): string[] {
  const notes: string[] = []
  const cuts: string[] = []
  for (const s of scenarios) {
    if (isSkipped(s)) continue
    for (const l of s.levels)
      if (l.cut > 0)
        cuts.push(`${s.target ?? s.name} c=${l.max_concurrency}: cut at the ${s.deadline_s} s cap with ${l.cut} of ${l.completed + l.failed + l.cut} requests unfinished (${l.cut_output_tokens} tokens they streamed counted${l.ttft_censored ? `; ${l.ttft_censored} had no first token, TTFT a lower bound` : ''})`)
  }
  if (cfg.wave) notes.push(`one wave per level: as many requests as the level's concurrency, each level capped at ${cfg.durationS ?? 'no'} s`)
  if (cuts.length || cfg.wave) notes.push('output throughput = output tokens received / elapsed, counting the streamed tokens of requests a cap cut')
  return [...notes, ...cuts]
}

export async function runBench(cfg: BenchConfig): Promise<BenchResult> {
  // The benchmark's own packages (devDependencies), loaded before anything is measured.
  const log = await Progress.open(cfg.progress)
  const renderSvg = await chartRenderer()
  const created = new Date()
  const loadStart = loadavg()
  const sys = systemInfo()
  const { byForm, preset } = await bundles(cfg, log)
  const baseSpec = cfg.targets.find((t) => t.name === cfg.baseline) ?? cfg.targets[0] ?? null
  // A target's bundle: its form's, or the one given (--model, --url).
  const bundleOf = (spec: TargetSpec | null): Bundle => byForm.get(spec && byForm.has(spec.attention) ? spec.attention : null) ?? [...byForm.values()][0]
  const base = bundleOf(baseSpec)
  const { dir, model } = base
  if (model && preset && model.builderVersion !== BUILDER_VERSION) {
    log.step(`warning: ${dir} was built by builder version ${model.builderVersion ?? '1 or older'}, not ${BUILDER_VERSION}: delete it to benchmark the current graph`)
  }
  const form: PromptForm = cfg.target.kind === 'facade' ? { kind: 'chat' } : model ? { kind: 'ids', vocab: model.vocab } : { kind: 'text' }
  const len = lengths(cfg, form)
  const past = len.prompt + Math.round(len.output / 2)
  const x: Load = { cfg, form, log, len, past }

  // References measured through ORT in this process while nothing else runs: before the sweep and again after it.
  // A ceiling is the best ORT can do, and load from elsewhere on the machine only slows it, so each figure keeps the
  // better of the two (both are in the report).
  const refs = (when: 'before' | 'after'): Promise<References> => measureReferences(cfg, baseSpec, bundleOf, len, past, when, log)
  const before = await refs('before')
  const { llamas, notWritten } = await llamaRuns(cfg, preset, dir, log)
  const { runs, skipped: notStarted, order } = await driveTargets(x, bundleOf, llamas)
  // The baseline first: the efficiency figures, targets and summary read the first onnxd scenario.
  runs.sort((a, b) => Number(b.target === cfg.baseline) - Number(a.target === cfg.baseline))
  const scenarios: BenchReport['scenarios'] = [...runs, ...notWritten, ...notStarted]
  const main = runs[0]
  // transformers.js reads the Hugging Face export layout only: on a preset whose baseline form is another, the peer
  // serves the plain form's bundle, the same weights.
  const peerDir = async (): Promise<string | null> => (preset && base.form !== 'plain' ? ensureBundle(cfg.modelsDir, preset, 'plain', (s) => log.step(s)) : dir)
  const reference = async (kind: 'unbatched' | 'peer', on: boolean, off: string): Promise<void> => {
    if (!on) return void scenarios.push({ name: kind, label: LABELS[kind], ...skipped(off) })
    try {
      scenarios.push(await drive(kind, x, kind === 'peer' ? await peerDir() : dir, kind === 'unbatched' ? baseSpec : null))
    } catch (e) {
      const msg = (e as Error).message
      const reason = /transformers\.js is not installed/.test(msg) ? 'transformers.js (@huggingface/transformers) is not installed' : `failed: ${msg.split('\n').slice(0, 6).join(' | ')}`
      log.step(`${kind}: skipped: ${reason}`)
      scenarios.push({ name: kind, label: LABELS[kind], ...skipped(reason) })
    }
  }
  const scenarioOnly = cfg.scenario !== 'standard' ? `not part of --scenario ${cfg.scenario}` : null
  await reference('unbatched', cfg.references.unbatched, scenarioOnly ?? (cfg.target.kind === 'spawn' ? 'disabled by --no-unbatched' : 'only when the bench starts the node itself'))
  await reference('peer', cfg.references.peer && dir !== null, scenarioOnly ?? (cfg.references.peer ? 'no local model bundle: pass --model DIR' : 'disabled by --no-peer'))

  const references = bestOf(before, await refs('after'))
  const eff = efficiency({ scenarios, references }, model, len)
  const tg = [...targets(eff, { scenarios, references }), ...llamaCppTargets(llamaCppRatios(scenarios))]
  const name = cfg.name || `onnxd-bench${cfg.scenario !== 'standard' ? `-${cfg.scenario}` : ''}${cfg.smoke ? '-smoke' : ''}-${stamp(created)}`
  const jsonPath = join(cfg.outDir, `${name}.json`)
  const chartPath = join(cfg.outDir, `${name}.svg`)
  const report: BenchReport = {
    bench: REPORT_KIND,
    schema: REPORT_SCHEMA,
    scenario: cfg.scenario,
    baseline: cfg.baseline,
    target_ratios: targetRatios({ scenarios, references }, cfg.baseline, len),
    llama_cpp_ratios: llamaCppRatios(scenarios),
    run_order: order,
    notes: cutNotes(scenarios, cfg),
    created: created.toISOString(),
    config: describeConfig(cfg),
    machine: { ...sys, provider: main.provider ?? 'unknown', loadavg_start: loadStart.map((x) => Math.round(x * 100) / 100), loadavg_end: loadavg().map((x) => Math.round(x * 100) / 100) },
    versions: {
      onnxd: sys.onnxd,
      node: process.version,
      'onnxruntime-node': packageVersion('onnxruntime-node'),
      '@huggingface/transformers': packageVersion('@huggingface/transformers'),
      vega: packageVersion('vega'),
      'vega-lite': packageVersion('vega-lite'),
    },
    model: {
      id: model?.id ?? cfg.servedModel ?? 'unknown',
      dir,
      preset,
      builder_version: model?.builderVersion ?? null,
      vocab: model?.vocab ?? null,
      matmul_params: model?.matmulParams ?? null,
      flops_per_output_token: model ? flopsPerToken(model, past) : null,
    },
    scenarios,
    references,
    efficiency: eff,
    targets: tg,
    summary: summaryLines(eff, tg, { references }),
    drift: hostDrift({ scenarios, references }),
    files: { json: jsonPath, chart: chartPath },
  }
  writeJson(report, jsonPath)
  writeFileSync(chartPath, await renderSvg(chartSpec(report, model, len)))
  return { report, jsonPath, chartPath }
}
