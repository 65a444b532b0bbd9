// Size presets of the embedded default model (Llama architecture) and their parameter counts.

export interface Preset {
  /** One line on what the preset is for. */
  summary: string
  hiddenSize: number
  intermediateSize: number
  layers: number
  heads: number
  kvHeads: number
  headDim: number
  /** Logits width; the tokenizer is trained to exactly this many ids. */
  vocabSize: number
  maxPositions: number
  ropeTheta: number
  rmsNormEps: number
  /** The LM head reuses the token embedding (as SmolLM2 does) instead of a weight of its own. */
  tieEmbeddings: boolean
  /** Weights go to `onnx/model.onnx_data` rather than inside model.onnx (for bundles of about 100 MB and up). */
  externalData: boolean
  /** Std of the normal init of linear and embedding weights (transformers' `initializer_range`). */
  initStd: number
}

export const PRESETS = {
  tiny: {
    summary: 'a few MB, for tests',
    hiddenSize: 64,
    intermediateSize: 172,
    layers: 4,
    heads: 4,
    kvHeads: 2,
    headDim: 16,
    vocabSize: 2048,
    maxPositions: 2048,
    ropeTheta: 10000,
    rmsNormEps: 1e-5,
    tieEmbeddings: true,
    externalData: false,
    initStd: 0.02,
  },
  small: {
    summary: 'about 25M parameters (untied LM head), for quick benchmarks',
    hiddenSize: 384,
    intermediateSize: 1024,
    layers: 8,
    heads: 6,
    kvHeads: 2,
    headDim: 64,
    vocabSize: 16384,
    maxPositions: 2048,
    ropeTheta: 10000,
    rmsNormEps: 1e-5,
    tieEmbeddings: false,
    externalData: true,
    initStd: 0.02,
  },
  '135m': {
    summary: 'shaped like SmolLM2-135M (134.5M parameters), for realistic benchmarks',
    hiddenSize: 576,
    intermediateSize: 1536,
    layers: 30,
    heads: 9,
    kvHeads: 3,
    headDim: 64,
    vocabSize: 49152,
    maxPositions: 8192, // SmolLM2-135M's max_position_embeddings
    ropeTheta: 100000,
    rmsNormEps: 1e-5,
    tieEmbeddings: true,
    externalData: true,
    initStd: 0.02,
  },
  'qwen0.5b': {
    summary: 'shaped like Qwen2.5-0.5B (494.0M parameters, no QKV biases; about 2 GB fp32), for capacity planning',
    hiddenSize: 896,
    intermediateSize: 4864,
    layers: 24,
    heads: 14,
    kvHeads: 2,
    headDim: 64,
    vocabSize: 151936,
    maxPositions: 32768,
    ropeTheta: 1000000,
    rmsNormEps: 1e-6,
    tieEmbeddings: true,
    externalData: true,
    initStd: 0.02,
  },
} as const satisfies Record<string, Preset>

export type PresetName = keyof typeof PRESETS

export function isPresetName(name: string): name is PresetName {
  return Object.hasOwn(PRESETS, name)
}

/** Trainable parameters, as transformers counts them (the RoPE tables are buffers, not parameters). */
export function parameterCount(p: Preset): number {
  const c = p.hiddenSize
  const attn = c * p.heads * p.headDim * 2 + c * p.kvHeads * p.headDim * 2
  const mlp = 3 * c * p.intermediateSize
  const perLayer = attn + mlp + 2 * c
  const embed = p.vocabSize * c
  return embed + (p.tieEmbeddings ? 0 : embed) + p.layers * perLayer + c
}
