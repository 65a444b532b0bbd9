// vitest globalSetup: builds the embedded default model (tiny preset) once into .cache/, for every suite that
// tests the default model. Its directory reaches the tests as ONNXD_TEST_MODEL.
import { resolve } from 'node:path'
import { ensureDefaultModel } from '../../src/builder/index.js'

export default async function setup(): Promise<void> {
  process.env.ONNXD_TEST_MODEL = await ensureDefaultModel(resolve('.cache/models/onnxd-tiny'), 'tiny')
}
