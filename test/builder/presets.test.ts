// Presets and both graph forms' shapes, without writing any weights: the qwen0.5b preset is 2 GB fp32 and is never
// built in tests, so its graph and weight specs are checked here instead.
import { describe, expect, it } from 'vitest'
import { PRESETS, genaiConfigJson, parameterCount, type Preset } from '../../src/builder/index.js'
import { llamaGraph, type WeightSpec } from '../../src/builder/graph.js'
import { gqaGraph } from '../../src/builder/gqa-graph.js'
import { encodeModel } from '../../src/engine/model/onnx-proto.js'

const elements = (w: WeightSpec): number => w.dims.reduce((a, b) => a * b, 1)
const paramsOf = (ws: WeightSpec[]): number => ws.filter((w) => w.parameter).reduce((n, w) => n + elements(w), 0)

describe('presets', () => {
  it('135m has SmolLM2-135M context (8192)', () => {
    expect(PRESETS['135m'].maxPositions).toBe(8192)
    expect(parameterCount(PRESETS['135m'])).toBe(134_515_008)
  })

  it('qwen0.5b is shaped like Qwen2.5-0.5B', () => {
    const q: Preset = PRESETS['qwen0.5b']
    expect(q).toMatchObject({ hiddenSize: 896, layers: 24, heads: 14, kvHeads: 2, intermediateSize: 4864, vocabSize: 151936, tieEmbeddings: true })
    expect(q.heads * q.headDim).toBe(q.hiddenSize)
    // Qwen2.5-0.5B has 494,032,768 parameters; 27,648 of them are the q/k/v biases a Llama-architecture model has not.
    expect(parameterCount(q)).toBe(494_032_768 - 24 * (896 + 128 + 128))
    expect(q.externalData).toBe(true)
  })

  it('both graph forms hold exactly parameterCount parameters, for every preset', () => {
    for (const p of Object.values(PRESETS)) {
      expect(paramsOf(llamaGraph(p).weights)).toBe(parameterCount(p))
      expect(paramsOf(gqaGraph(p).weights)).toBe(parameterCount(p))
    }
  })

  it('qwen0.5b: the GroupQueryAttention graph has the layer count, head counts and cache shapes of the preset', () => {
    const p = PRESETS['qwen0.5b']
    const g = gqaGraph(p)
    const gqa = g.nodes.filter((n) => n.op_type === 'GroupQueryAttention')
    expect(gqa).toHaveLength(24)
    const attr = Object.fromEntries((gqa[0].attribute ?? []).map((a) => [a.name, a.i ?? a.f]))
    expect(attr).toMatchObject({ num_heads: 14, kv_num_heads: 2, do_rotary: 1, rotary_interleaved: 0, scale: 0.125 })
    expect(g.weights.find((w) => w.name === 'cos_cache')?.dims).toEqual([32768, 32])
    expect(g.weights.find((w) => w.name === 'model.layers.0.attn.qkv_proj.MatMul.weight')?.dims).toEqual([896, 896 + 2 * 128])
    const past = g.inputs.find((i) => i.name === 'past_key_values.23.value')
    expect(past?.type.tensor_type.shape.dim).toEqual([{ dim_param: 'batch_size' }, { dim_value: 2 }, { dim_param: 'past_sequence_length' }, { dim_value: 64 }])
    // The graph itself (weights aside) encodes: nothing in it depends on the weights being there.
    const bytes = encodeModel({
      ir_version: 8,
      opset_import: [{ domain: '', version: 17 }, ...(g.extraOpsets ?? [])],
      producer_name: 'onnxd',
      producer_version: 'test',
      graph: { name: 'main_graph', node: g.nodes, initializer: g.constants, input: g.inputs, output: g.outputs },
    })
    expect(bytes.length).toBeGreaterThan(0)
    // About 2 GB of float32 weights (the tied LM head is not stored twice).
    const weightBytes = g.weights.reduce((n, w) => n + 4 * elements(w), 0)
    expect(weightBytes / 1e9).toBeGreaterThan(1.9)
    expect(weightBytes / 1e9).toBeLessThan(2.1)
  })

  it('genai_config.json carries the preset: head counts, context, ids, search defaults', () => {
    const c = genaiConfigJson(PRESETS['qwen0.5b']) as { model: Record<string, unknown>; search: Record<string, unknown> }
    expect(c.model).toMatchObject({
      context_length: 32768,
      type: 'llama',
      vocab_size: 151936,
      decoder: { filename: 'model.onnx', head_size: 64, hidden_size: 896, num_attention_heads: 14, num_key_value_heads: 2, num_hidden_layers: 24 },
    })
    expect(c.search).toMatchObject({ max_length: 32768, past_present_share_buffer: true, do_sample: false, num_beams: 1 })
  })
})
