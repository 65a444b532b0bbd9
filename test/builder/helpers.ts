// Reading built bundles back in the builder's tests: JSON files, the file list, the decoded ONNX model and its
// inline float32 initializers.
import { readFile, readdir } from 'node:fs/promises'
import { join, relative } from 'node:path'
import { ModelProto, type Model } from '../../src/engine/model/onnx-proto.js'

export const readJson = async (path: string): Promise<Record<string, unknown>> => JSON.parse(await readFile(path, 'utf8')) as Record<string, unknown>

/** Every file under `d`, relative to it, sorted. */
export async function listFiles(d: string): Promise<string[]> {
  const entries = await readdir(d, { recursive: true, withFileTypes: true })
  return entries
    .filter((e) => e.isFile())
    .map((e) => relative(d, join(e.parentPath, e.name)))
    .sort()
}

export function decodeModel(bytes: Uint8Array): Model {
  return ModelProto.toObject(ModelProto.decode(bytes), { longs: Number, defaults: false }) as Model
}

/** An initializer's float32 values (raw_data copied out, so the view is aligned). */
export function floats(m: Model, name: string): Float32Array {
  const t = m.graph.initializer.find((x) => x.name === name)
  if (!t?.raw_data) throw new Error(`no inline initializer ${name}`)
  return new Float32Array(Uint8Array.from(t.raw_data).buffer)
}
