// `onnxd model quality DIR --dtype q4|int8|fp16 [--nbits-as-int8] [--prompts N] [--tokens M] [--prompt-tokens P] [--seed S] [--json]`:
// the quantized form's greedy token agreement with the bundle's float32 model and the mean KL divergence of their
// next-token distributions (src/bench/quality.ts), printed as a line of text or as JSON.
import { measureQuality } from '../bench/quality.js'
import { clip, OnnxdError } from '../shared/errors.js'
import { DTYPES, type Dtype } from '../shared/model.js'
import { parseCommand } from './args.js'

const USAGE = `usage: onnxd model quality DIR --dtype q4|int8|fp16|quantized [--nbits-as-int8] [--prompts N] [--tokens M] [--prompt-tokens P] [--seed S] [--json]

Runs N prompts of P seeded random token ids (default 8 and 16) through the bundle's float32 model, takes its greedy
continuation of M tokens (default 32), then feeds prompt and continuation to both the float32 and the --dtype model
(teacher forcing) and reports, over the M positions of each prompt: the share where the --dtype model's argmax is
the float32 greedy token (agreement), and the mean KL(p_fp32 || p_dtype) of their next-token distributions in nats.
--nbits-as-int8 measures the --dtype file as \`onnxd node --nbits-as-int8\` serves it (4-bit weights on int8 kernels).
`

const INT_FLAGS = { prompts: [1, 10_000], tokens: [1, 4096], 'prompt-tokens': [1, 4096], seed: [0, Number.MAX_SAFE_INTEGER] } as const

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand(
    'onnxd model quality',
    USAGE,
    argv,
    {
      dtype: { type: 'string' },
      prompts: { type: 'string' },
      tokens: { type: 'string' },
      'prompt-tokens': { type: 'string' },
      seed: { type: 'string' },
      json: { type: 'boolean' },
      'nbits-as-int8': { type: 'boolean' },
    },
    (p) => p.length === 1,
  )
  if (typeof parsed === 'number') return parsed
  const { values, positionals } = parsed
  if (values.dtype === undefined) {
    process.stderr.write(USAGE)
    return 2
  }
  const dtype = values.dtype as Dtype
  if (!DTYPES.includes(dtype) || dtype === 'fp32') {
    process.stderr.write(`onnxd model quality: --dtype must be one of ${DTYPES.filter((d) => d !== 'fp32').join(', ')}. Given: ${clip(values.dtype)}\n`)
    return 2
  }
  const ints: Partial<Record<keyof typeof INT_FLAGS, number>> = {}
  for (const [flag, [min, max]] of Object.entries(INT_FLAGS) as [keyof typeof INT_FLAGS, readonly [number, number]][]) {
    const v = values[flag]
    if (v === undefined) continue
    const n = Number(v)
    if (!/^\d+$/.test(v) || n < min || n > max) {
      process.stderr.write(`onnxd model quality: --${flag} must be an integer in [${min}, ${max}]. Given: ${clip(v)}\n`)
      return 2
    }
    ints[flag] = n
  }
  try {
    const r = await measureQuality(positionals[0], { dtype, prompts: ints.prompts, tokens: ints.tokens, promptTokens: ints['prompt-tokens'], seed: ints.seed, nbitsAsInt8: values['nbits-as-int8'] })
    if (values.json) process.stdout.write(JSON.stringify(r) + '\n')
    else {
      process.stdout.write(
        `${r.dtype}${r.nbitsAsInt8 ? ' (4-bit weights as int8)' : ''} vs fp32 on ${r.dir}: greedy agreement ${(r.agreement * 100).toFixed(1)}% over ${r.positions} positions ` +
          `(${r.prompts} prompts of ${r.promptTokens} tokens, ${r.tokens} generated), mean KL ${r.meanKl.toExponential(3)} nats\n`,
      )
    }
    return 0
  } catch (e) {
    if (e instanceof OnnxdError) {
      process.stderr.write(`onnxd model quality: ${e.message}\n`)
      return 1
    }
    throw e
  }
}
