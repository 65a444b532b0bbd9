// Where the CLI finds its model: an explicit bundle directory, ONNXD_MODEL, or the embedded default (built once).
import { resolve } from 'node:path'
import { DEFAULT_MODEL_DIR } from '../shared/model.js'

export async function resolveModelDir(given: string | undefined): Promise<string> {
  const dir = given ?? process.env.ONNXD_MODEL
  if (dir) return resolve(dir)
  const { ensureDefaultModel } = await import('../builder/index.js')
  return ensureDefaultModel(resolve(DEFAULT_MODEL_DIR), 'tiny')
}
