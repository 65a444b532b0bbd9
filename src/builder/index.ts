// Builds the embedded default model bundle (Llama architecture, seeded random weights, real BPE tokenizer) in
// the Hugging Face ONNX export layout (plain-op attention, graph.ts) or the onnxruntime-genai layout
// (GroupQueryAttention, gqa-graph.ts), and makes sure one exists before the engine loads it. Which builder version,
// preset, seed and form made a bundle: the plain form's config.json records it (onnxd_builder); the genai layout's
// in onnxd_builder.json beside genai_config.json, which has no room for it (onnxruntime-genai refuses keys it does
// not know).
// The builder is not part of the runtime engine (which imports nothing from here). Imports: shared, and the
// engine's ONNX protobuf codec (src/engine/model/onnx-proto.ts: the one definition of the file format it writes).
import { randomBytes } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { copyFile, mkdir, readdir, rename, rm, rmdir, stat, writeFile } from 'node:fs/promises'
import { basename, dirname, join, resolve } from 'node:path'
import { OnnxdError } from '../shared/errors.js'
import { gqaGraph } from './gqa-graph.js'
import { llamaGraph } from './graph.js'
import { PRESETS, isPresetName, parameterCount, type Preset, type PresetName } from './presets.js'
import { BOS_ID, EOS_ID, PAD_ID, specialTokensMap, tokenizerConfig, tokenizerJsonText, trainByteLevelBpe } from './tokenizer.js'
import { DEFAULT_INT8, DEFAULT_NBITS, variantGraph, WEIGHT_DTYPES, type Int8Form, type NBitsForm, type WeightDtype } from './quantize.js'
import { writeOnnx } from './write-onnx.js'
import { DTYPE_FILES, type Dtype } from '../shared/model.js'

export { PRESETS, WEIGHT_DTYPES, parameterCount, type Preset, type PresetName, type WeightDtype }

/** Written into model.onnx's producer_version; bump it when the graph or the weights' generation changes. */
export const BUILDER_VERSION = '5'

export interface BuildOptions {
  preset: string
  outDir: string
  /** Weight seed, a non-negative safe integer. Default 0. */
  seed?: number
  /**
   * `gqa` (default, DEFAULT_ATTENTION): the onnxruntime-genai layout (genai_config.json, model.onnx) with
     com.microsoft GroupQueryAttention.
   * `plain`: the Hugging Face ONNX export layout with plain-op attention (config.json, onnx/model.onnx).
   * Both carry the same weights for the same preset and seed.
   */
  attention?: Attention
  /**
   * Weight forms written beside the float32 model.onnx (which is always written), under the file names real
   * exports use: model_q4.onnx, model_int8.onnx and model_quantized.onnx (the same file), model_fp16.onnx.
   */
  dtypes?: WeightDtype[]
  /** The q4 variant's MatMulNBits form (bits, block, accuracy_level); default onnx-community's (4, 32, 4). */
  nbits?: Partial<NBitsForm>
  /** The int8 variant's form (per-channel scales, reduce_range); default per tensor, full range. */
  int8?: Partial<Int8Form>
}

export const ATTENTION_FORMS = ['plain', 'gqa'] as const
export type Attention = (typeof ATTENTION_FORMS)[number]

/**
 * The form the builder writes unless told otherwise, and the embedded default model's: GroupQueryAttention. On the
 * 135m preset its decode step costs 4-25 % less CPU than the plain form's at 16 and 64 streams, and at one stream it
 * is at parity with llama.cpp's where the plain one is not (docs/benchmarks.md, issue 36). Its prompts are prefilled
 * one at a time (the batcher keeps each row's cache left-aligned).
 */
export const DEFAULT_ATTENTION: Attention = 'gqa'

/** The genai layout's record of which builder made it (the plain form's is config.json's onnxd_builder). */
const BUILT_BY = 'onnxd_builder.json'

export interface BuildResult {
  dir: string
  parameters: number
  /** Bytes of every file written. */
  bytes: number
}

export function configJson(p: Preset, origin?: { preset: string; seed: number }): Record<string, unknown> {
  return {
    // Which builder made this bundle: ensureDefaultModel rebuilds bundles of an older builder version.
    ...(origin ? { onnxd_builder: { version: BUILDER_VERSION, ...origin } } : {}),
    architectures: ['LlamaForCausalLM'],
    attention_bias: false,
    attention_dropout: 0.0,
    bos_token_id: BOS_ID,
    eos_token_id: EOS_ID,
    head_dim: p.headDim,
    hidden_act: 'silu',
    hidden_size: p.hiddenSize,
    initializer_range: p.initStd,
    intermediate_size: p.intermediateSize,
    max_position_embeddings: p.maxPositions,
    mlp_bias: false,
    model_type: 'llama',
    num_attention_heads: p.heads,
    num_hidden_layers: p.layers,
    num_key_value_heads: p.kvHeads,
    pad_token_id: PAD_ID,
    pretraining_tp: 1,
    rms_norm_eps: p.rmsNormEps,
    rope_scaling: null,
    rope_theta: p.ropeTheta,
    tie_word_embeddings: p.tieEmbeddings,
    torch_dtype: 'float32',
    use_cache: true,
    vocab_size: p.vocabSize,
    // transformers.js reads this to fetch model.onnx_data alongside model.onnx.
    ...(p.externalData ? { 'transformers.js_config': { use_external_data_format: true } } : {}),
  }
}

/** genai_config.json as onnxruntime-genai's model builder writes it for a Llama decoder with GroupQueryAttention. */
export function genaiConfigJson(p: Preset): Record<string, unknown> {
  return {
    model: {
      bos_token_id: BOS_ID,
      context_length: p.maxPositions,
      decoder: {
        session_options: { log_id: 'onnxruntime-genai', provider_options: [] },
        filename: 'model.onnx',
        head_size: p.headDim,
        hidden_size: p.hiddenSize,
        inputs: {
          input_ids: 'input_ids',
          attention_mask: 'attention_mask',
          past_key_names: 'past_key_values.%d.key',
          past_value_names: 'past_key_values.%d.value',
        },
        outputs: {
          logits: 'logits',
          present_key_names: 'present.%d.key',
          present_value_names: 'present.%d.value',
        },
        num_attention_heads: p.heads,
        num_hidden_layers: p.layers,
        num_key_value_heads: p.kvHeads,
      },
      eos_token_id: EOS_ID,
      pad_token_id: PAD_ID,
      type: 'llama',
      vocab_size: p.vocabSize,
    },
    search: {
      diversity_penalty: 0.0,
      do_sample: false,
      early_stopping: true,
      length_penalty: 1.0,
      max_length: p.maxPositions,
      min_length: 0,
      no_repeat_ngram_size: 0,
      num_beams: 1,
      num_return_sequences: 1,
      past_present_share_buffer: true,
      repetition_penalty: 1.0,
      temperature: 1.0,
      top_k: 1,
      top_p: 1.0,
    },
  }
}

const json = (v: unknown): string => JSON.stringify(v, null, 2) + '\n'

function checkSeed(seed: number): number {
  if (!Number.isSafeInteger(seed) || seed < 0) throw new OnnxdError('config', `seed must be a non-negative integer. Given: ${seed}`)
  return seed
}

export function presetOf(name: string): Preset {
  if (!isPresetName(name)) throw new OnnxdError('config', `unknown model preset '${name}': expected one of ${Object.keys(PRESETS).join(', ')}`)
  return PRESETS[name]
}

/** Writes a complete bundle into `outDir` (created if needed; files of an earlier build are overwritten). */
export async function buildModel(opts: BuildOptions): Promise<BuildResult> {
  const p = presetOf(opts.preset)
  const seed = checkSeed(opts.seed ?? 0)
  const attention = opts.attention ?? DEFAULT_ATTENTION
  if (!ATTENTION_FORMS.includes(attention)) throw new OnnxdError('config', `attention must be one of ${ATTENTION_FORMS.join(', ')}. Given: ${String(attention)}`)
  const dtypes = [...new Set(opts.dtypes ?? [])]
  const badDtype = dtypes.find((d) => !WEIGHT_DTYPES.includes(d))
  if (badDtype !== undefined) throw new OnnxdError('config', `dtype must be one of ${WEIGHT_DTYPES.join(', ')}. Given: ${String(badDtype)}`)
  const nbits = { ...DEFAULT_NBITS, ...opts.nbits }
  if (![4, 8].includes(nbits.bits) || !(nbits.block >= 16 && (nbits.block & (nbits.block - 1)) === 0) || ![0, 1, 2, 3, 4].includes(nbits.accuracyLevel))
    throw new OnnxdError('config', `nbits: bits 4 or 8, block a power of two >= 16, accuracy_level 0-4. Given: ${JSON.stringify(opts.nbits)}`)
  const dir = resolve(opts.outDir)
  const gqa = attention === 'gqa'
  await mkdir(gqa ? dir : join(dir, 'onnx'), { recursive: true })
  // A rebuild that dies half-way must not look finished: config.json (genai_config.json for the genai layout)
  // marks a complete bundle, so both go first; so do the other form's model files, or a bundle rebuilt in the
  // other form would carry them (and the engine reads genai_config.json before config.json).
  // Every weight form's files go too: a variant of an earlier build (other seed, preset or form) must not outlive it.
  const variants = Object.values(DTYPE_FILES).flatMap((f) => [`onnx/${f}`, `onnx/${f}_data`, f, `${f}.data`])
  const stale = gqa ? ['generation_config.json'] : []
  for (const f of ['config.json', 'genai_config.json', BUILT_BY, ...stale, ...variants]) await rm(join(dir, f), { force: true })
  // The plain form's onnx/ folder goes too once empty (other files in it are not ours to delete).
  if (gqa) await rmdir(join(dir, 'onnx')).catch(() => {})

  const bpe = trainByteLevelBpe(p.vocabSize)
  // model.onnx is written first and the config last, so a directory with its config in it is a finished bundle.
  const files: [string, string][] = [
    ['tokenizer.json', tokenizerJsonText(bpe)],
    ['tokenizer_config.json', json(tokenizerConfig(p.vocabSize, p.maxPositions))],
    ['special_tokens_map.json', json(specialTokensMap())],
    ...(gqa
      ? ([
          ['genai_config.json', json(genaiConfigJson(p))],
          [BUILT_BY, json({ version: BUILDER_VERSION, preset: opts.preset, seed, attention })],
        ] as [string, string][])
      : ([
          ['generation_config.json', json({ bos_token_id: BOS_ID, eos_token_id: EOS_ID, pad_token_id: PAD_ID })],
          ['config.json', json(configJson(p, { preset: opts.preset, seed }))],
        ] as [string, string][])),
  ]
  let bytes = 0
  const graph = gqa ? gqaGraph(p) : llamaGraph(p)
  // onnxruntime-genai's builder names the external data model.onnx.data; optimum, model.onnx_data.
  const onnxPath = (dtype: Dtype): string => (gqa ? join(dir, DTYPE_FILES[dtype]) : join(dir, 'onnx', DTYPE_FILES[dtype]))
  const write = (dtype: 'fp32' | WeightDtype): Promise<number> =>
    writeOnnx(onnxPath(dtype), dtype === 'fp32' ? graph : variantGraph(graph, dtype, nbits, { ...DEFAULT_INT8, ...opts.int8 }), {
      seed,
      externalData: p.externalData,
      producerVersion: BUILDER_VERSION,
      ...(gqa ? { dataFile: `${DTYPE_FILES[dtype]}.data` } : {}),
    })
  bytes += await write('fp32')
  for (const dtype of dtypes) {
    bytes += await write(dtype)
    if (dtype === 'int8') {
      // onnx-community ships 8-bit weights under both names; the copy reads model_int8's external data, if any.
      await copyFile(onnxPath('int8'), onnxPath('quantized'))
      bytes += (await stat(onnxPath('quantized'))).size
    }
  }
  for (const [name, text] of files) {
    await writeFile(join(dir, name), text)
    bytes += Buffer.byteLength(text)
  }
  return { dir, parameters: parameterCount(p), bytes }
}

/**
 * Returns `dir`, building the preset there first in `attention`'s form unless a bundle is there: one this builder
 * version made in that form, or one it did not make. The build goes into a temporary directory beside `dir` and is
 * renamed into place, so a crash never leaves a half-written bundle behind and two processes racing to build it both
 * end up with one complete bundle.
 */
export async function ensureDefaultModel(dir: string, preset = 'tiny', attention: Attention = DEFAULT_ATTENTION): Promise<string> {
  const target = resolve(dir)
  const built = builtBy(target, attention)
  if (built === 'current' || built === 'foreign') return target
  presetOf(preset)
  // Never build over something that is not ours: only an absent or empty directory, or a bundle this builder made
  // in an older version or the other form, is replaced.
  if (built === 'none' && existsSync(target) && (!(await stat(target)).isDirectory() || (await readdir(target)).length > 0)) {
    throw new OnnxdError('bad_bundle', `${target}: exists but holds no config.json or genai_config.json; move it away to build the default model there`)
  }
  await mkdir(dirname(target), { recursive: true })
  const tmp = join(dirname(target), `.${basename(target)}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`)
  try {
    await buildModel({ preset, outDir: tmp, attention })
    if (built === 'outdated') await rm(target, { recursive: true, force: true })
    try {
      await rename(tmp, target) // replaces an empty directory; fails on a non-empty one
    } catch (e) {
      // Another process finished first: its bundle is as good as ours.
      if (builtBy(target, attention) !== 'current') throw e
    }
  } finally {
    await rm(tmp, { recursive: true, force: true })
  }
  return target
}

/** What a bundle records of the builder that made it. */
export interface BuilderRecord {
  version?: unknown
  preset?: unknown
  seed?: unknown
}

/**
 * Which builder made the bundle in `dir`, and in which form: the genai layout (genai_config.json, which the engine
 * reads before config.json) records it in onnxd_builder.json, the plain layout in config.json's onnxd_builder. Null:
 * no bundle there; `record` undefined: a bundle onnxd did not build. Throws when the file holding it cannot be read.
 */
export function builderRecord(dir: string): { form: Attention; path: string; record: BuilderRecord | undefined } | null {
  if (existsSync(join(dir, 'genai_config.json'))) {
    const path = join(dir, BUILT_BY)
    return { form: 'gqa', path, record: existsSync(path) ? (readJson(path) as BuilderRecord) : undefined }
  }
  const path = join(dir, 'config.json')
  if (!existsSync(path)) return null
  return { form: 'plain', path, record: (readJson(path) as { onnxd_builder?: BuilderRecord }).onnxd_builder }
}

/**
 * Whether `dir` holds a bundle this builder version made in `attention`'s form, one this builder made in an older
 * version or the other form, someone else's, or none.
 */
function builtBy(dir: string, attention: Attention): 'current' | 'outdated' | 'foreign' | 'none' {
  let built: ReturnType<typeof builderRecord>
  try {
    built = builderRecord(dir)
  } catch {
    return 'foreign'
  }
  if (built === null) return 'none'
  if (!built.record) return 'foreign'
  return built.record.version === BUILDER_VERSION && built.form === attention ? 'current' : 'outdated'
}

const readJson = (path: string): unknown => JSON.parse(readFileSync(path, 'utf8'))
