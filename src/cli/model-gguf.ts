// `onnxd model gguf DIR [--type f32,f16,q8_0,q4_0] [--out FILE]`: writes GGUF files of a builder bundle for llama.cpp
// (the benchmark's llama.cpp peer) and prints one JSON line per file. Thin: the writer is src/builder/gguf.ts.
import { GGUF_TYPES, writeBundleGguf, type GgufType } from '../builder/gguf.js'
import { OnnxdError, clip } from '../shared/errors.js'
import { parseCommand } from './args.js'

export const USAGE = `usage: onnxd model gguf DIR [--type f32,f16,q8_0,q4_0] [--out FILE]

Writes the onnxd bundle in DIR (either form, built by onnxd model build) as GGUF for llama.cpp: DIR/model-<type>.gguf
for each type (default f32), or FILE for a single type. The weights are the bundle's own (regenerated from the preset
and seed its builder recorded), under llama.cpp's names, Q/K permuted for llama.cpp's rotary layout. f16 stores every
matrix as half floats; q8_0 and q4_0 are ggml's reference quantizers (blocks of 32); vectors, and for q8_0/q4_0
matrices whose rows are not whole blocks, stay f32.
`

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand('onnxd model gguf', USAGE, argv, { type: { type: 'string' }, out: { type: 'string' } }, (p) => p.length === 1)
  if (typeof parsed === 'number') return parsed
  const { values, positionals } = parsed
  const types = (values.type ?? 'f32').split(',').filter((t) => t !== '') as GgufType[]
  if (types.length === 0 || types.some((t) => !GGUF_TYPES.includes(t))) {
    process.stderr.write(`onnxd model gguf: --type must be one or more of ${GGUF_TYPES.join(', ')}, comma-separated. Given: ${clip(values.type ?? '')}\n`)
    return 2
  }
  if (values.out !== undefined && types.length > 1) {
    process.stderr.write('onnxd model gguf: --out takes one --type; several go to DIR/model-<type>.gguf\n')
    return 2
  }
  for (const type of [...new Set(types)]) {
    try {
      const started = performance.now()
      const r = await writeBundleGguf(positionals[0], type, values.out)
      process.stdout.write(JSON.stringify({ type, file: r.path, preset: r.preset, seed: r.seed, bytes: r.bytes, seconds: Math.round((performance.now() - started) / 10) / 100 }) + '\n')
    } catch (e) {
      if (!(e instanceof OnnxdError)) throw e
      process.stderr.write(`onnxd model gguf: ${e.message}\n`)
      return 1
    }
  }
  return 0
}
