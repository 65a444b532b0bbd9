// Where the shared third-party model fixtures live: ONNXD_FIXTURES (CI sets it to ../shared/fixtures).
import { existsSync } from 'node:fs'
import { join, resolve } from 'node:path'

export const FIXTURES = resolve(process.env.ONNXD_FIXTURES ?? join(import.meta.dirname, '../../../shared/fixtures'))
export const haveFixtures = existsSync(FIXTURES)
export const fixture = (name: string): string => join(FIXTURES, name)

/** The decoder fixtures, with the dtype of their KV cache (fp16 graphs are compared with a looser tolerance). */
export const DECODER_FIXTURES = [
  { name: 'stories260K-hf', fp16: false },
  { name: 'tiny-random-gpt2-fp32', fp16: false },
  { name: 'tiny-random-gpt2-fp16', fp16: true },
  { name: 'tiny-random-LlamaForCausalLM-fp16', fp16: true },
  { name: 'tiny-random-LlamaForCausalLM-fp32-derived', fp16: false },
  { name: 'tiny-qwen35-cuda', fp16: true },
] as const

/**
 * The tiny preset in its GroupQueryAttention form (onnxruntime-genai layout), the embedded default model's form, built
 * by test/setup/default-model.ts.
 */
export const tinyGqaModelDir = (): string => {
  const dir = process.env.ONNXD_TEST_MODEL_GQA
  if (!dir) throw new Error('ONNXD_TEST_MODEL_GQA is not set: run the tests through vitest (globalSetup builds the model)')
  return dir
}

/**
 * The tiny preset in its plain form (Hugging Face export layout: config.json, onnx/model.onnx), built by
 * test/setup/default-model.ts. It was the embedded default model (as defaultModelDir) until the default moved to the
 * GroupQueryAttention form (tinyGqaModelDir); the suites that take it test through the plain graph.
 */
export const tinyPlainModelDir = (): string => {
  const dir = process.env.ONNXD_TEST_MODEL
  if (!dir) throw new Error('ONNXD_TEST_MODEL is not set: run the tests through vitest (globalSetup builds the model)')
  return dir
}
