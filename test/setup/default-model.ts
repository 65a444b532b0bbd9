// vitest globalSetup: builds the builder's tiny preset once into .cache/ in both graph forms, where the bench keeps
// them: the plain form (Hugging Face export layout) for the suites that test a model through it, and the
// GroupQueryAttention form, which is the embedded default model's. Their directories reach the tests as
// ONNXD_TEST_MODEL (plain) and ONNXD_TEST_MODEL_GQA.
import { resolve } from 'node:path'
import { ensureDefaultModel } from '../../src/builder/index.js'
import { ensureBundle } from '../../src/bench/bundles.js'

export default async function setup(): Promise<void> {
  process.env.ONNXD_TEST_MODEL = await ensureDefaultModel(resolve('.cache/models/onnxd-tiny'), 'tiny', 'plain')
  process.env.ONNXD_TEST_MODEL_GQA = await ensureBundle(resolve('.cache/models'), 'tiny', 'gqa', () => {})
}
