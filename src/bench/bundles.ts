// The bundles a benchmark builds from a preset, one per graph form, shared by every `onnxd bench` command (the
// serving run and the context sweep) under one naming: <models-dir>/onnxd-<preset> for the plain form and
// <models-dir>/onnxd-<preset>-gqa for the GroupQueryAttention form (the names `onnxd model build` uses under
// models/). A bundle is built once and rebuilt only when it was built by another builder version or is incomplete
// or lacks a weight form asked for. The GGUF files llama.cpp serves sit beside them, written from the same weights.
// Imports: the builder.
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { basename, join, resolve } from 'node:path'
import { BUILDER_VERSION, buildModel, builderRecord, presetOf, type Attention, type WeightDtype } from '../builder/index.js'
import { writeBundleGguf, writeGguf, type GgufType } from '../builder/gguf.js'
import { DTYPE_FILES } from '../shared/model.js'

/** Written last into a bundle the bench built: which preset, form and builder version made it. */
const MARKER = '.onnxd-bench-build.json'

/** Where the bench keeps `preset` built in `form`. */
export function bundleDir(modelsDir: string, preset: string, form: Attention): string {
  return resolve(modelsDir, form === 'plain' ? `onnxd-${preset}` : `onnxd-${preset}-${form}`)
}

/** The preset built in `form`, with the weight variants `dtypes` beside its float32 model (built now unless a complete
 * build of this builder version with those variants is there). */
export async function ensureBundle(modelsDir: string, preset: string, form: Attention, log: (s: string) => void, dtypes: readonly WeightDtype[] = []): Promise<string> {
  presetOf(preset)
  const dir = bundleDir(modelsDir, preset, form)
  const marker = join(dir, MARKER)
  const want = JSON.stringify({ preset, form, builderVersion: BUILDER_VERSION })
  const variant = (d: WeightDtype): string => (form === 'gqa' ? join(dir, DTYPE_FILES[d]) : join(dir, 'onnx', DTYPE_FILES[d]))
  if (existsSync(marker) && dtypes.every((d) => existsSync(variant(d)))) {
    try {
      if (JSON.stringify(JSON.parse(readFileSync(marker, 'utf8'))) === want) return dir
    } catch {
      // rebuilt below
    }
  }
  log(`building preset ${preset} (${form} attention${dtypes.length ? `, weights fp32 and ${dtypes.join(', ')}` : ''}) into ${dir} ...`)
  await buildModel({ preset, outDir: dir, seed: 0, attention: form, dtypes: [...dtypes] })
  writeFileSync(marker, want + '\n')
  return dir
}

/**
 * The GGUF file of `type` for llama.cpp: of the preset's own weights (seed 0, as ensureBundle builds them) written
 * as <models-dir>/onnxd-<preset>-<type>.gguf (rewritten when this builder version did not write it), or of a builder
 * bundle given by directory as <models-dir>/<its name>-<type>.gguf (rewritten when older than its builder record).
 */
export async function ensureGguf(modelsDir: string, from: { preset: string } | { dir: string }, type: GgufType, log: (s: string) => void): Promise<string> {
  const stem = 'preset' in from ? `onnxd-${from.preset}` : basename(resolve(from.dir))
  const path = resolve(modelsDir, `${stem}-${type}.gguf`)
  const marker = `${path}.onnxd.json`
  const want = JSON.stringify('preset' in from ? { preset: from.preset, type, builderVersion: BUILDER_VERSION } : { dir: resolve(from.dir), type })
  const config = 'dir' in from ? (builderRecord(from.dir)?.path ?? join(from.dir, 'config.json')) : null
  const same = existsSync(path) && existsSync(marker) && readFileSync(marker, 'utf8').trim() === want
  if (same && (!config || (existsSync(config) && statSync(path).mtimeMs > statSync(config).mtimeMs))) return path
  log(`writing ${type.toUpperCase()} GGUF for llama.cpp: ${path} ...`)
  mkdirSync(modelsDir, { recursive: true })
  if ('preset' in from) await writeGguf(path, { preset: presetOf(from.preset), name: stem, seed: 0, type })
  else await writeBundleGguf(from.dir, type, path)
  writeFileSync(marker, want + '\n')
  return path
}
