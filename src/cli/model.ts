// `onnxd model build <preset> [--out DIR] [--seed N] [--attention plain|gqa]`: writes the embedded default model
// bundle and prints a one-line JSON summary (preset, attention, dir, parameters, bytes, seconds).
import { parseArgs } from 'node:util'
import { join } from 'node:path'
import { ATTENTION_FORMS, PRESETS, buildModel, type Attention } from '../builder/index.js'

const USAGE = `usage: onnxd model build <preset> [--out DIR] [--seed N] [--attention plain|gqa]

Builds the embedded default model (Llama architecture, seeded random weights, byte-level BPE tokenizer). DIR
defaults to models/onnxd-<preset> (models/onnxd-<preset>-gqa for gqa); N (default 0) seeds the weights.
--attention plain (default): the Hugging Face ONNX export layout, attention in plain ONNX ops.
--attention gqa: the onnxruntime-genai layout (genai_config.json, model.onnx), attention in com.microsoft
  GroupQueryAttention with rotary fused. Both forms carry the same weights for the same preset and seed.

presets:
${Object.entries(PRESETS)
  .map(([name, p]) => `  ${name.padEnd(8)} ${p.summary}`)
  .join('\n')}
`

export async function run(argv: string[]): Promise<number | void> {
  let parsed
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: { out: { type: 'string' }, seed: { type: 'string' }, attention: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
    })
  } catch (e) {
    // parseArgs throws a TypeError for unknown or malformed options: that is a usage error, not a crash.
    process.stderr.write(`onnxd model: ${(e as Error).message}\n\n${USAGE}`)
    return 2
  }
  const { values, positionals } = parsed
  if (values.help) {
    process.stdout.write(USAGE)
    return 0
  }
  const [sub, preset, ...extra] = positionals
  if (sub !== 'build' || !preset || extra.length > 0) {
    process.stderr.write(USAGE)
    return 2
  }
  let seed = 0
  if (values.seed !== undefined) {
    seed = Number(values.seed)
    if (!/^\d+$/.test(values.seed) || !Number.isSafeInteger(seed)) {
      process.stderr.write(`onnxd model: --seed must be a non-negative integer. Given: ${values.seed}\n`)
      return 2
    }
  }
  const attention = (values.attention ?? 'plain') as Attention
  if (!ATTENTION_FORMS.includes(attention)) {
    process.stderr.write(`onnxd model: --attention must be one of ${ATTENTION_FORMS.join(', ')}. Given: ${values.attention}\n`)
    return 2
  }
  const started = performance.now()
  const outDir = values.out ?? join('models', `onnxd-${preset}${attention === 'gqa' ? '-gqa' : ''}`)
  const r = await buildModel({ preset, outDir, seed, attention })
  const seconds = Math.round((performance.now() - started) / 10) / 100
  process.stdout.write(JSON.stringify({ preset, attention, dir: r.dir, parameters: r.parameters, bytes: r.bytes, seconds }) + '\n')
  return 0
}
