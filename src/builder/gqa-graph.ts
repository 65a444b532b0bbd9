// The Llama decoder in onnxruntime-genai's form: com.microsoft GroupQueryAttention with rotary fused in the op,
// packed QKV projections, (Skip)SimplifiedLayerNormalization, and the signature genai's model builder writes:
// input_ids, attention_mask, past_key_values.<i>.key|value in (no position_ids: GroupQueryAttention derives each
// row's positions from its length); logits, present.<i>.key|value out. seqlens_k (mask row sum - 1, int32 [batch])
// and total_sequence_length (the mask's width, int32 scalar) are computed in-graph from the attention mask as
// genai's builder does. The weights are the plain form's (graph.ts): the same seeded streams under genai's names,
// q/k/v side by side in one packed weight, so both forms give the same logits for the same tokens.
import { AttrType, DataType, type Attribute, type ValueInfo } from '../engine/model/onnx-proto.js'
import { attrI, attrInts, graphStart, valueInfo, type DecoderGraph, type WeightInit } from './graph.js'
import type { Preset } from './presets.js'

/** TensorProto.DataType INT32 (onnx-proto.ts lists only the types the plain form uses). */
const INT32 = 6
const MS_DOMAIN = 'com.microsoft'

const attrF = (name: string, f: number): Attribute => ({ name, type: AttrType.FLOAT, f })

/** cos or sin of position * inv_freq, [maxPositions, headDim / 2]: GroupQueryAttention's cos_cache/sin_cache. */
function rotaryCache(p: Preset, fn: (x: number) => number): () => Float32Array {
  return () => {
    const half = p.headDim / 2
    const out = new Float32Array(p.maxPositions * half)
    for (let j = 0; j < half; j++) {
      // The same doubles as graph.ts's ropeTable, so the float32 values are identical.
      const invFreq = 1 / Math.pow(p.ropeTheta, (2 * j) / p.headDim)
      for (let pos = 0; pos < p.maxPositions; pos++) out[pos * half + j] = fn(pos * invFreq)
    }
    return out
  }
}

export function gqaGraph(p: Preset): DecoderGraph {
  const { g, weights, weight } = graphStart(p)
  // The plain form's weight names are the seeded streams (graph.ts), so the values match it.
  const normal = (stream: string): WeightInit => ({ kind: 'normal', std: p.initStd, stream })
  const c = p.hiddenSize
  const qDim = p.heads * p.headDim
  const kvDim = p.kvHeads * p.headDim

  const inputs: ValueInfo[] = [
    valueInfo('input_ids', DataType.INT64, ['batch_size', 'sequence_length']),
    valueInfo('attention_mask', DataType.INT64, ['batch_size', 'total_sequence_length']),
  ]
  const outputs: ValueInfo[] = [valueInfo('logits', DataType.FLOAT, ['batch_size', 'sequence_length', p.vocabSize])]
  for (let i = 0; i < p.layers; i++) {
    for (const kv of ['key', 'value']) {
      inputs.push(valueInfo(`past_key_values.${i}.${kv}`, DataType.FLOAT, ['batch_size', p.kvHeads, 'past_sequence_length', p.headDim]))
      outputs.push(valueInfo(`present.${i}.${kv}`, DataType.FLOAT, ['batch_size', p.kvHeads, 'total_sequence_length', p.headDim]))
    }
  }

  const int1 = g.int64('int_1', [1], [])
  const axes1 = g.int64('axes_1', [1])

  const embed = weight('model.embed_tokens.weight', [p.vocabSize, c], normal('model.embed_tokens.weight'))
  let h = g.one('/model/embed_tokens', 'Gather', [embed, 'input_ids'])

  // seqlens_k = (sum of the mask's row) - 1, int32 [batch]; total_sequence_length = the mask's width, int32 scalar.
  const m = '/model/attn_mask_reformat/attn_mask_subgraph'
  const rowSum = g.one(m, 'ReduceSum', ['attention_mask', axes1], [attrI('keepdims', 0)])
  const seqlensK = g.one(m, 'Cast', [g.one(m, 'Sub', [rowSum, int1])], [attrI('to', INT32)])
  const width = g.one(m, 'Gather', [g.one(m, 'Shape', ['attention_mask']), int1], [attrI('axis', 0)])
  const totalLen = g.one(m, 'Cast', [width], [attrI('to', INT32)])

  const cosCache = weight('cos_cache', [p.maxPositions, p.headDim / 2], { kind: 'values', make: rotaryCache(p, Math.cos) }, false)
  const sinCache = weight('sin_cache', [p.maxPositions, p.headDim / 2], { kind: 'values', make: rotaryCache(p, Math.sin) }, false)

  const eps = attrF('epsilon', p.rmsNormEps)
  /** Residual add and RMSNorm in one op: returns [normed, residual sum]. */
  const skipNorm = (scope: string, residual: string, x: string, w: string): [string, string] => {
    const [normed, , , sum] = g.op(scope, 'SkipSimplifiedLayerNormalization', [residual, x, w], [eps], 4)
    const node = g.nodes[g.nodes.length - 1]
    node.domain = MS_DOMAIN
    node.output = [normed, '', '', sum] // mean and inv_std_var are not used
    return [normed, sum]
  }

  let residual = h
  let x = ''
  for (let i = 0; i < p.layers; i++) {
    const L = `/model/layers.${i}`
    const pre = `model.layers.${i}`
    const plain = `model.layers.${i}` // the plain form's names, i.e. the weights' seeded streams
    const inNorm = weight(`${pre}.input_layernorm.weight`, [c], { kind: 'ones' })
    const wqkv = weight(`${pre}.attn.qkv_proj.MatMul.weight`, [c, qDim + 2 * kvDim], {
      kind: 'columns',
      std: p.initStd,
      parts: [
        { stream: `${plain}.self_attn.q_proj.weight_T`, cols: qDim },
        { stream: `${plain}.self_attn.k_proj.weight_T`, cols: kvDim },
        { stream: `${plain}.self_attn.v_proj.weight_T`, cols: kvDim },
      ],
    })
    const wo = weight(`${pre}.attn.o_proj.MatMul.weight`, [qDim, c], normal(`${plain}.self_attn.o_proj.weight_T`))
    const postNorm = weight(`${pre}.post_attention_layernorm.weight`, [c], { kind: 'ones' })
    const wg = weight(`${pre}.mlp.gate_proj.MatMul.weight`, [c, p.intermediateSize], normal(`${plain}.mlp.gate_proj.weight_T`))
    const wu = weight(`${pre}.mlp.up_proj.MatMul.weight`, [c, p.intermediateSize], normal(`${plain}.mlp.up_proj.weight_T`))
    const wd = weight(`${pre}.mlp.down_proj.MatMul.weight`, [p.intermediateSize, c], normal(`${plain}.mlp.down_proj.weight_T`))

    if (i === 0) {
      x = g.one(`${L}/input_layernorm`, 'SimplifiedLayerNormalization', [h, inNorm], [eps, attrI('axis', -1), attrI('stash_type', 1)])
    } else {
      ;[x, residual] = skipNorm(`${L}/input_layernorm`, residual, h, inNorm)
    }

    const A = `${L}/attn`
    const qkv = g.one(`${A}/qkv_proj`, 'MatMul', [x, wqkv])
    const [attn] = g.op(A, 'GroupQueryAttention', [qkv, '', '', `past_key_values.${i}.key`, `past_key_values.${i}.value`, seqlensK, totalLen, cosCache, sinCache], [
      attrI('num_heads', p.heads),
      attrI('kv_num_heads', p.kvHeads),
      attrF('scale', 1 / Math.sqrt(p.headDim)),
      attrF('softcap', 0),
      attrI('do_rotary', 1),
      attrI('rotary_interleaved', 0), // rotate-half, as the plain form (and HF Llama) apply RoPE
    ], 3)
    const gqa = g.nodes[g.nodes.length - 1]
    gqa.domain = MS_DOMAIN
    gqa.output = [attn, `present.${i}.key`, `present.${i}.value`]
    h = g.one(`${A}/o_proj`, 'MatMul', [attn, wo])

    const M = `${L}/mlp`
    const [y, sum] = skipNorm(`${L}/post_attention_layernorm`, residual, h, postNorm)
    residual = sum
    const gate = g.one(`${M}/gate_proj`, 'MatMul', [y, wg])
    const up = g.one(`${M}/up_proj`, 'MatMul', [y, wu])
    const silu = g.one(`${M}/act_fn`, 'Mul', [gate, g.one(`${M}/act_fn`, 'Sigmoid', [gate])])
    h = g.one(`${M}/down_proj`, 'MatMul', [g.one(M, 'Mul', [silu, up]), wd])
  }

  const finalNorm = weight(`model.layers.${p.layers}.final_norm_layernorm.weight`, [c], { kind: 'ones' })
  const [normed] = skipNorm(`/model/layers.${p.layers}/final_norm_layernorm`, residual, h, finalNorm)
  const node = g.nodes[g.nodes.length - 1]
  node.output = [normed] // only the normed output is used
  // A tied LM head reads the embedding through a Transpose (ORT folds it at load) rather than storing it twice.
  const lmHead = p.tieEmbeddings
    ? g.one('/lm_head', 'Transpose', [embed], [attrInts('perm', [1, 0])])
    : weight('lm_head.MatMul.weight', [c, p.vocabSize], normal('lm_head.weight_T'))
  g.one('/lm_head', 'MatMul', [normed, lmHead])
  g.nameLastOutput('logits')

  return { nodes: g.nodes, inputs, outputs, constants: g.constants, weights, extraOpsets: [{ domain: MS_DOMAIN, version: 1 }] }
}
