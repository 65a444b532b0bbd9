// One `onnxd bench` run: resolves the model, measures the ORT references, drives onnxd, the unbatched node and the
// transformers.js peer through the same levels, then builds the report, the chart and the printed tables.
// Imports: every bench module; the engine's model builder (to build presets).
import { loadavg } from 'node:os'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Agent } from 'undici'
import { DEFAULT_BATCHER } from '../engine/engine.js'
import { BUILDER_VERSION, ensureDefaultModel, presetOf } from '../builder/index.js'
import { chartSpec, renderSvg } from './chart.js'
import { createAgent, getJson, type Endpoint, type Sampling } from './client.js'
import { engineTime, scrapeStepTotals } from './engine-metrics.js'
import { runLevel } from './loadgen.js'
import { levelFigures } from './metrics.js'
import { flopsPerToken, readModelInfo, type ModelInfo } from './model-info.js'
import { describeConfig, requestsFor, type BenchConfig } from './options.js'
import { Progress } from './progress.js'
import { measureCeiling, measureMatmulPeak } from './refs/ort.js'
import {
  REPORT_KIND,
  REPORT_SCHEMA,
  efficiency,
  summaryLines,
  hostDrift,
  targets,
  writeJson,
  type BenchReport,
  type Lengths,
  type LevelResult,
  type ScenarioName,
  type ScenarioResult,
  type Skipped,
  bestOf,
} from './report.js'
import { packageVersion, stamp, systemInfo } from './system.js'
import { freePort, spawnTarget, type Child } from './targets/spawn.js'
import { makeWorkload, meanLength, type PromptForm, type WorkloadSpec } from './workload.js'

export interface BenchResult {
  report: BenchReport
  jsonPath: string
  chartPath: string | null
}

const skipped = (reason: string): Skipped => ({ skipped: true, reason })

/** The bundle directory the run uses: built from a preset, given, or none (a remote target without --model). */
async function modelDir(cfg: BenchConfig, log: Progress): Promise<{ dir: string | null; preset: string | null }> {
  const t = cfg.target
  if (t.kind === 'spawn' && t.preset) {
    presetOf(t.preset)
    const dir = join(cfg.modelsDir, `onnxd-${t.preset}`)
    log.step(`model: preset ${t.preset} in ${dir} (built on first use)`)
    return { dir: await ensureDefaultModel(dir, t.preset), preset: t.preset }
  }
  return { dir: t.model, preset: null }
}

interface Driven {
  ep: Endpoint
  /** The execution provider the target reports in /health (null when it does not say). */
  provider: string | null
  stop(): Promise<void>
}

/** Starts (or reaches) one target and learns the model id it serves. */
async function reach(kind: ScenarioName, cfg: BenchConfig, dir: string | null, agent: Agent): Promise<Driven> {
  let child: Child | null = null
  let url: string
  const t = cfg.target
  if (kind === 'peer') {
    const port = await freePort()
    child = await spawnTarget({ entry: '../peer/server', args: ['--model', dir!, '--port', String(port)], what: 'the transformers.js peer', readyTimeoutS: cfg.readyTimeoutS, agent, port })
    url = child.url
  } else if (t.kind === 'spawn' || kind === 'unbatched') {
    const port = await freePort()
    const args = ['--model', dir!, '--port', String(port), '--host', '127.0.0.1', '--log-level', 'warn', ...cfg.nodeArgs]
    if (kind === 'unbatched') args.push('--max-running', '1')
    child = await spawnTarget({ entry: './node-main', args, what: kind === 'unbatched' ? 'the unbatched node' : 'the onnxd node', readyTimeoutS: cfg.readyTimeoutS, agent, port })
    url = child.url
  } else url = t.url
  const protocol = t.kind === 'facade' && kind === 'onnxd' ? 'openai' : 'node'
  const apiKey = t.kind === 'facade' && kind === 'onnxd' ? t.apiKey : undefined
  let model = cfg.servedModel
  const health = protocol === 'node' ? ((await getJson(agent, `${url}/health`))?.body as { models?: string[]; provider?: string } | undefined) : undefined
  model ??= health?.models?.[0] ?? null
  if (!model && protocol === 'openai') {
    const m = await getJson(agent, `${url}/v1/models`, { authorization: `Bearer ${apiKey}` })
    model = ((m?.body as { data?: { id: string }[] } | undefined)?.data ?? [])[0]?.id ?? null
  }
  if (!model) {
    await child?.stop()
    throw new Error(`${url}: cannot tell which model it serves; pass --served-model`)
  }
  return { ep: { url, protocol, model, ...(apiKey ? { apiKey } : {}) }, provider: health?.provider ?? null, stop: async () => void (await child?.stop()) }
}

const LABELS: Record<ScenarioName, string> = {
  onnxd: 'onnxd',
  unbatched: 'onnxd node, unbatched (max running 1)',
  peer: 'transformers.js pipeline behind node:http, one request at a time',
}

/** Drives one target through its levels. */
async function drive(kind: ScenarioName, cfg: BenchConfig, dir: string | null, form: PromptForm, log: Progress): Promise<ScenarioResult> {
  const levels = kind === 'peer' ? cfg.peerConcurrency : cfg.concurrency
  const agent = createAgent(Math.max(...levels, cfg.warmup))
  const spec: WorkloadSpec = { promptLen: cfg.promptLen, outputLen: cfg.outputLen, file: cfg.prompts ?? undefined, seed: cfg.seed }
  const sampling: Sampling = { temperature: cfg.temperature, ignoreEos: cfg.ignoreEos }
  const deadline = kind === 'onnxd' ? cfg.durationS : cfg.refDurationS
  log.step(`${kind}: starting`)
  const d = await reach(kind, cfg, dir, agent)
  const label = kind === 'onnxd' ? `onnxd ${d.ep.protocol === 'openai' ? 'facade' : 'node'} (${cfg.target.kind === 'spawn' ? 'started by the bench' : d.ep.url})` : LABELS[kind]
  try {
    if (cfg.warmup > 0) {
      const warm = makeWorkload({ ...spec, seed: cfg.seed + 7919 }, form, cfg.warmup)
      await runLevel(agent, d.ep, warm, sampling, { concurrency: cfg.warmup, requestRate: Infinity, deadlineS: null, seed: cfg.seed }, {}, `${kind}-warmup`)
    }
    const out: ScenarioResult = { name: kind, label, url: d.ep.url, provider: d.provider, deadline_s: deadline, levels: [] }
    for (const c of [...levels].sort((a, b) => a - b)) {
      const items = makeWorkload(spec, form, requestsFor(cfg, c))
      const bar = log.level(`${kind} c=${c}`, items.length, deadline)
      const before = d.ep.protocol === 'node' ? await scrapeStepTotals(agent, d.ep.url) : null
      const run = await runLevel(agent, d.ep, items, sampling, { concurrency: c, requestRate: cfg.requestRate, deadlineS: deadline, seed: cfg.seed }, bar, `${kind}-c${c}`)
      const after = before ? await scrapeStepTotals(agent, d.ep.url) : null
      const fig: LevelResult = levelFigures(run.records, run.durationS, c, cfg.requestRate)
      if (before && after) fig.engine = engineTime(before, after, run.durationS)
      bar.done(`${fig.completed} ok, ${fig.failed} failed, ${fig.cut} cut in ${fig.duration.toFixed(1)} s; ${fig.output_throughput.toFixed(1)} out tok/s; TTFT p99 ${fig.p99_ttft_ms.toFixed(0)} ms; TPOT mean ${fig.mean_tpot_ms.toFixed(1)} ms`)
      out.levels.push(fig)
    }
    return out
  } finally {
    await d.stop()
    await agent.close()
  }
}

/** Mean prompt and output lengths of the workload (the references are timed at these). */
function lengths(cfg: BenchConfig, form: PromptForm): Lengths {
  if (!cfg.prompts) return { prompt: Math.round(meanLength(cfg.promptLen)), output: Math.round(meanLength(cfg.outputLen)) }
  const items = makeWorkload({ promptLen: cfg.promptLen, outputLen: cfg.outputLen, file: cfg.prompts, seed: cfg.seed }, form, 64)
  const words = (s: string): number => s.split(/\s+/).filter(Boolean).length
  const p = items.map((i) => ('input_ids' in i.input ? i.input.input_ids.length : 'prompt' in i.input ? words(i.input.prompt) : i.input.messages.reduce((a, m) => a + words(m.content), 0)))
  return { prompt: Math.round(p.reduce((a, b) => a + b, 0) / p.length), output: Math.round(items.reduce((a, i) => a + i.maxTokens, 0) / items.length) }
}

type References = BenchReport['references']

async function measureReferences(cfg: BenchConfig, model: ModelInfo | null, len: Lengths, past: number, when: 'before' | 'after', log: Progress): Promise<References> {
  let ceiling: References['ort_ceiling'] = skipped('disabled by --no-ceiling')
  if (cfg.references.ceiling && !model) ceiling = skipped('no local model bundle: pass --model DIR')
  else if (cfg.references.ceiling && model) {
    // Prefill is timed as the engine runs it: as many prompts per run as its default token budget holds.
    const prefillRows = Math.max(1, Math.min(Math.max(...cfg.concurrency), Math.floor(DEFAULT_BATCHER.maxBatchedTokens / len.prompt)))
    log.step(`ORT ceiling (${when} the sweep): decode steps at batch ${cfg.concurrency.join(', ')} over a past of ${past}, prefill of ${prefillRows} x ${len.prompt}`)
    try {
      const c = await measureCeiling({ onnxPath: model.onnxPath, batches: [...new Set(cfg.concurrency)].sort((a, b) => a - b), past, prompt: len.prompt, prefillRows, threads: cfg.threads, greedy: cfg.temperature === 0, budget: cfg.refBudget, onStep: (s) => log.step(`  ${s}`) })
      ceiling = { threads: cfg.threads, past, ...c, runs: { [when]: { decode: c.decode, prefill: c.prefill } } }
    } catch (e) {
      ceiling = skipped(`failed: ${(e as Error).message}`)
    }
  }
  let matmul: References['matmul_peak'] = skipped('disabled by --no-matmul')
  if (cfg.references.matmul) {
    log.step(`matmul peak (${when} the sweep): square MatMul ${cfg.matmulSizes.join(', ')} through ORT`)
    const m = await measureMatmulPeak(cfg.matmulSizes, cfg.threads, cfg.refBudget, (s) => log.step(`  ${s}`))
    matmul = { threads: cfg.threads, ...m, runs: { [when]: m.gflops } }
  }
  return { ort_ceiling: ceiling, matmul_peak: matmul }
}

export async function runBench(cfg: BenchConfig): Promise<BenchResult> {
  const log = new Progress(cfg.progress)
  const created = new Date()
  const loadStart = loadavg()
  const sys = systemInfo()
  const { dir, preset } = await modelDir(cfg, log)
  const model: ModelInfo | null = dir ? readModelInfo(dir) : null
  if (model && preset && model.builderVersion !== BUILDER_VERSION) {
    log.step(`warning: ${dir} was built by builder version ${model.builderVersion ?? '1 or older'}, not ${BUILDER_VERSION}: delete it to benchmark the current graph`)
  }
  const form: PromptForm = cfg.target.kind === 'facade' ? { kind: 'chat' } : model ? { kind: 'ids', vocab: model.vocab } : { kind: 'text' }
  const len = lengths(cfg, form)
  const past = len.prompt + Math.round(len.output / 2)

  // References measured through ORT in this process while nothing else runs: before the sweep and again after it.
  // A ceiling is the best ORT can do, and load from elsewhere on the machine only slows it, so each figure keeps the
  // better of the two (both are in the report).
  const refs = (when: 'before' | 'after'): Promise<References> => measureReferences(cfg, model, len, past, when, log)
  const before = await refs('before')
  const main = await drive('onnxd', cfg, dir, form, log)
  const scenarios: BenchReport['scenarios'] = [main]
  const reference = async (kind: 'unbatched' | 'peer', on: boolean, off: string): Promise<void> => {
    if (!on) return void scenarios.push({ name: kind, label: LABELS[kind], ...skipped(off) })
    try {
      scenarios.push(await drive(kind, cfg, dir, form, log))
    } catch (e) {
      const msg = (e as Error).message
      const reason = /transformers\.js is not installed/.test(msg) ? 'transformers.js (@huggingface/transformers) is not installed' : `failed: ${msg.split('\n').slice(0, 6).join(' | ')}`
      log.step(`${kind}: skipped: ${reason}`)
      scenarios.push({ name: kind, label: LABELS[kind], ...skipped(reason) })
    }
  }
  await reference('unbatched', cfg.references.unbatched, cfg.target.kind === 'spawn' ? 'disabled by --no-unbatched' : 'only when the bench starts the node itself')
  await reference('peer', cfg.references.peer && dir !== null, cfg.references.peer ? 'no local model bundle: pass --model DIR' : 'disabled by --no-peer')

  const references = bestOf(before, await refs('after'))
  const eff = efficiency({ scenarios, references }, model, len)
  const tg = targets(eff, { scenarios, references })
  const name = cfg.name || `onnxd-bench${cfg.smoke ? '-smoke' : ''}-${stamp(created)}`
  const jsonPath = join(cfg.outDir, `${name}.json`)
  const chartPath = join(cfg.outDir, `${name}.svg`)
  const report: BenchReport = {
    bench: REPORT_KIND,
    schema: REPORT_SCHEMA,
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
