// `onnxd bench` options: flags parsed once into a frozen BenchConfig, every problem named with its flag. The
// defaults are the issue's standard run (135m preset, concurrency 1,4,16,64, fixed lengths with ignore_eos, closed
// loop, every reference); --scenario long is issue 12's long-prompt serving run; --smoke is either on the tiny
// preset, small enough for the test suite. --attention and --runtime list the onnxd targets (graph form x step
// runtime) the bench starts, each compared with the --baseline target. --provider puts the nodes it starts and the
// ORT references on one execution provider; --llama-gpu puts llama.cpp on a GPU backend.
import { parseArgs } from 'node:util'
import { resolve } from 'node:path'
import { ATTENTION_FORMS, DEFAULT_ATTENTION, WEIGHT_DTYPES, type Attention } from '../builder/index.js'
import { GGUF_TYPES, type GgufType } from '../builder/gguf.js'
import { RUNTIMES, defaultRuntime, type Runtime } from '../engine/bench-surface.js'
import { OnnxdError } from '../shared/errors.js'
import { PROVIDERS, type Provider } from '../shared/model.js'
import type { ProgressMode } from './progress.js'
import { formatLength, parseLength, readPromptFile, type LengthDist, type PromptFile } from './workload.js'

export type ScenarioKind = 'standard' | 'long' | 'chat'

/** The weight forms an onnxd target can serve: the builder's float32 model.onnx, or one of its variants; `q4-as-int8`
 * is the q4 file served with --nbits-as-int8 (its 4-bit weights on ORT's int8 kernels). */
export const TARGET_DTYPES = ['fp32', ...WEIGHT_DTYPES, 'q4-as-int8'] as const
export type TargetDtype = (typeof TARGET_DTYPES)[number]

/** The file a target's weight form is served from (the bundle's --dtype), and whether the node converts it (--nbits-as-int8). */
export const servedFile = (d: TargetDtype): { dtype: Exclude<TargetDtype, 'q4-as-int8'>; nbitsAsInt8: boolean } => (d === 'q4-as-int8' ? { dtype: 'q4', nbitsAsInt8: true } : { dtype: d, nbitsAsInt8: false })

/** The GGUF type llama.cpp users run in place of each onnxd weight form. */
export const GGUF_PAIR: Partial<Record<TargetDtype, GgufType>> = { fp32: 'f32', fp16: 'f16', int8: 'q8_0', q4: 'q4_0', 'q4-as-int8': 'q4_0' }

/** One onnxd target the bench starts: a preset built in one graph form and weight form, served with one step runtime. */
export interface TargetSpec {
  attention: Attention
  runtime: Runtime
  dtype: TargetDtype
  /** False: the node runs with --no-prefix-caching. */
  prefixCaching: boolean
  /** `onnxd ` + targetKey(). */
  name: string
}

/** The runtime an onnxd node serves with by default on the CPU the bench runs it on (model/runtime.ts decides). */
const NODE_RUNTIME = defaultRuntime('cpu')

/**
 * The onnxd targets a run starts unless --attention/--runtime say otherwise, per scenario: one constant, which the
 * lead sets by measurement. Standard: the production path (the builder's default form, GroupQueryAttention, and the
 * node's default runtime). Long: issue 12's comparison, the C-API runtime against the JS API on the
 * GroupQueryAttention graph.
 */
export const DEFAULT_TARGETS: Record<ScenarioKind, { attention: Attention[]; runtime: Runtime[]; prefixCaching: boolean[]; baseline: string }> = {
  standard: { attention: [DEFAULT_ATTENTION], runtime: [NODE_RUNTIME], prefixCaching: [true], baseline: `${DEFAULT_ATTENTION}/${NODE_RUNTIME}` },
  long: { attention: ['gqa'], runtime: ['js', 'capi'], prefixCaching: [true], baseline: 'gqa/js' },
  // The chat workload's question: what prefix caching gives on a shared system prompt, in the default form.
  chat: { attention: [DEFAULT_ATTENTION], runtime: ['capi'], prefixCaching: [true, false], baseline: `${DEFAULT_ATTENTION}/capi/no-prefix-cache` },
}

type TargetFields = Pick<TargetSpec, 'attention' | 'runtime' | 'dtype' | 'prefixCaching'>

/** A target as --baseline names it: `gqa/capi`, with `/q4` (etc.) for a weight form other than fp32 and
 * `/no-prefix-cache` when prefix caching is off. */
export const targetKey = (t: TargetFields): string => `${t.attention}/${t.runtime}${t.dtype === 'fp32' ? '' : `/${t.dtype}`}${t.prefixCaching ? '' : '/no-prefix-cache'}`

export const targetName = (t: TargetFields): string => `onnxd ${targetKey(t)}`

/** One llama.cpp server the bench starts (src/bench/peer/llama-cpp.ts) on the preset's weights written as GGUF. */
export interface LlamaSpec {
  type: GgufType
  /** llama.cpp compute threads. */
  threads: number
  gpu: LlamaGpu
  /** Each sequence keeps its tokens between requests and a request reuses the longest common prefix (llama-server's
   * `cache_prompt`, its default); false: the server runs with --no-prompt-cache. */
  promptCache: boolean
  /** `llama.cpp <type> t<threads>`, with ` <gpu>` on a GPU backend and ` no-prompt-cache` without the prompt cache. */
  name: string
}

/** llama.cpp's backend: its CPU build, or node-llama-cpp's prebuilt Vulkan or CUDA build with every layer offloaded. */
export const LLAMA_GPUS = ['none', 'vulkan', 'cuda'] as const
export type LlamaGpu = (typeof LLAMA_GPUS)[number]

export const llamaName = (type: GgufType, threads: number, gpu: LlamaGpu = 'none', promptCache = true): string => `llama.cpp ${type} t${threads}${gpu === 'none' ? '' : ` ${gpu}`}${promptCache ? '' : ' no-prompt-cache'}`

export interface BenchConfig {
  scenario: ScenarioKind
  /** The onnxd targets the bench starts (empty for --url / --facade, whose one target is the given server). */
  targets: TargetSpec[]
  /** The execution provider of the nodes the bench starts and of the ORT references (--provider, default cpu). */
  provider: Provider
  /** The llama.cpp servers that run beside the targets, level by level in the same rotation; why none, if none. */
  llamaCpp: LlamaSpec[]
  llamaCppOff: string | null
  /** The target whose output tok/s every target's is divided by, per level; null with fewer than two targets. */
  baseline: string | null
  /** Where load goes: a node it starts itself, an existing node, or a facade. */
  target:
    | { kind: 'spawn'; model: string | null; preset: string | null }
    | { kind: 'node'; url: string; model: string | null }
    | { kind: 'facade'; url: string; apiKey: string; model: string | null }
  modelsDir: string
  servedModel: string | null
  concurrency: number[]
  /** Requests/s with Poisson arrivals; Infinity = closed loop. */
  requestRate: number
  /** Requests per level; null = max(minRequests, 2 × concurrency), or one wave (= concurrency) when `wave`. */
  numRequests: number | null
  minRequests: number
  wave: boolean
  /** Per-level deadline (s) for the target under test; null = none. */
  durationS: number | null
  /** Per-level deadline (s) for the unbatched node and the peer, which serve one request at a time. */
  refDurationS: number
  warmup: number
  promptLen: LengthDist
  outputLen: LengthDist
  /** Tokens (or words) every synthetic prompt starts with, before its own promptLen. */
  sharedPrefixLen: number
  prompts: PromptFile | null
  seed: number
  temperature: number
  ignoreEos: boolean
  references: { ceiling: boolean; matmul: boolean; unbatched: boolean; peer: boolean }
  peerConcurrency: number[]
  matmulSizes: number[]
  /** Timed runs of each ORT reference: at least minRuns, more while under minSeconds. */
  refBudget: { warmup: number; minRuns: number; minSeconds: number; maxRuns: number }
  threads: number
  nodeArgs: string[]
  outDir: string
  name: string
  progress: ProgressMode
  smoke: boolean
  readyTimeoutS: number
  /** The command line, for the report. */
  argv: string[]
}

export const USAGE = `usage: onnxd bench [options]
       onnxd bench context [options]        (the context sweep; onnxd bench context --help)
       onnxd bench compare A.json B.json [--json]

Benchmarks a node (one it starts itself, or --url / --facade) with a concurrency sweep and reports vLLM's
standard serving figures, next to references measured in the same run: the raw ONNX Runtime decode ceiling, the
machine's matmul peak, the same node unbatched (max one running sequence) and transformers.js serving the same
bundle. Prints a table, writes JSON and an SVG chart (see docs/benchmarks.md).

scenario:
  --scenario NAME        standard (default: prompt 128, output 128, concurrency 1,4,16,64, every reference) or
                         long (prompt 1024, output 256, concurrency 1,16,64, one wave of requests = concurrency per
                         level, each level cut after --duration (default 240 s); targets gqa/js and gqa/capi) or
                         chat (a shared system prompt of 1000 tokens + 50 own tokens, output 128, concurrency
                         1,16,64; targets gqa/capi with prefix caching on and off, beside llama.cpp with its prompt
                         cache)

targets (each a node the bench starts on the preset; at each level they run one after another, alternating order):
  --attention LIST       graph forms to build and serve: gqa, plain (default: gqa, the builder's default)
  --runtime LIST         step runtimes: js, capi (default: the node's, capi on CPU; long: js,capi; chat: capi)
  --prefix-caching LIST  on, off: nodes with prefix caching on and/or off (default: on; chat: on,off)
  --dtype LIST           weight forms to build and serve: fp32, q4, int8, fp16, q4-as-int8 (the q4 file served with
                         --nbits-as-int8) (default fp32)
  --baseline KEY         the target every target's output tok/s is divided by, as FORM/RT[/DTYPE][/no-prefix-cache]
                         (default gqa/capi; long: gqa/js; chat: gqa/capi/no-prefix-cache; js for capi on a GPU)
  --provider NAME        execution provider of the nodes it starts and of the ORT ceiling: cpu (default), webgpu,
                         cuda, tensorrt. On webgpu the runtime is capi (the cache on the device) unless --runtime says
                         js; on cuda and tensorrt it is js, and the default form plain. The ORT ceiling runs on that
                         provider (through the C API with its cache on the device on webgpu), and the matmul peak (CPU)
                         is not measured

target (default: start a node on --preset 135m):
  --model DIR            bundle to start a node on (with --url/--facade: the bundle it serves, for the references)
  --preset NAME          builder preset to start a node on (tiny, small, 135m), built into --models-dir once
  --models-dir DIR       where presets are built (default .cache/models)
  --url URL              an existing node (internal contract); the references need --model or --preset
  --facade URL           an existing facade (/v1/chat/completions), with --api-key K
  --served-model ID      model id to request (default: what the target serves)
  --node-arg ARG         extra flag for nodes the bench starts (repeatable), e.g. --node-arg=--intra-op-threads=2

load:
  --concurrency LIST     concurrent streams per level (default 1,4,16,64)
  --request-rate R       Poisson arrivals at R req/s, capped by the level's concurrency (default inf: closed loop)
  --num-requests N       requests per level (default max(4, 2 x concurrency))
  --duration S           cut each level of the targets after S seconds (long: default 240)
  --ref-duration S       cut each level of the unbatched node and the peer after S seconds (default 30)
  --warmup N             untimed requests before each target's sweep (default 2)
  --prompt-len N|A:B     prompt tokens, fixed or uniform (default 128)
  --output-len N|A:B     output tokens, fixed or uniform (default 128)
  --shared-prefix-len N  tokens every prompt starts with, the same for all (default 0; chat: 1000)
  --prompts FILE         JSONL prompts instead ("text", {"prompt"}, {"messages"} or {"input_ids"}, optional "max_tokens")
  --seed N               seeds prompts, lengths and arrivals (default 0)
  --temperature T        (default 0: greedy)
  --no-ignore-eos        stop at EOS instead of generating exactly the output length

references:
  --no-ceiling --no-matmul --no-unbatched --no-peer    skip one (the report says so)
  --peer-concurrency LIST  levels for the transformers.js peer (default: --concurrency)
  --llama-cpp LIST       GGUF types llama.cpp serves beside the targets, in their rotation at every level: f32, f16,
                         q8_0, q4_0 (default: the types paired with the targets' --dtype: fp32-f32, fp16-f16,
                         int8-q8_0, q4-q4_0; standard and chat scenarios; long: only when given). Needs the
                         node-llama-cpp dev dependency; the report says if absent
  --llama-threads LIST   llama.cpp compute threads, one server per value (default 1; its threads spin-wait, so on a
                         busy host 2 can be slower than 1)
  --llama-prompt-cache LIST  on, off: llama.cpp servers with llama-server's per-slot prompt cache (cache_prompt) on
                         and/or off (default on); each is compared with the onnxd targets whose prefix caching matches
  --llama-gpu NAME       none (default: llama.cpp's CPU build), vulkan or cuda: node-llama-cpp's prebuilt build for
                         that backend (@node-llama-cpp/linux-x64-vulkan, ...), every layer on the GPU
  --no-llama-cpp         no llama.cpp servers
  --threads N            ORT intra-op threads of the ORT references (default 0: all cores, as the node)

output:
  --out DIR              report directory (default bench/results)
  --name NAME            report file name stem (default onnxd-bench-<time>)
  --no-progress          no progress bar (step lines still go to stderr)
  --quiet, -q            nothing on stderr
  --smoke                a sub-minute run on the tiny preset (the test suite runs it)
`

const parseList = <T extends string>(flag: string, text: string, allowed: readonly T[], problems: string[]): T[] => {
  const xs = [...new Set(text.split(',').map((s) => s.trim()))]
  const bad = xs.filter((x) => !allowed.includes(x as T))
  if (!xs.length || bad.length) problems.push(`--${flag} must be a comma-separated list of ${allowed.join(', ')}. Given: ${text.slice(0, 64)}`)
  return xs.filter((x) => allowed.includes(x as T)) as T[]
}

const OPTIONS = {
  model: { type: 'string' },
  preset: { type: 'string' },
  'models-dir': { type: 'string' },
  url: { type: 'string' },
  facade: { type: 'string' },
  'api-key': { type: 'string' },
  'served-model': { type: 'string' },
  'node-arg': { type: 'string', multiple: true },
  concurrency: { type: 'string' },
  'request-rate': { type: 'string' },
  'num-requests': { type: 'string' },
  duration: { type: 'string' },
  'ref-duration': { type: 'string' },
  warmup: { type: 'string' },
  'prompt-len': { type: 'string' },
  'output-len': { type: 'string' },
  'shared-prefix-len': { type: 'string' },
  'prefix-caching': { type: 'string' },
  prompts: { type: 'string' },
  seed: { type: 'string' },
  temperature: { type: 'string' },
  'no-ignore-eos': { type: 'boolean' },
  'no-ceiling': { type: 'boolean' },
  'no-matmul': { type: 'boolean' },
  'no-unbatched': { type: 'boolean' },
  'no-peer': { type: 'boolean' },
  'llama-cpp': { type: 'string' },
  'llama-threads': { type: 'string' },
  'no-llama-cpp': { type: 'boolean' },
  'llama-prompt-cache': { type: 'string' },
  'llama-gpu': { type: 'string' },
  provider: { type: 'string' },
  dtype: { type: 'string' },
  'peer-concurrency': { type: 'string' },
  threads: { type: 'string' },
  out: { type: 'string' },
  name: { type: 'string' },
  'no-progress': { type: 'boolean' },
  quiet: { type: 'boolean', short: 'q' },
  smoke: { type: 'boolean' },
  scenario: { type: 'string' },
  attention: { type: 'string' },
  runtime: { type: 'string' },
  baseline: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const

export type ParsedFlags = ReturnType<typeof parseArgs<{ args: string[]; options: typeof OPTIONS; strict: true; allowPositionals: true }>>['values']

export function parseFlags(argv: string[]): { values: ParsedFlags; positionals: string[] } {
  try {
    return parseArgs({ args: argv, options: OPTIONS, strict: true, allowPositionals: true })
  } catch (e) {
    throw new OnnxdError('config', `${(e as Error).message}\n\n${USAGE}`)
  }
}

/** Reads flags into a config; lists every problem at once. */
export function benchConfig(argv: string[]): BenchConfig {
  const { values: v } = parseFlags(argv)
  const problems: string[] = []
  const smoke = v.smoke === true
  const int = (flag: string, text: string | undefined, def: number, min = 0): number => {
    if (text === undefined) return def
    const n = Number(text)
    if (!/^\d+$/.test(text.trim()) || n < min) problems.push(`--${flag} must be an integer >= ${min}. Given: ${text}`)
    return n
  }
  const pos = (flag: string, text: string | undefined, def: number): number => {
    if (text === undefined) return def
    const n = text === 'inf' ? Infinity : Number(text)
    if (!(n > 0)) problems.push(`--${flag} must be a positive number${flag === 'request-rate' ? ' or inf' : ''}. Given: ${text}`)
    return n
  }
  const list = (flag: string, text: string | undefined, def: number[]): number[] => {
    if (text === undefined) return def
    const xs = text.split(',').map((s) => Number(s.trim()))
    if (!xs.length || xs.some((x) => !Number.isInteger(x) || x < 1)) problems.push(`--${flag} must be a comma-separated list of positive integers. Given: ${text}`)
    return xs
  }
  const length = (flag: string, text: string | undefined, def: string): LengthDist => {
    try {
      return parseLength(flag, text ?? def)
    } catch (e) {
      problems.push((e as Error).message)
      return parseLength(flag, def)
    }
  }
  if (v.url && v.facade) problems.push('--url and --facade are exclusive')
  if (v.facade && !v['api-key']) problems.push('--facade needs --api-key')
  if (v.model && v.preset) problems.push('--model and --preset are exclusive')
  const scenario = (v.scenario ?? 'standard') as ScenarioKind
  if (!(scenario in DEFAULT_TARGETS)) problems.push(`--scenario must be one of ${Object.keys(DEFAULT_TARGETS).join(', ')}. Given: ${v.scenario!.slice(0, 32)}`)
  const long = scenario === 'long'
  const chat = scenario === 'chat'
  const defaults = DEFAULT_TARGETS[scenario] ?? DEFAULT_TARGETS.standard
  const provider = (v.provider ?? 'cpu') as Provider
  if (!PROVIDERS.includes(provider)) problems.push(`--provider must be one of ${PROVIDERS.join(', ')}. Given: ${v.provider!.slice(0, 32)}`)
  // On a GPU provider the defaults are the node's there (capi on webgpu, with its cache on the device; js on cuda and
  // tensorrt, which run js only).
  const gpuRuntime = provider === 'cpu' ? null : defaultRuntime(provider)
  const remote = Boolean(v.url || v.facade)
  if (remote && (v.attention || v.runtime || v.baseline || v['prefix-caching'] || v.dtype)) {
    problems.push('--attention, --runtime, --dtype, --prefix-caching and --baseline choose the nodes the bench starts: not with --url or --facade')
  }
  if (v.model && v.dtype) problems.push('--dtype builds the preset in each weight form: not with --model (pass --preset, or --node-arg=--dtype=X)')
  if (v.model && v.attention) problems.push('--attention builds the preset in each form: not with --model (pass --preset)')
  // On the js runtime (cuda, tensorrt) a GroupQueryAttention cache crosses every step (0.5-0.7x the plain form's
  // throughput): there the default form is plain, as docs/configuration.md tells operators to build.
  const jsOnGpu = gpuRuntime === 'js'
  const forms = v.attention ? parseList('attention', v.attention, ATTENTION_FORMS, problems) : jsOnGpu ? (['plain'] as Attention[]) : defaults.attention
  const runtimes = v.runtime ? parseList('runtime', v.runtime, RUNTIMES, problems) : gpuRuntime ? [gpuRuntime] : defaults.runtime
  if (gpuRuntime && provider !== 'webgpu' && runtimes.some((r) => r !== gpuRuntime)) problems.push(`--runtime ${runtimes.filter((r) => r !== gpuRuntime).join(',')} runs on the cpu and webgpu providers only; --provider ${provider} runs ${gpuRuntime}`)
  const caching = v['prefix-caching'] ? parseList('prefix-caching', v['prefix-caching'], ['on', 'off'] as const, problems).map((x) => x === 'on') : defaults.prefixCaching
  const dtypes: TargetDtype[] = v.dtype ? parseList('dtype', v.dtype, TARGET_DTYPES, problems) : ['fp32']
  const targets: TargetSpec[] = remote
    ? []
    : forms.flatMap((attention) =>
        runtimes.flatMap((runtime) => dtypes.flatMap((dtype) => caching.map((prefixCaching) => ({ attention, runtime, dtype, prefixCaching, name: targetName({ attention, runtime, dtype, prefixCaching }) })))),
      )
  let baseline: string | null = null
  if (targets.length > 1) {
    const gpuBaseline = gpuRuntime ? defaults.baseline.replace(/\/(js|capi)(?=\/|$)/, `/${gpuRuntime}`) : defaults.baseline
    const want = v.baseline ?? (jsOnGpu ? gpuBaseline.replace(/^gqa\//, 'plain/') : gpuBaseline)
    const hit = targets.find((t) => targetKey(t) === want)
    if (hit) baseline = hit.name
    else if (v.baseline) problems.push(`--baseline must be one of the targets (${targets.map(targetKey).join(', ')}). Given: ${v.baseline.slice(0, 32)}`)
    else baseline = targets[0].name
  }
  const preset = v.preset ?? (v.model || v.url || v.facade ? null : smoke ? 'tiny' : '135m')
  const model = v.model ? resolve(v.model) : null
  const target: BenchConfig['target'] = v.facade
    ? { kind: 'facade', url: v.facade.replace(/\/+$/, ''), apiKey: v['api-key'] ?? '', model }
    : v.url
      ? { kind: 'node', url: v.url.replace(/\/+$/, ''), model }
      : { kind: 'spawn', model, preset }
  const concurrency = list('concurrency', v.concurrency, long || chat ? (smoke ? [1, 4] : [1, 16, 64]) : smoke ? [1, 4, 16] : [1, 4, 16, 64])
  let prompts: PromptFile | null = null
  if (v.prompts) {
    try {
      prompts = readPromptFile(v.prompts)
    } catch (e) {
      problems.push((e as Error).message)
    }
  }
  if (v['no-llama-cpp'] && (v['llama-cpp'] || v['llama-threads'] || v['llama-prompt-cache'])) problems.push('--no-llama-cpp and --llama-cpp/--llama-threads/--llama-prompt-cache are exclusive')
  const ggufTypes = v['llama-cpp'] ? parseList('llama-cpp', v['llama-cpp'], GGUF_TYPES, problems) : [...new Set(dtypes.flatMap((d) => GGUF_PAIR[d] ?? []))]
  const llamaThreads = [...new Set(list('llama-threads', v['llama-threads'], [1]))]
  const llamaCaches = v['llama-prompt-cache'] ? parseList('llama-prompt-cache', v['llama-prompt-cache'], ['on', 'off'] as const, problems).map((x) => x === 'on') : [true]
  const llamaGpu = (v['llama-gpu'] ?? 'none') as LlamaGpu
  if (!LLAMA_GPUS.includes(llamaGpu)) problems.push(`--llama-gpu must be one of ${LLAMA_GPUS.join(', ')}. Given: ${v['llama-gpu']!.slice(0, 32)}`)
  if (v['no-llama-cpp'] && v['llama-gpu']) problems.push('--no-llama-cpp and --llama-gpu are exclusive')
  const llamaCppOff = v['no-llama-cpp']
    ? 'disabled by --no-llama-cpp'
    : long && !v['llama-cpp']
      ? `not part of --scenario ${scenario} (pass --llama-cpp TYPES)`
      : remote && !model
        ? 'no local model bundle: pass --model DIR (the GGUF is written from its weights)'
        : null
  const llamaCpp: LlamaSpec[] = llamaCppOff
    ? []
    : ggufTypes.flatMap((type) => llamaThreads.flatMap((threads) => llamaCaches.map((promptCache) => ({ type, threads, gpu: llamaGpu, promptCache, name: llamaName(type, threads, llamaGpu, promptCache) }))))
  const temperature = v.temperature === undefined ? 0 : Number(v.temperature)
  if (!(temperature >= 0)) problems.push(`--temperature must be >= 0. Given: ${v.temperature}`)
  const cfg: BenchConfig = {
    scenario,
    targets,
    provider,
    baseline,
    llamaCpp,
    llamaCppOff,
    target,
    modelsDir: resolve(v['models-dir'] ?? '.cache/models'),
    servedModel: v['served-model'] ?? null,
    concurrency,
    requestRate: pos('request-rate', v['request-rate'], Infinity),
    numRequests: v['num-requests'] === undefined ? null : int('num-requests', v['num-requests'], 0, 1),
    // The long scenario sends one wave: as many requests as the level's concurrency.
    minRequests: long ? 1 : smoke ? 2 : 4,
    wave: long,
    durationS: v.duration === undefined ? (long ? (smoke ? 30 : 240) : null) : pos('duration', v.duration, 0),
    refDurationS: pos('ref-duration', v['ref-duration'], smoke ? 3 : 30),
    warmup: int('warmup', v.warmup, smoke ? 1 : 2),
    promptLen: length('prompt-len', v['prompt-len'], long ? (smoke ? '64' : '1024') : chat ? (smoke ? '8' : '50') : smoke ? '16' : '128'),
    outputLen: length('output-len', v['output-len'], long ? (smoke ? '32' : '256') : smoke ? '16' : '128'),
    sharedPrefixLen: int('shared-prefix-len', v['shared-prefix-len'], chat ? (smoke ? 64 : 1000) : 0),
    prompts,
    seed: int('seed', v.seed, 0),
    temperature,
    ignoreEos: v['no-ignore-eos'] !== true,
    // The long scenario compares the targets with each other and with ORT on their graph; the one-request-at-a-time
    // references would take hours at these lengths. The chat scenario compares the targets with each other only:
    // ORT alone has no cache shared between requests to measure.
    references: {
      ceiling: !v['no-ceiling'] && !chat,
      matmul: !v['no-matmul'] && !long && !chat && provider === 'cpu',
      unbatched: !v['no-unbatched'] && target.kind === 'spawn' && !long && !chat,
      peer: !v['no-peer'] && !long && !chat,
    },
    peerConcurrency: list('peer-concurrency', v['peer-concurrency'], concurrency),
    matmulSizes: smoke ? [128, 256] : [512, 1024, 2048],
    refBudget: smoke ? { warmup: 1, minRuns: 2, minSeconds: 0.1, maxRuns: 5 } : { warmup: 2, minRuns: 5, minSeconds: 2, maxRuns: 50 },
    threads: int('threads', v.threads, 0),
    nodeArgs: v['node-arg'] ?? [],
    outDir: resolve(v.out ?? 'bench/results'),
    name: v.name ?? '',
    progress: v.quiet ? 'silent' : v['no-progress'] ? 'lines' : 'bar',
    smoke,
    readyTimeoutS: 600,
    argv,
  }
  if (problems.length) throw new OnnxdError('config', `invalid bench options:\n  - ${problems.join('\n  - ')}`)
  return Object.freeze(cfg)
}

/** The configuration as the report records it (lengths written as on the command line). */
export function describeConfig(c: BenchConfig): Record<string, unknown> {
  return {
    scenario: c.scenario,
    targets: c.targets.map((t) => t.name),
    provider: c.provider,
    llama_cpp: c.llamaCpp.map((t) => t.name),
    baseline: c.baseline,
    target: c.target.kind === 'facade' ? { ...c.target, apiKey: '[redacted]' } : c.target,
    served_model: c.servedModel,
    concurrency: c.concurrency,
    request_rate: Number.isFinite(c.requestRate) ? c.requestRate : 'inf',
    num_requests: c.numRequests ?? (c.wave ? 'concurrency (one wave)' : `max(${c.minRequests}, 2 x concurrency)`),
    duration_s: c.durationS,
    ref_duration_s: c.refDurationS,
    warmup: c.warmup,
    prompt_len: c.prompts ? null : formatLength(c.promptLen),
    output_len: formatLength(c.outputLen),
    shared_prefix_len: c.prompts ? null : c.sharedPrefixLen,
    prompts_file: c.prompts?.path ?? null,
    seed: c.seed,
    temperature: c.temperature,
    ignore_eos: c.ignoreEos,
    references: c.references,
    peer_concurrency: c.peerConcurrency,
    matmul_sizes: c.matmulSizes,
    threads: c.threads,
    node_args: c.nodeArgs,
    smoke: c.smoke,
    argv: redactArgv(c.argv),
  }
}

/** The command line with the value of --api-key replaced. */
export function redactArgv(argv: string[]): string[] {
  return argv.map((a, i) => (argv[i - 1] === '--api-key' ? '[redacted]' : a.startsWith('--api-key=') ? '--api-key=[redacted]' : a))
}

/** Requests of one level. */
export const requestsFor = (c: BenchConfig, concurrency: number): number => c.numRequests ?? (c.wave ? concurrency : Math.max(c.minRequests, 2 * concurrency))
