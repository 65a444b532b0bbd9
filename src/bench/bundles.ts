// The bundles a benchmark builds from a preset, one per graph form, shared by every `onnxd bench` command (the
// serving run and the context sweep) under one naming: <models-dir>/onnxd-<preset> for the plain form and
// <models-dir>/onnxd-<preset>-gqa for the GroupQueryAttention form (the names `onnxd model build` uses under
// models/). A bundle is built once and rebuilt only when it was built by another builder version or is incomplete.
// Imports: the builder.
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { BUILDER_VERSION, buildModel, presetOf, type Attention } from '../builder/index.js'

/** Written last into a bundle the bench built: which preset, form and builder version made it. */
const MARKER = '.onnxd-bench-build.json'

/** Where the bench keeps `preset` built in `form`. */
export function bundleDir(modelsDir: string, preset: string, form: Attention): string {
  return resolve(modelsDir, form === 'plain' ? `onnxd-${preset}` : `onnxd-${preset}-${form}`)
}

/** The preset built in `form` (built now unless a complete build of this builder version is there). */
export async function ensureBundle(modelsDir: string, preset: string, form: Attention, log: (s: string) => void): Promise<string> {
  presetOf(preset)
  const dir = bundleDir(modelsDir, preset, form)
  const marker = join(dir, MARKER)
  const want = JSON.stringify({ preset, form, builderVersion: BUILDER_VERSION })
  if (existsSync(marker)) {
    try {
      if (JSON.stringify(JSON.parse(readFileSync(marker, 'utf8'))) === want) return dir
    } catch {
      // rebuilt below
    }
  }
  log(`building preset ${preset} (${form} attention) into ${dir} ...`)
  await buildModel({ preset, outDir: dir, seed: 0, attention: form })
  writeFileSync(marker, want + '\n')
  return dir
}
