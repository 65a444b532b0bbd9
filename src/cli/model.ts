// `onnxd model build <preset> [--out DIR] [--seed N] [--attention gqa|plain] [--dtype q4,int8,fp16]`: writes the
// embedded default model bundle and prints a one-line JSON summary (preset, attention, dtypes, dir, parameters,
// bytes, seconds). `onnxd model quality ...` is model-quality.ts; `onnxd model gguf ...`, model-gguf.ts.
import { join } from 'node:path'
import { ATTENTION_FORMS, DEFAULT_ATTENTION, PRESETS, WEIGHT_DTYPES, buildModel, type Attention, type WeightDtype } from '../builder/index.js'
import { clip } from '../shared/errors.js'
import { parseCommand } from './args.js'
import * as gguf from './model-gguf.js'
import * as quality from './model-quality.js'

const USAGE = `usage: onnxd model build <preset> [--out DIR] [--seed N] [--attention gqa|plain] [--dtype q4,int8,fp16]
       onnxd model quality DIR --dtype q4|int8|fp16 [--prompts N] [--tokens M] [--json]
       onnxd model gguf DIR [--type f32,f16,q8_0,q4_0] [--out FILE]   (GGUF for llama.cpp; onnxd model gguf --help)

Builds the embedded default model (Llama architecture, seeded random weights, byte-level BPE tokenizer). DIR
defaults to models/onnxd-<preset>-gqa (models/onnxd-<preset> for plain); N (default 0) seeds the weights.
--attention gqa (default): the onnxruntime-genai layout (genai_config.json, model.onnx), attention in com.microsoft
  GroupQueryAttention with rotary fused: its decode step costs less CPU than plain's (docs/benchmarks.md); its
  prompts are prefilled one at a time.
--attention plain: the Hugging Face ONNX export layout (config.json, onnx/model.onnx), attention in plain ONNX ops;
  prompts are prefilled several at a time. Both forms carry the same weights for the same preset and seed.
--dtype: weight forms written beside the float32 model.onnx (always written), comma-separated, served by
  \`onnxd serve --dtype\`: q4 (model_q4.onnx: com.microsoft MatMulNBits, 4-bit blocks of 32, symmetric, LM head
  included; the embedding stays float32), int8 (model_int8.onnx and the same file as model_quantized.onnx:
  quantize_dynamic's form, per-tensor int8 weights everywhere, MatMulInteger for the linear layers and the tied
  head, int8 embedding rows dequantized after the Gather), fp16 (model_fp16.onnx: float16 weights, cache and
  logits).

presets:
${Object.entries(PRESETS)
  .map(([name, p]) => `  ${name.padEnd(8)} ${p.summary}`)
  .join('\n')}
`

export async function run(argv: string[]): Promise<number | void> {
  if (argv[0] === 'quality') return quality.run(argv.slice(1))
  if (argv[0] === 'gguf') return gguf.run(argv.slice(1))
  const parsed = parseCommand(
    'onnxd model',
    USAGE,
    argv,
    { out: { type: 'string' }, seed: { type: 'string' }, attention: { type: 'string' }, dtype: { type: 'string' } },
    ([sub, preset, ...extra]) => sub === 'build' && !!preset && extra.length === 0,
  )
  if (typeof parsed === 'number') return parsed
  const { values, positionals } = parsed
  const preset = positionals[1]!
  let seed = 0
  if (values.seed !== undefined) {
    seed = Number(values.seed)
    if (!/^\d+$/.test(values.seed) || !Number.isSafeInteger(seed)) {
      process.stderr.write(`onnxd model: --seed must be a non-negative integer. Given: ${values.seed}\n`)
      return 2
    }
  }
  const attention = (values.attention ?? DEFAULT_ATTENTION) as Attention
  if (!ATTENTION_FORMS.includes(attention)) {
    process.stderr.write(`onnxd model: --attention must be one of ${ATTENTION_FORMS.join(', ')}. Given: ${values.attention}\n`)
    return 2
  }
  const dtypes = (values.dtype ?? '').split(',').filter((d) => d !== '') as WeightDtype[]
  const badDtype = dtypes.find((d) => !WEIGHT_DTYPES.includes(d))
  if (badDtype !== undefined || (values.dtype !== undefined && dtypes.length === 0)) {
    process.stderr.write(`onnxd model: --dtype must be one or more of ${WEIGHT_DTYPES.join(', ')}, comma-separated. Given: ${clip(values.dtype ?? '')}\n`)
    return 2
  }
  const started = performance.now()
  const outDir = values.out ?? join('models', `onnxd-${preset}${attention === 'gqa' ? '-gqa' : ''}`)
  const r = await buildModel({ preset, outDir, seed, attention, dtypes })
  const seconds = Math.round((performance.now() - started) / 10) / 100
  process.stdout.write(JSON.stringify({ preset, attention, dtypes: ['fp32', ...new Set(dtypes)], dir: r.dir, parameters: r.parameters, bytes: r.bytes, seconds }) + '\n')
  return 0
}
