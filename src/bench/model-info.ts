// What the benchmark needs to know about a model bundle: its decoder file, vocabulary size and shape (from
// config.json, or an onnxruntime-genai bundle's genai_config.json), and the forward FLOPs per token it implies, for
// efficiency against the matmul peak.
import { existsSync, readFileSync } from 'node:fs'
import { basename, join } from 'node:path'

export interface ModelInfo {
  dir: string
  id: string
  onnxPath: string
  vocab: number
  layers: number
  hidden: number
  heads: number
  kvHeads: number
  headDim: number
  intermediate: number
  /** Weights the dense matmuls touch per token (every linear layer and the LM head; not the embedding lookup). */
  matmulParams: number
  /** Which onnxd builder version made the bundle (config.json `onnxd_builder`); null for other bundles and for
   * bundles of builders before version 2, which did not record it. */
  builderVersion: string | null
}

const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null)

/**
 * config.json of a Hugging Face-layout bundle, else the decoder shape of an onnxruntime-genai bundle's
 * genai_config.json in config.json's names (genai's has no intermediate size: `fallback`'s, e.g. the preset's
 * config.json, else 4 x hidden).
 */
function readConfig(dir: string, fallback?: Record<string, unknown>): { path: string; c: Record<string, unknown> } {
  const cfgPath = join(dir, 'config.json')
  if (existsSync(cfgPath)) return { path: cfgPath, c: JSON.parse(readFileSync(cfgPath, 'utf8')) as Record<string, unknown> }
  const genaiPath = join(dir, 'genai_config.json')
  if (!existsSync(genaiPath)) throw new Error(`${dir}: no config.json or genai_config.json (not a model bundle)`)
  const m = (JSON.parse(readFileSync(genaiPath, 'utf8')) as { model?: Record<string, unknown> }).model ?? {}
  const d = (m.decoder ?? {}) as Record<string, unknown>
  return {
    path: genaiPath,
    c: {
      hidden_size: d.hidden_size,
      num_hidden_layers: d.num_hidden_layers,
      num_attention_heads: d.num_attention_heads,
      num_key_value_heads: d.num_key_value_heads,
      head_dim: d.head_size,
      vocab_size: m.vocab_size,
      hidden_act: fallback?.hidden_act ?? 'silu',
      intermediate_size: fallback?.intermediate_size,
      onnxd_builder: fallback?.onnxd_builder,
    },
  }
}

/** Reads a bundle's decoder shape (see readConfig). Throws when there is no config or it lacks a decoder's shape. */
export function readModelInfo(dir: string, fallback?: Record<string, unknown>): ModelInfo {
  const { path: cfgPath, c } = readConfig(dir, fallback)
  const hidden = num(c.hidden_size) ?? num(c.n_embd)
  const layers = num(c.num_hidden_layers) ?? num(c.n_layer)
  const heads = num(c.num_attention_heads) ?? num(c.n_head)
  const vocab = num(c.vocab_size)
  if (hidden === null || layers === null || heads === null || vocab === null) throw new Error(`${cfgPath}: hidden_size, num_hidden_layers, num_attention_heads and vocab_size are required`)
  const kvHeads = num(c.num_key_value_heads) ?? heads
  const headDim = num(c.head_dim) ?? hidden / heads
  const intermediate = num(c.intermediate_size) ?? num(c.n_inner) ?? 4 * hidden
  // Gated MLPs (Llama, Qwen, Mistral: SwiGLU) have three projections; GPT-2-style ones two.
  const gated = typeof c.hidden_act === 'string' && /silu|swiglu|gelu_pytorch_tanh/.test(c.hidden_act) && c.model_type !== 'gpt2'
  const attn = hidden * heads * headDim * 2 + hidden * kvHeads * headDim * 2
  const mlp = (gated ? 3 : 2) * hidden * intermediate
  const onnxPath = join(dir, 'onnx', 'model.onnx')
  return {
    dir,
    id: basename(dir),
    onnxPath: existsSync(onnxPath) ? onnxPath : join(dir, 'model.onnx'),
    vocab,
    layers,
    hidden,
    heads,
    kvHeads,
    headDim,
    intermediate,
    matmulParams: layers * (attn + mlp) + hidden * vocab,
    builderVersion: typeof (c.onnxd_builder as { version?: unknown } | undefined)?.version === 'string' ? (c.onnxd_builder as { version: string }).version : null,
  }
}

/**
 * Forward FLOPs of one token at a context of `context` positions: 2 per weight of every matmul, plus attention's
 * QK^T and AV (4 × heads × headDim per layer per attended position). The usual MFU accounting.
 */
export function flopsPerToken(m: ModelInfo, context: number): number {
  return 2 * m.matmulParams + 4 * m.layers * m.heads * m.headDim * context
}
