// Where the CLI finds its model: an explicit bundle directory or Hugging Face hub id (fetched into the hub cache, as
// the node does), ONNXD_MODEL, or the embedded default (built once).
import { resolve } from 'node:path'
import { DEFAULT_MODEL_DIR, type Dtype } from '../shared/model.js'
import { fetchHubModel, hubModelId } from '../node/hub-model.js'

export async function resolveModelDir(given: string | undefined, hub: { revision?: string; dtype?: Dtype } = {}): Promise<string> {
  const dir = given ?? process.env.ONNXD_MODEL
  const hubId = dir === undefined ? null : hubModelId(dir)
  if (hubId !== null) return fetchHubModel(hubId, hub)
  if (dir) return resolve(dir)
  const { ensureDefaultModel } = await import('../builder/index.js')
  return ensureDefaultModel(resolve(DEFAULT_MODEL_DIR), 'tiny')
}
