// The device check: what scripts/device/run.sh runs on a GPU machine (from the archive scripts/device/pack.ts makes,
// transpiled to check.mjs there) or here from the working tree (under tsx, `--mode src`). Every step runs in a child
// process of its own under a timeout, inside one time budget; a step that fails, times out or has no time left is
// recorded with its error or reason and the check goes on. One JSON report, OUT/device-check.json, rewritten after
// every step (a run cut short still leaves one), the benchmarks' own reports beside it in OUT/bench/, each step's
// output in OUT/logs/.
//
// Steps (the full run; --dry-run: the tiny preset, the fewest and shortest of each):
//   device         nvidia-smi -L and its GPU/driver line, vulkaninfo --summary, where present
//   webgpu         ORT's WebGPU provider has an adapter (session.ts webgpuProbe), and what ORT's verbose log says of it
//   build:P        preset P in GroupQueryAttention form with fp16 and q4 weights beside fp32 (the bench's own builder
//                  path, bundles.ts ensureBundle, so the benchmarks below find it built)
//   gguf:P         the same weights as F16 and Q4_0 GGUF for llama.cpp (bundles.ts ensureGguf), where llama.cpp is packed
//   greedy:P       `onnxd generate` greedy tokens on webgpu against the CPU provider's, per weight form
//   context:P      `onnxd bench context --provider webgpu` on the GroupQueryAttention form, runtime js
//   serve:P        `onnxd bench --provider webgpu` at 1, 16 and 64 streams, fp16 and q4, with ORT alone on webgpu doing
//                  the same work (the ceiling) and llama.cpp's Vulkan build on the F16/Q4_0 GGUF where packed
//   capture:P      the same sweep's first weight form with the node's WebGPU graph capture (--graph-capture,
//                  --max-model-len 512), its output tok/s over serve:P's at each level (the first preset only)
//
//   check.ts --out DIR [--app DIR] [--mode dist|src] [--work DIR] [--budget S] [--dry-run] [--unpack-seconds S]
import { spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import { cpus, totalmem } from 'node:os'
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'

type Mode = 'dist' | 'src'
type Status = 'ok' | 'failed' | 'timeout' | 'skipped' | 'differs'

export interface StepRecord {
  name: string
  status: Status
  /** Why a step was skipped, or what differed. */
  reason?: string
  /** The error of a failed or timed-out step: its exit and the last lines it wrote. */
  error?: string
  seconds: number
  /** When it started, seconds into the check. */
  started_s: number
  /** Steps that ran at the same time (the builds run beside other steps). */
  beside?: string[]
  timeout_s?: number
  commands?: string[]
  /** Each step's output, relative to OUT. */
  log?: string
  result?: unknown
}

export interface DeviceReport {
  kind: 'onnxd-device-check'
  schema: 1
  created: string
  dry_run: boolean
  budget_s: number
  /** Seconds run.sh took to unpack the archive (null: run from a working tree). */
  unpack_s: number | null
  elapsed_s: number
  finished: boolean
  mode: Mode
  device: { nvidia_smi: string[] | null; vulkan: string[] | null; webgpu_adapter: string | null; webgpu_log: string[]; cpu: string; cores: number; memory_gb: number; vk_driver_files: string | null }
  versions: Record<string, string | null>
  /** The archive's MANIFEST.json (commit, what was packed and left out), when run from one. */
  manifest: unknown
  steps: StepRecord[]
  notes: string[]
}

interface Ctx {
  app: string
  mode: Mode
  out: string
  work: string
  dry: boolean
  deadline: number
  started: number
  report: DeviceReport
  /** Null when WebGPU has an adapter, else why not (null until probed). */
  noWebgpu: string | null
  llamaCpp: string | null
}

/** Arguments as one shell line, each that needs it single-quoted. */
const shellLine = (args: string[]): string => args.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ')
const tail = (s: string, n = 1500): string => (s.length > n ? `...${s.slice(-n)}` : s).trim()
const round = (x: number, d = 2): number => Math.round(x * 10 ** d) / 10 ** d

// ---- child processes ----

interface Ran {
  code: number | null
  signal: string | null
  timedOut: boolean
  stdout: string
  stderr: string
  seconds: number
}

/**
 * Runs `cmd` in a process group of its own (a benchmark starts servers of its own; a timeout ends them all), up to
 * `timeoutS` seconds: then SIGTERM to the group, SIGKILL 5 s later. Its output is appended to `log`.
 */
function run(cmd: string[], opts: { cwd: string; timeoutS: number; log: string; env?: NodeJS.ProcessEnv }): Promise<Ran> {
  const t0 = performance.now()
  return new Promise((done) => {
    const child = spawn(cmd[0], cmd.slice(1), { cwd: opts.cwd, env: { ...process.env, ...opts.env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true })
    let stdout = ''
    let stderr = ''
    let timedOut = false
    const header = `$ ${shellLine(cmd)}\n`
    writeFileSync(opts.log, header, { flag: 'a' })
    child.stdout.on('data', (b: Buffer) => {
      stdout += b.toString()
      writeFileSync(opts.log, b, { flag: 'a' })
    })
    child.stderr.on('data', (b: Buffer) => {
      stderr += b.toString()
      writeFileSync(opts.log, b, { flag: 'a' })
    })
    const group = (sig: NodeJS.Signals): void => {
      try {
        process.kill(-child.pid!, sig)
      } catch {
        // already gone
      }
    }
    let kill: NodeJS.Timeout | undefined
    const timer = setTimeout(() => {
      timedOut = true
      group('SIGTERM')
      kill = setTimeout(() => group('SIGKILL'), 5000)
    }, opts.timeoutS * 1000)
    const finish = (code: number | null, signal: string | null): void => {
      clearTimeout(timer)
      // Whatever the step started and left behind goes with it.
      group('SIGKILL')
      if (kill) clearTimeout(kill)
      writeFileSync(opts.log, `[exit ${code ?? signal}${timedOut ? ', timed out' : ''} after ${round((performance.now() - t0) / 1000)} s]\n\n`, { flag: 'a' })
      done({ code, signal, timedOut, stdout, stderr, seconds: (performance.now() - t0) / 1000 })
    }
    child.on('error', (e) => {
      stderr += `${e.message}\n`
      finish(null, 'spawn-error')
    })
    child.on('close', finish)
  })
}

/** The command line of `onnxd <args>`: the compiled CLI (bin/onnxd.js), or src/ under tsx in a working tree. */
function onnxd(c: Ctx, args: string[]): string[] {
  return c.mode === 'dist' ? [process.execPath, join(c.app, 'bin', 'onnxd.js'), ...args] : [process.execPath, '--import', 'tsx', join(c.app, 'test', 'helpers', 'onnxd-src.ts'), ...args]
}

/** The command line of one of this file's tasks (below) in a child process. */
function task(name: string, args: string[], c: Ctx): string[] {
  const tsx = process.execArgv.includes('tsx') ? ['--import', 'tsx'] : []
  return [process.execPath, ...tsx, fileURLToPath(import.meta.url), '--task', name, '--app', c.app, '--mode', c.mode, ...args]
}

/** A module of the app, as `import()` takes it: dist/X.js, or src/X.ts under tsx. */
const moduleUrl = (app: string, mode: Mode, path: string): string => pathToFileURL(join(app, mode, `${path}.${mode === 'dist' ? 'js' : 'ts'}`)).href

/** The last line of stdout that parses as a JSON object. */
function lastJson(stdout: string): Record<string, unknown> | null {
  for (const line of stdout.trim().split('\n').reverse()) {
    try {
      const v = JSON.parse(line) as unknown
      if (v && typeof v === 'object' && !Array.isArray(v)) return v as Record<string, unknown>
    } catch {
      // not JSON
    }
  }
  return null
}

const failure = (r: Ran, what: string): string =>
  `${what} ${r.timedOut ? 'timed out' : `exited with ${r.code ?? r.signal}`} after ${round(r.seconds, 1)} s: ${tail(r.stderr || r.stdout, 1200)}`

/** A step's error: its message, or a child's exit and output. */
class StepError extends Error {
  constructor(
    message: string,
    readonly timedOut = false,
  ) {
    super(message)
  }
}

/** Runs `cmd` and throws a StepError unless it exits 0. */
async function must(c: Ctx, cmd: string[], timeoutS: number, log: string, what: string, commands: string[]): Promise<Ran> {
  commands.push(shellLine(cmd.slice(1)))
  const r = await run(cmd, { cwd: c.app, timeoutS, log: join(c.out, log) })
  if (r.timedOut || r.code !== 0) throw new StepError(failure(r, what), r.timedOut)
  return r
}

// ---- the report ----

function save(c: Ctx): void {
  c.report.elapsed_s = round((performance.now() - c.started) / 1000, 1)
  const path = join(c.out, 'device-check.json')
  writeFileSync(`${path}.tmp`, JSON.stringify(c.report, null, 2) + '\n')
  renameSync(`${path}.tmp`, path)
}

interface StepSpec {
  name: string
  /** Seconds the step needs at least; with less of the budget left it is skipped. */
  minS: number
  /** Its timeout, at most (never past the budget). */
  capS: number
  /** Why it cannot run here (checked when its turn comes), or null. */
  blocked?: () => string | null
  run(timeoutS: number, commands: string[], log: string): Promise<{ result?: unknown; differs?: string }>
}

/** Steps running now, by name, with when each started (ms, performance.now()). */
const running = new Map<string, number>()

async function step(c: Ctx, s: StepSpec): Promise<StepRecord> {
  const t0 = performance.now()
  const left = (c.deadline - t0) / 1000
  const log = `logs/${s.name.replace(/[^\w.-]+/g, '_')}.log`
  const base = { name: s.name, seconds: 0, started_s: round((t0 - c.started) / 1000, 1) }
  let rec: StepRecord
  const blocked = s.blocked?.() ?? null
  if (blocked) rec = { ...base, status: 'skipped', reason: blocked }
  else if (left < s.minS) rec = { ...base, status: 'skipped', reason: `not enough of the budget left: ${round(left, 0)} s of ${c.report.budget_s} s, the step needs at least ${s.minS} s` }
  else {
    const timeoutS = Math.max(1, Math.floor(Math.min(s.capS, left)))
    const commands: string[] = []
    const beside = new Set(running.keys())
    running.set(s.name, t0)
    process.stderr.write(`[device-check] ${s.name}: running (timeout ${timeoutS} s, ${round(left, 0)} s of the budget left)\n`)
    // Steps that start while this one runs are beside it too.
    const watch = setInterval(() => running.forEach((_, n) => n !== s.name && beside.add(n)), 200)
    try {
      const r = await s.run(timeoutS, commands, log)
      rec = { ...base, status: r.differs ? 'differs' : 'ok', ...(r.differs ? { reason: r.differs } : {}), timeout_s: timeoutS, commands, log, ...(r.result !== undefined ? { result: r.result } : {}) }
    } catch (e) {
      rec = { ...base, status: e instanceof StepError && e.timedOut ? 'timeout' : 'failed', error: (e as Error).message, timeout_s: timeoutS, commands, log }
    } finally {
      clearInterval(watch)
      running.delete(s.name)
    }
    rec.seconds = round((performance.now() - t0) / 1000, 1)
    if (beside.size) rec.beside = [...beside]
  }
  process.stderr.write(`[device-check] ${s.name}: ${rec.status}${rec.reason ? ` (${rec.reason})` : ''}${rec.error ? `: ${rec.error.split('\n')[0].slice(0, 300)}` : ''} in ${rec.seconds} s\n`)
  c.report.steps.push(rec)
  save(c)
  return rec
}

// ---- steps ----

async function deviceStep(c: Ctx, timeoutS: number, commands: string[], log: string): Promise<{ result: unknown }> {
  const which = async (bin: string): Promise<boolean> => (await run(['sh', '-c', `command -v ${bin}`], { cwd: c.app, timeoutS: 5, log: join(c.out, log) })).code === 0
  const lines = (s: string): string[] => s.split('\n').map((l) => l.trim()).filter(Boolean)
  const per = Math.max(5, Math.floor(timeoutS / 3))
  if (await which('nvidia-smi')) {
    commands.push('nvidia-smi -L', 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader')
    const l = await run(['nvidia-smi', '-L'], { cwd: c.app, timeoutS: per, log: join(c.out, log) })
    const q = await run(['nvidia-smi', '--query-gpu=name,driver_version,memory.total', '--format=csv,noheader'], { cwd: c.app, timeoutS: per, log: join(c.out, log) })
    c.report.device.nvidia_smi = [...lines(l.stdout), ...lines(q.stdout).map((x) => `name, driver, memory: ${x}`)]
  }
  if (await which('vulkaninfo')) {
    commands.push('vulkaninfo --summary')
    const v = await run(['vulkaninfo', '--summary'], { cwd: c.app, timeoutS: per, log: join(c.out, log) })
    c.report.device.vulkan = lines(v.stdout).filter((x) => /deviceName|deviceType|driverName|driverInfo|apiVersion|GPU\d/.test(x))
  }
  return { result: { nvidia_smi: c.report.device.nvidia_smi !== null, vulkaninfo: c.report.device.vulkan !== null } }
}

async function webgpuStep(c: Ctx, timeoutS: number, commands: string[], log: string): Promise<{ result: unknown }> {
  const r = await must(c, task('probe', [], c), timeoutS, log, 'the WebGPU probe', commands)
  const j = lastJson(r.stdout) ?? {}
  c.noWebgpu = typeof j.no_adapter === 'string' ? j.no_adapter : null
  c.report.device.webgpu_adapter = c.noWebgpu === null ? 'found' : `none: ${c.noWebgpu}`
  // What ORT's verbose log says of the adapter Dawn picked, where it says anything.
  c.report.device.webgpu_log = (r.stdout + '\n' + r.stderr)
    .split('\n')
    .filter((l) => /adapter|OrtHardwareDevice|WebGPU EP (Context|Dawn)|device lost|vulkan/i.test(l) && !/^\{/.test(l))
    .map((l) => l.trim().slice(0, 300))
    .slice(0, 12)
  return { result: { adapter: c.noWebgpu === null, reason: c.noWebgpu } }
}

/** One preset's part of a run. */
interface PresetPlan {
  preset: string
  /** Weight forms built beside fp32. */
  dtypes: string[]
  /** Weight forms whose greedy tokens are compared. */
  greedy: string[]
  /** GGUF types written for llama.cpp (none: llama.cpp does not run on this preset). */
  gguf: string[]
  context: boolean
  /** `onnxd bench` arguments of the serving sweep (without llama.cpp's), and the least time it needs. */
  serve: string[]
  serveMinS: number
  /** `onnxd bench` arguments of the graph-capture sweep (none: not run on this preset). */
  capture?: string[]
}

/** The presets, weight forms and sizes of a run. */
interface Plan {
  presets: PresetPlan[]
  context: { contexts: string; batches: string; steps: string; bigSteps: string }
  greedyTokens: number
}

const PROMPT = 'The device check asks each provider for the same greedy tokens.'

function plan(dry: boolean): Plan {
  if (dry)
    return {
      presets: [
        {
          preset: 'tiny',
          dtypes: ['fp16'],
          greedy: ['fp32'],
          gguf: ['f16'],
          context: true,
          serve: ['--dtype', 'fp16', '--concurrency', '1', '--prompt-len', '8', '--output-len', '4', '--num-requests', '1', '--warmup', '0', '--duration', '20'],
          serveMinS: 15,
          capture: ['--dtype', 'fp16', '--concurrency', '1', '--prompt-len', '8', '--output-len', '4', '--num-requests', '1', '--warmup', '0', '--duration', '20'],
        },
      ],
      context: { contexts: '16', batches: '1', steps: '2', bigSteps: '2' },
      greedyTokens: 8,
    }
  const sweep = (durationS: number, dtypes = 'fp16,q4'): string[] => ['--dtype', dtypes, '--concurrency', '1,16,64', '--prompt-len', '128', '--output-len', '128', '--warmup', '1', '--duration', String(durationS)]
  return {
    presets: [
      { preset: '135m', dtypes: ['fp16', 'q4'], greedy: ['fp32', 'fp16', 'q4'], gguf: ['f16', 'q4_0'], context: true, serve: sweep(12), serveMinS: 90, capture: sweep(8, 'fp16') },
      // The Qwen2.5-0.5B shape after 135m, as far as the budget goes: llama.cpp and the context sweep on 135m only.
      { preset: 'qwen0.5b', dtypes: ['fp16', 'q4'], greedy: ['fp16', 'q4'], gguf: [], context: false, serve: sweep(8), serveMinS: 60 },
    ],
    context: { contexts: '256,1024,4096', batches: '1,16', steps: '6', bigSteps: '2' },
    greedyTokens: 32,
  }
}

/** The bundle directory the bench keeps a preset's GroupQueryAttention form in (bundles.ts bundleDir). */
const gqaDir = (c: Ctx, preset: string): string => join(c.work, 'models', `onnxd-${preset}-gqa`)

async function greedyStep(c: Ctx, preset: string, dtypes: string[], tokens: number, timeoutS: number, commands: string[], log: string): Promise<{ result: unknown; differs?: string }> {
  const until = performance.now() + timeoutS * 1000
  const out: Record<string, unknown>[] = []
  const diffs: string[] = []
  for (const dtype of dtypes) {
    const ids: Record<string, number[]> = {}
    const row: Record<string, unknown> = { dtype }
    for (const provider of ['cpu', 'webgpu']) {
      const left = Math.max(1, Math.floor((until - performance.now()) / 1000))
      const r = await must(c, onnxd(c, ['generate', '--model', gqaDir(c, preset), '--dtype', dtype, '--provider', provider, '--max-tokens', String(tokens), '--ignore-eos', '--json', PROMPT]), left, log, `onnxd generate (${dtype}, ${provider})`, commands)
      const j = lastJson(r.stdout)
      if (!j || !Array.isArray(j.ids)) throw new StepError(`onnxd generate (${dtype}, ${provider}) printed no JSON with ids: ${tail(r.stdout, 300)}`)
      if (j.provider !== provider) throw new StepError(`onnxd generate asked for ${provider} ran on ${String(j.provider)}`)
      ids[provider] = j.ids as number[]
      row[provider] = { tokens_per_second: j.tokens_per_second, seconds_with_load: round(r.seconds, 1), runtime: j.runtime, device_cache: j.device_cache }
    }
    const a = ids.cpu
    const b = ids.webgpu
    let first = -1
    for (let i = 0; i < Math.max(a.length, b.length); i++) if (a[i] !== b[i]) {
      first = i
      break
    }
    row.tokens = a.length
    row.match = first < 0
    if (first >= 0) {
      row.first_difference = first
      row.cpu_ids = a
      row.webgpu_ids = b
      diffs.push(`${dtype}: webgpu's greedy tokens differ from the CPU's from token ${first} of ${a.length}`)
    }
    out.push(row)
  }
  return { result: { prompt: PROMPT, comparisons: out }, ...(diffs.length ? { differs: diffs.join('; ') } : {}) }
}

interface SweepCellLike {
  form: string
  runtime: string
  batch: number
  context: number
  msPerStep: number
  mbPerStep: number
  rsd: number
}

async function contextStep(c: Ctx, preset: string, p: Plan['context'], timeoutS: number, commands: string[], log: string): Promise<{ result: unknown }> {
  const outDir = join(c.out, 'bench')
  const r = await must(
    c,
    onnxd(c, ['bench', 'context', '--preset', preset, '--forms', 'gqa', '--runtimes', 'capi,js', '--provider', 'webgpu', '--contexts', p.contexts, '--batches', p.batches, '--steps', p.steps, '--big-steps', p.bigSteps, '--models-dir', join(c.work, 'models'), '--out', outDir, '--quiet']),
    timeoutS,
    log,
    'onnxd bench context',
    commands,
  )
  const path = /JSON: (.+)$/m.exec(r.stdout)?.[1]?.trim()
  if (!path || !existsSync(path)) throw new StepError(`onnxd bench context wrote no report: ${tail(r.stdout, 300)}`)
  const rep = JSON.parse(readFileSync(path, 'utf8')) as { cells: SweepCellLike[] }
  return { result: { report: path.replace(`${c.out}/`, ''), cells: rep.cells.map((x) => ({ form: x.form, runtime: x.runtime, batch: x.batch, context: x.context, ms_per_step: round(x.msPerStep, 3), mb_per_step: round(x.mbPerStep, 3), rsd: round(x.rsd, 0) })) } }
}

interface BenchLevelLike {
  max_concurrency: number
  completed: number
  failed: number
  cut: number
  output_throughput: number
  median_ttft_ms: number
  mean_tpot_ms: number
  engine?: { decode_steps: number; graph_replays?: number }
}

interface BenchScenarioLike {
  name: string
  target?: string
  provider?: string | null
  skipped?: boolean
  reason?: string
  levels?: BenchLevelLike[]
}

async function serveStep(c: Ctx, x: PresetPlan, llama: boolean, timeoutS: number, commands: string[], log: string): Promise<{ result: unknown }> {
  const preset = x.preset
  const outDir = join(c.out, 'bench')
  const name = `serve-${preset}`
  const args = ['bench', '--preset', preset, '--provider', 'webgpu', '--attention', 'gqa', ...x.serve, ...(llama ? ['--llama-cpp', x.gguf.join(','), '--llama-gpu', 'vulkan'] : ['--no-llama-cpp']), '--no-peer', '--no-unbatched', '--models-dir', join(c.work, 'models'), '--out', outDir, '--name', name, '--no-progress']
  await must(c, onnxd(c, args), timeoutS, log, 'onnxd bench', commands)
  const path = join(outDir, `${name}.json`)
  if (!existsSync(path)) throw new StepError(`onnxd bench wrote no ${path}`)
  const rep = JSON.parse(readFileSync(path, 'utf8')) as {
    scenarios: BenchScenarioLike[]
    references: { ort_ceiling: unknown; ort_ceiling_by_form?: Record<string, unknown> }
    target_ratios: unknown
    llama_cpp_ratios: unknown
    machine: { provider: string }
    notes: string[]
  }
  const ceiling = (x: unknown): unknown => {
    const r = x as { skipped?: boolean; reason?: string; api?: string; decode?: { batch: number; tokens_per_s: number }[]; prefill?: { tokens_per_s: number } }
    if (r.skipped) return { skipped: r.reason }
    return { api: r.api, prefill_tokens_per_s: round(r.prefill?.tokens_per_s ?? NaN, 1), decode_tokens_per_s: Object.fromEntries((r.decode ?? []).map((d) => [d.batch, round(d.tokens_per_s, 1)])) }
  }
  return {
    result: {
      report: path.replace(`${c.out}/`, ''),
      provider: rep.machine.provider,
      targets: rep.scenarios.map((s) =>
        s.skipped
          ? { name: s.target ?? s.name, skipped: s.reason }
          : { name: s.target ?? s.name, provider: s.provider ?? null, levels: (s.levels ?? []).map((l) => ({ streams: l.max_concurrency, output_tok_s: round(l.output_throughput, 1), ttft_p50_ms: round(l.median_ttft_ms, 1), tpot_mean_ms: round(l.mean_tpot_ms, 2), completed: l.completed, failed: l.failed, cut: l.cut })) },
      ),
      ort_ceiling: Object.fromEntries(Object.entries(rep.references.ort_ceiling_by_form ?? { baseline: rep.references.ort_ceiling }).map(([k, v]) => [k, ceiling(v)])),
      target_ratios: rep.target_ratios,
      llama_cpp_ratios: rep.llama_cpp_ratios,
      notes: rep.notes,
    },
  }
}

/**
 * The node flags of the capture step: graph capture, and sequences of at most 512 tokens (the sweep's are 256), so that
 * the cache allocated once at that length holds --max-running's slots (at 135m's context, 8,192, the default budget
 * holds 22) and the recorded attention runs over 512 positions, not 8,192.
 */
const CAPTURE_NODE_ARGS = ['--node-arg=--graph-capture', '--node-arg=--max-model-len=512']

/**
 * The serving sweep with the node's WebGPU graph capture (`--node-arg=--graph-capture`), and each level's output tok/s
 * over the same target's in the serve step (run minutes apart on the same device: read it as a first look).
 */
async function captureStep(c: Ctx, preset: string, sweep: string[], serve: StepRecord, timeoutS: number, commands: string[], log: string): Promise<{ result: unknown }> {
  const outDir = join(c.out, 'bench')
  const name = `capture-${preset}`
  const args = ['bench', '--preset', preset, '--provider', 'webgpu', '--attention', 'gqa', ...sweep, ...CAPTURE_NODE_ARGS, '--no-llama-cpp', '--no-peer', '--no-unbatched', '--no-ceiling', '--models-dir', join(c.work, 'models'), '--out', outDir, '--name', name, '--no-progress']
  await must(c, onnxd(c, args), timeoutS, log, 'onnxd bench', commands)
  const path = join(outDir, `${name}.json`)
  if (!existsSync(path)) throw new StepError(`onnxd bench wrote no ${path}`)
  const rep = JSON.parse(readFileSync(path, 'utf8')) as { scenarios: BenchScenarioLike[] }
  const eager = (serve.result as { targets?: { name: string; levels?: { streams: number; output_tok_s: number }[] }[] } | undefined)?.targets ?? []
  const targets = rep.scenarios.map((s) => {
    const target = s.target ?? s.name
    if (s.skipped) return { name: target, skipped: s.reason }
    const before = eager.find((t) => t.name === target)
    return {
      name: target,
      levels: (s.levels ?? []).map((l) => {
        const e = before?.levels?.find((x) => x.streams === l.max_concurrency)
        return {
          streams: l.max_concurrency,
          output_tok_s: round(l.output_throughput, 1),
          ttft_p50_ms: round(l.median_ttft_ms, 1),
          tpot_mean_ms: round(l.mean_tpot_ms, 2),
          completed: l.completed,
          failed: l.failed,
          over_serve: e ? round(l.output_throughput / e.output_tok_s, 2) : null,
          // The node's own count: the level's decode steps, and those that ran as the recorded graph.
          decode_steps: l.engine?.decode_steps ?? null,
          graph_replays: l.engine?.graph_replays ?? null,
        }
      }),
    }
  })
  return { result: { report: path.replace(`${c.out}/`, ''), node_args: CAPTURE_NODE_ARGS.map((a) => a.replace('--node-arg=', '')), targets } }
}

// ---- tasks (each in a child process of its own) ----

async function runTask(name: string, app: string, mode: Mode, v: Record<string, string | boolean | undefined>): Promise<void> {
  const log = (s: string): void => void process.stderr.write(`${s}\n`)
  const str = (k: string): string => {
    const x = v[k]
    if (typeof x !== 'string') throw new Error(`--task ${name} needs --${k}`)
    return x
  }
  if (name === 'probe') {
    const ort = (await import(pathToFileURL(createRequire(join(app, 'package.json')).resolve('onnxruntime-node')).href)) as typeof import('onnxruntime-node')
    const { webgpuProbe } = (await import(moduleUrl(app, mode, 'engine/model/session'))) as typeof import('../../src/engine/model/session.js')
    const { encodeModel, DataType } = (await import(moduleUrl(app, mode, 'engine/model/onnx-proto'))) as typeof import('../../src/engine/model/onnx-proto.js')
    // First a one-node graph on webgpu with ORT's log at its most verbose (set before ORT's environment and the WebGPU
    // context exist), for whatever it says of the adapter Dawn picks; then the node's own probe gives the verdict.
    const f = (n: string) => ({ name: n, type: { tensor_type: { elem_type: DataType.FLOAT, shape: { dim: [{ dim_value: 1 }] } } } })
    const model = encodeModel({ ir_version: 8, opset_import: [{ domain: '', version: 17 }], producer_name: 'onnxd', producer_version: '1', graph: { name: 'probe', node: [{ name: 'add', op_type: 'Add', input: ['x', 'x'], output: ['y'] }], initializer: [], input: [f('x')], output: [f('y')] } })
    ort.env.logLevel = 'verbose'
    try {
      const s = await ort.InferenceSession.create(model, { executionProviders: ['webgpu'], logSeverityLevel: 0, logVerbosityLevel: 0 })
      await s.run({ x: new ort.Tensor('float32', Float32Array.of(1), [1]) })
      await s.release()
    } catch (e) {
      log(`verbose session: ${(e as Error).message}`)
    }
    ort.env.logLevel = 'warning'
    const why = await webgpuProbe()
    process.stdout.write(JSON.stringify({ no_adapter: why }) + '\n')
    return
  }
  const bundles = (await import(moduleUrl(app, mode, 'bench/bundles'))) as typeof import('../../src/bench/bundles.js')
  const t0 = performance.now()
  if (name === 'build') {
    const dtypes = str('dtypes').split(',').filter(Boolean) as ('fp16' | 'q4' | 'int8')[]
    const dir = await bundles.ensureBundle(str('models'), str('preset'), 'gqa', log, dtypes)
    process.stdout.write(JSON.stringify({ dir, seconds: round((performance.now() - t0) / 1000, 1) }) + '\n')
  } else if (name === 'gguf') {
    const file = await bundles.ensureGguf(str('models'), { preset: str('preset') }, str('type') as 'f16', log)
    process.stdout.write(JSON.stringify({ file, seconds: round((performance.now() - t0) / 1000, 1) }) + '\n')
  } else throw new Error(`unknown task ${name}`)
}

// ---- main ----

function versionOf(app: string, pkg: string): string | null {
  try {
    return (JSON.parse(readFileSync(join(app, 'node_modules', pkg, 'package.json'), 'utf8')) as { version: string }).version
  } catch {
    return null
  }
}

export async function deviceCheck(o: { app: string; mode: Mode; out: string; work: string; budgetS: number; dry: boolean; unpackS: number | null }): Promise<DeviceReport> {
  const started = performance.now()
  mkdirSync(join(o.out, 'logs'), { recursive: true })
  mkdirSync(join(o.work, 'models'), { recursive: true })
  const manifestPath = join(o.app, '..', 'MANIFEST.json')
  const vulkanPkg = join(o.app, 'node_modules', '@node-llama-cpp', 'linux-x64-vulkan', 'package.json')
  const c: Ctx = {
    app: o.app,
    mode: o.mode,
    out: o.out,
    work: o.work,
    dry: o.dry,
    started,
    deadline: started + o.budgetS * 1000,
    noWebgpu: null,
    llamaCpp: existsSync(vulkanPkg) && existsSync(join(o.app, 'node_modules', 'node-llama-cpp', 'package.json')) ? null : "llama.cpp's Vulkan build (@node-llama-cpp/linux-x64-vulkan) is not packed",
    report: {
      kind: 'onnxd-device-check',
      schema: 1,
      created: new Date().toISOString(),
      dry_run: o.dry,
      budget_s: o.budgetS,
      unpack_s: o.unpackS,
      elapsed_s: 0,
      finished: false,
      mode: o.mode,
      device: { nvidia_smi: null, vulkan: null, webgpu_adapter: null, webgpu_log: [], cpu: cpus()[0]?.model ?? 'unknown', cores: cpus().length, memory_gb: round(totalmem() / 1024 ** 3, 1), vk_driver_files: process.env.VK_DRIVER_FILES ?? process.env.VK_ICD_FILENAMES ?? null },
      versions: {
        node: process.version,
        onnxd: (JSON.parse(readFileSync(join(o.app, 'package.json'), 'utf8')) as { version: string }).version,
        'onnxruntime-node': versionOf(o.app, 'onnxruntime-node'),
        'node-llama-cpp': versionOf(o.app, 'node-llama-cpp'),
        '@node-llama-cpp/linux-x64-vulkan': versionOf(o.app, '@node-llama-cpp/linux-x64-vulkan'),
      },
      manifest: o.mode === 'dist' && existsSync(manifestPath) ? (JSON.parse(readFileSync(manifestPath, 'utf8')) as unknown) : null,
      steps: [],
      notes: [],
    },
  }
  const p = plan(o.dry)
  if (o.dry) c.report.notes.push('dry run: the tiny preset and the fewest, shortest steps; says nothing about speed')
  save(c)
  const needWebgpu = (): string | null => (c.noWebgpu === null ? null : `no WebGPU adapter: ${c.noWebgpu}`)
  const built = new Map<string, boolean>()
  const needBuilt = (preset: string) => (): string | null => needWebgpu() ?? (built.get(preset) ? null : `build:${preset} did not complete`)

  await step(c, { name: 'device', minS: 5, capS: 30, run: (t, cmds, log) => deviceStep(c, t, cmds, log) })
  const probe = await step(c, { name: 'webgpu', minS: 10, capS: o.dry ? 60 : 90, run: (t, cmds, log) => webgpuStep(c, t, cmds, log) })
  if (probe.status !== 'ok') c.noWebgpu = `the probe ${probe.status}`
  // The builds are CPU work: every preset's starts at once (the machine has cores to spare), and a preset's timed
  // steps (the context sweep, the serving sweep) wait until every build is over, so no build runs beside a measurement;
  // its correctness checks (GGUF, greedy tokens) do not wait.
  const build = (x: PresetPlan): Promise<StepRecord> =>
    step(c, {
      name: `build:${x.preset}`,
      minS: o.dry ? 10 : x.preset === '135m' ? 40 : 90,
      capS: o.dry ? 60 : 240,
      blocked: needWebgpu,
      run: async (t, cmds, log) => {
        const r = await must(c, task('build', ['--preset', x.preset, '--dtypes', x.dtypes.join(','), '--models', join(c.work, 'models')], c), t, log, `building ${x.preset}`, cmds)
        return { result: { attention: 'gqa', dtypes: ['fp32', ...x.dtypes], ...lastJson(r.stdout) } }
      },
    }).then((b) => {
      built.set(x.preset, b.status === 'ok')
      return b
    })
  const builds = p.presets.map(build)
  for (const [i, x] of p.presets.entries()) {
    await builds[i]
    if (x.gguf.length)
      await step(c, {
        name: `gguf:${x.preset}`,
        minS: o.dry ? 5 : 30,
        capS: o.dry ? 60 : 120,
        blocked: () => c.llamaCpp ?? needBuilt(x.preset)(),
        run: async (t, cmds, log) => {
          const until = performance.now() + t * 1000
          const files = []
          for (const type of x.gguf) {
            const r = await must(c, task('gguf', ['--preset', x.preset, '--type', type, '--models', join(c.work, 'models')], c), Math.max(1, Math.floor((until - performance.now()) / 1000)), log, `writing ${type} GGUF`, cmds)
            files.push({ type, ...lastJson(r.stdout) })
          }
          return { result: { files } }
        },
      })
    await step(c, { name: `greedy:${x.preset}`, minS: o.dry ? 10 : 30, capS: o.dry ? 60 : 120, blocked: needBuilt(x.preset), run: (t, cmds, log) => greedyStep(c, x.preset, x.greedy, p.greedyTokens, t, cmds, log) })
    await Promise.all(builds)
    if (x.context) await step(c, { name: `context:${x.preset}`, minS: o.dry ? 10 : 45, capS: o.dry ? 60 : 120, blocked: needBuilt(x.preset), run: (t, cmds, log) => contextStep(c, x.preset, p.context, t, cmds, log) })
    const llama = x.gguf.length > 0 && c.llamaCpp === null && c.report.steps.find((s) => s.name === `gguf:${x.preset}`)?.status === 'ok'
    if (x.gguf.length && !llama) c.report.notes.push(`serve:${x.preset}: llama.cpp left out: ${c.llamaCpp ?? `gguf:${x.preset} did not complete`}`)
    const serve = await step(c, { name: `serve:${x.preset}`, minS: x.serveMinS, capS: o.dry ? 90 : 240, blocked: needBuilt(x.preset), run: (t, cmds, log) => serveStep(c, x, llama, t, cmds, log) })
    if (x.capture) {
      const args = x.capture
      await step(c, { name: `capture:${x.preset}`, minS: o.dry ? 15 : 45, capS: o.dry ? 90 : 150, blocked: needBuilt(x.preset), run: (t, cmds, log) => captureStep(c, x.preset, args, serve, t, cmds, log) })
    }
  }
  c.report.finished = true
  save(c)
  return c.report
}

async function main(argv: string[]): Promise<number> {
  const { values: v } = parseArgs({
    args: argv,
    options: {
      task: { type: 'string' },
      app: { type: 'string' },
      mode: { type: 'string' },
      out: { type: 'string' },
      work: { type: 'string' },
      budget: { type: 'string' },
      'dry-run': { type: 'boolean' },
      'unpack-seconds': { type: 'string' },
      preset: { type: 'string' },
      dtypes: { type: 'string' },
      type: { type: 'string' },
      models: { type: 'string' },
    },
  })
  const app = resolve(v.app ?? '.')
  const mode: Mode = v.mode === 'src' ? 'src' : 'dist'
  if (v.task) {
    await runTask(v.task, app, mode, v)
    return 0
  }
  if (!v.out) {
    process.stderr.write('usage: check --out DIR [--app DIR] [--mode dist|src] [--work DIR] [--budget S] [--dry-run]\n')
    return 2
  }
  const dry = v['dry-run'] === true
  const r = await deviceCheck({
    app,
    mode,
    out: resolve(v.out),
    work: resolve(v.work ?? join(v.out, '..', 'onnxd-device-work')),
    budgetS: Number(v.budget ?? (dry ? 85 : 450)),
    dry,
    unpackS: v['unpack-seconds'] ? Number(v['unpack-seconds']) : null,
  })
  const counts = r.steps.reduce<Record<string, number>>((a, s) => ({ ...a, [s.status]: (a[s.status] ?? 0) + 1 }), {})
  process.stderr.write(`[device-check] done in ${r.elapsed_s} s: ${Object.entries(counts).map(([k, n]) => `${n} ${k}`).join(', ')}; report ${join(resolve(v.out), 'device-check.json')}\n`)
  return 0
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) process.exitCode = await main(process.argv.slice(2))
