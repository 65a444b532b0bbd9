// `onnxd model build <preset> [--out DIR] [--seed N]`: writes the embedded default model bundle and prints a
// one-line JSON summary (preset, dir, parameters, bytes, seconds).
import { parseArgs } from 'node:util'
import { join } from 'node:path'
import { PRESETS, buildModel } from '../builder/index.js'

const USAGE = `usage: onnxd model build <preset> [--out DIR] [--seed N]

Builds the embedded default model (Llama architecture, seeded random weights, byte-level BPE tokenizer) in the
Hugging Face ONNX layout. DIR defaults to models/onnxd-<preset>; N (default 0) seeds the weights.

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
      options: { out: { type: 'string' }, seed: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
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
  const started = performance.now()
  const r = await buildModel({ preset, outDir: values.out ?? join('models', `onnxd-${preset}`), seed })
  const seconds = Math.round((performance.now() - started) / 10) / 100
  process.stdout.write(JSON.stringify({ preset, dir: r.dir, parameters: r.parameters, bytes: r.bytes, seconds }) + '\n')
  return 0
}
