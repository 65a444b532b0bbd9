// vitest globalSetup: builds the embedded default model (tiny preset) once into .cache/, for every suite that
// tests the default model, and its GroupQueryAttention form beside it (where the bench keeps it). Their directories
// reach the tests as ONNXD_TEST_MODEL and ONNXD_TEST_MODEL_GQA.
import { resolve } from 'node:path'
import { ensureDefaultModel } from '../../src/builder/index.js'
import { ensureBundle } from '../../src/bench/bundles.js'

export default async function setup(): Promise<void> {
  process.env.ONNXD_TEST_MODEL = await ensureDefaultModel(resolve('.cache/models/onnxd-tiny'), 'tiny')
  process.env.ONNXD_TEST_MODEL_GQA = await ensureBundle(resolve('.cache/models'), 'tiny', 'gqa', () => {})
}
