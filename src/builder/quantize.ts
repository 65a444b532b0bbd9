// The builder's weight forms beyond float32, as passes over a decoder graph (graph.ts or gqa-graph.ts), the way
// ONNX Runtime's quantizers rewrite an exported model, in the layouts onnx-community's files use:
// - q4 (model_q4.onnx): every linear layer, the LM head included, as com.microsoft MatMulNBits (bits 4, blocks of
//   32 along K, symmetric: no zero points, so the kernel's default 8; one float scale per block). The token
//   embedding's Gather stays float32 (MatMulNBits quantizes MatMuls only). A tied head reads the embedding: its
//   [vocab, hidden] rows are already MatMulNBits' [N, K] layout, so the head is packed from the same values.
// - int8 (model_int8.onnx; model_quantized.onnx is the same file): every weight as
//   onnxruntime.quantization.quantize_dynamic writes it (per-tensor symmetric int8, zero point 0): a MatMul's as
//   DynamicQuantizeLinear of the activation, MatMulInteger, Cast and the two scales' product; the embedding's
//   Gather reads int8 rows and dequantizes them (DequantizeLinear); a tied head's Transpose of the embedding moves
//   the int8 values, so the head is a MatMulInteger over the embedding's one int8 copy.
// - fp16 (model_fp16.onnx): every float tensor as float16, the KV cache and logits included, as onnx-community's
//   fp16 exports (the engine reads float16 caches and logits: model/fp16.ts).
// Imports: graph.ts (the graph and weight types) and the engine's ONNX protobuf codec (element types).
import { AttrType, DataType, type Node, type Tensor, type ValueInfo } from '../engine/model/onnx-proto.js'
import { attrI, type DecoderGraph, type StoredTensor, type WeightSpec } from './graph.js'
import { int8Level, int8MatMul, quantizeActivation, symmetricScale } from '../engine/model/int8-weights.js'

export const WEIGHT_DTYPES = ['q4', 'int8', 'fp16'] as const
export type WeightDtype = (typeof WEIGHT_DTYPES)[number]

const MS_DOMAIN = 'com.microsoft'
export const Q4_BLOCK = 32
/** MatMulNBits accuracy_level 4: activations quantized to int8 per block for the dot products (onnxruntime-genai's CPU default). */
const Q4_ACCURACY_LEVEL = 4
const FLOAT16_MAX = 65504

const f32 = new Float32Array(1)
const u32 = new Uint32Array(f32.buffer)

/** IEEE half-precision bits of `x`, rounded to nearest even (overflow to infinity, as a cast does). */
export function floatToHalf(x: number): number {
  f32[0] = x
  const b = u32[0]
  const sign = (b >>> 16) & 0x8000
  const exp = (b >>> 23) & 0xff
  const man = b & 0x7fffff
  if (exp === 0xff) return sign | 0x7c00 | (man ? 0x200 : 0)
  const e = exp - 127 + 15
  if (e >= 31) return sign | 0x7c00
  if (e <= 0) {
    if (e < -10) return sign
    const m = man | 0x800000
    const shift = 14 - e
    let h = m >>> shift
    const rem = m & ((1 << shift) - 1)
    const half = 1 << (shift - 1)
    if (rem > half || (rem === half && h & 1)) h++
    return sign | h
  }
  let h = (e << 10) | (man >>> 13)
  const rem = man & 0x1fff
  if (rem > 0x1000 || (rem === 0x1000 && h & 1)) h++ // a carry into the exponent is the right rounding too
  return sign | h
}

function toHalfBytes(v: Float32Array, clamp = false): Uint8Array {
  const out = new Uint16Array(v.length)
  for (let i = 0; i < v.length; i++) out[i] = floatToHalf(clamp ? Math.max(-FLOAT16_MAX, Math.min(FLOAT16_MAX, v[i])) : v[i])
  return new Uint8Array(out.buffer)
}

const bytes = (a: Float32Array | Int8Array): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength)

/** The MatMulNBits form of the q4 variant: bits per weight (4, or 8: one byte each), block length along K and
 * accuracy_level (0: float32 activations, 4: activations quantized to int8 per block). The default is onnx-community's
 * q4 (4 bits, blocks of 32, accuracy_level 4); others (BuildOptions.nbits) are for comparing ORT's kernels
 * (docs/benchmarks.md, the CPU weight forms). Symmetric by default: no zero points (the kernel's default, 2^(bits-1));
 * `zeroPoints` stores one per block (asymmetric: each block's range from its min to its max, onnxruntime's
 * MatMul4BitsQuantizer with is_symmetric false). */
export interface NBitsForm {
  bits: 4 | 8
  block: number
  accuracyLevel: 0 | 1 | 2 | 3 | 4
  zeroPoints: boolean
}
export const DEFAULT_NBITS: NBitsForm = { bits: 4, block: Q4_BLOCK, accuracyLevel: Q4_ACCURACY_LEVEL, zeroPoints: false }

/** The int8 variant's form: a scale per output column of each MatMul weight instead of one per tensor (the embedding
 * and a tied head keep one), and quantize_dynamic's reduce_range (weights in [-63, 63]): ORT's u8 x s8 integer
 * matmul on AVX2 without VNNI adds pairs of products in 16 bits, which saturate when activations and weights are both
 * near full range, and per-channel scales put every column's largest weight at full range. Default: per tensor, full
 * range (onnx-community's model_int8). */
export interface Int8Form {
  perChannel: boolean
  reduceRange: boolean
}
export const DEFAULT_INT8: Int8Form = { perChannel: false, reduceRange: false }

export interface Q4Weight {
  /** [N, blocks, block * bits / 8]: block b of column n; at 4 bits element 2j in byte j's low nibble, 2j + 1 in its
   * high one; at 8 bits one byte each. */
  packed: Uint8Array
  /** [N * blocks]: column n's block b at n * blocks + b. */
  scales: Float32Array
  blocks: number
  /** Asymmetric only: [N, ceil(blocks * bits / 8)], column n's block b's zero point; at 4 bits block 2j in byte j's
   * low nibble, 2j + 1 in its high one. */
  zeros?: Uint8Array
}

/**
 * 4-bit symmetric block quantization of the K x N matrix `at(k, n)`, as ONNX Runtime's MLAS does it: per block of
 * 32 along K, scale = (the value of largest magnitude) / -8 and q = clamp(floor(v / scale + 8.5), 0, 15), so that
 * value maps to 0 exactly; dequantized value = (q - 8) * scale. K past the matrix (a last partial block) is zeros.
 * `bits` 8 and another `block` do the same with 2^(bits-1) for 8 (-128, 128.5, 255).
 *
 * With `zeroPoints` (asymmetric), a block's range runs from min(0, its least value) to max(0, its greatest):
 * scale = range / (2^bits - 1), zero point z = round(-min / scale) in [0, 2^bits - 1], q = clamp(round(v / scale) + z),
 * dequantized value = (q - z) * scale, as onnxruntime's MatMul4BitsQuantizer does with is_symmetric false.
 */
export function quantizeQ4(K: number, N: number, at: (k: number, n: number) => number, bits: 4 | 8 = 4, block = Q4_BLOCK, zeroPoints = false): Q4Weight {
  const blocks = Math.ceil(K / block)
  const blob = (block * bits) / 8
  const mid = 1 << (bits - 1)
  const top = (1 << bits) - 1
  const packed = new Uint8Array(N * blocks * blob)
  const scales = new Float32Array(N * blocks)
  const zeroBytes = Math.ceil((blocks * bits) / 8)
  const zeros = zeroPoints ? new Uint8Array(N * zeroBytes) : undefined
  const q = new Uint8Array(block)
  for (let n = 0; n < N; n++) {
    for (let b = 0; b < blocks; b++) {
      const k0 = b * block
      const len = Math.min(block, K - k0)
      let amax = 0
      let max = 0
      let lo = 0
      let hi = 0
      for (let l = 0; l < len; l++) {
        const v = at(k0 + l, n)
        if (Math.abs(v) > amax) {
          amax = Math.abs(v)
          max = v
        }
        lo = Math.min(lo, v)
        hi = Math.max(hi, v)
      }
      let scale: number
      if (zeros) {
        scale = hi > lo ? Math.fround((hi - lo) / top) : 0
        const z = scale ? Math.min(top, Math.max(0, Math.round(-lo / scale))) : mid
        const recip = scale ? Math.fround(1 / scale) : 0
        q.fill(z)
        for (let l = 0; l < len; l++) q[l] = Math.min(top, Math.max(0, Math.round(Math.fround(at(k0 + l, n) * recip)) + z))
        if (bits === 8) zeros[n * zeroBytes + b] = z
        else zeros[n * zeroBytes + (b >> 1)] |= b & 1 ? z << 4 : z
      } else {
        scale = max ? Math.fround(max / -mid) : 0
        const recip = scale ? Math.fround(1 / scale) : 0
        q.fill(mid)
        for (let l = 0; l < len; l++) q[l] = Math.min(top, Math.max(0, Math.floor(Math.fround(at(k0 + l, n) * recip) + mid + 0.5)))
      }
      scales[n * blocks + b] = scale
      const base = (n * blocks + b) * blob
      if (bits === 8) packed.set(q.subarray(0, block), base)
      else for (let j = 0; j < blob; j++) packed[base + j] = q[2 * j] | (q[2 * j + 1] << 4)
    }
  }
  return { packed, scales, blocks, ...(zeros ? { zeros } : {}) }
}

/** Per-tensor symmetric int8 as quantize_dynamic does for QInt8 weights: scale = max|v| / 127, q = round-half-even(v / scale).
 * `top` 63 is quantize_dynamic's reduce_range (7-bit weights). */
export function quantizeInt8(v: Float32Array, top = 127): { q: Int8Array; scale: number } {
  let amax = 0
  for (let i = 0; i < v.length; i++) amax = Math.max(amax, Math.abs(v[i]))
  const scale = symmetricScale(amax, top)
  const q = new Int8Array(v.length)
  for (let i = 0; i < v.length; i++) q[i] = int8Level(v[i], scale, top)
  return { q, scale }
}

const q4Tensors = (name: string, N: number, w: Q4Weight, f: NBitsForm): StoredTensor[] => [
  { name: `${name}_Q4`, dims: [N, w.blocks, (f.block * f.bits) / 8], dataType: DataType.UINT8, bytes: w.packed },
  { name: `${name}_scales`, dims: [N * w.blocks], dataType: DataType.FLOAT, bytes: bytes(w.scales) },
  ...(w.zeros ? [{ name: `${name}_zero_points`, dims: [w.zeros.length], dataType: DataType.UINT8, bytes: w.zeros }] : []),
]

const matMulNBits = (node: Node, a: string, weight: string, K: number, N: number, f: NBitsForm): Node => ({
  name: `${node.name}_Q4`,
  op_type: 'MatMulNBits',
  domain: MS_DOMAIN,
  input: [a, `${weight}_Q4`, `${weight}_scales`, ...(f.zeroPoints ? [`${weight}_zero_points`] : [])],
  output: node.output,
  attribute: [attrI('K', K), attrI('N', N), attrI('bits', f.bits), attrI('block_size', f.block), attrI('accuracy_level', f.accuracyLevel)],
})

/** The graph's MatMuls whose second input is a 2-D weight ([K, N]), and the node producing `logits` (the LM head). */
function linearLayers(graph: DecoderGraph): { byWeight: Map<string, WeightSpec>; head: Node | undefined } {
  const byWeight = new Map(graph.weights.filter((w) => w.dims.length === 2).map((w) => [w.name, w]))
  return { byWeight, head: graph.nodes.find((n) => n.output.includes('logits')) }
}

function q4Graph(graph: DecoderGraph, f: NBitsForm): DecoderGraph {
  const { byWeight, head } = linearLayers(graph)
  const producer = new Map(graph.nodes.flatMap((n) => n.output.map((o) => [o, n] as const)))
  const weights = new Map(graph.weights.map((w) => [w.name, { ...w }]))
  const dropped = new Set<Node>()
  const nodes = graph.nodes.map((node) => {
    if (node.op_type !== 'MatMul') return node
    const [a, b] = node.input
    const w = byWeight.get(b)
    if (w) {
      const [K, N] = w.dims
      weights.get(b)!.store = (v) => q4Tensors(b, N, quantizeQ4(K, N, (k, n) => v[k * N + n], f.bits, f.block, f.zeroPoints), f)
      return matMulNBits(node, a, b, K, N, f)
    }
    // A tied head: MatMul(hidden, Transpose(embedding)); the embedding [vocab, hidden] is already [N, K].
    const t = producer.get(b)
    const embed = t && t.op_type === 'Transpose' ? byWeight.get(t.input[0]) : undefined
    if (node === head && embed && t) {
      const [N, K] = embed.dims
      const spec = weights.get(embed.name)!
      spec.store = (v) => [
        { name: embed.name, dims: embed.dims, dataType: DataType.FLOAT, bytes: bytes(v) },
        ...q4Tensors(`${embed.name}_head`, N, quantizeQ4(K, N, (k, n) => v[n * K + k], f.bits, f.block, f.zeroPoints), f),
      ]
      dropped.add(t)
      return matMulNBits(node, a, `${embed.name}_head`, K, N, f)
    }
    return node
  })
  return { ...graph, nodes: nodes.filter((n) => !dropped.has(n)), weights: [...weights.values()], extraOpsets: withMsOpset(graph) }
}

/**
 * Per-channel symmetric int8 of the 2-D `v` ([rows, cols]): one scale per row (`axis` 0) or per column (`axis` 1),
 * each max|v| / 127 over its channel, q = round-half-even(v / scale) as quantizeInt8 does.
 */
export function quantizeInt8PerChannel(v: Float32Array, rows: number, cols: number, axis: 0 | 1, top = 127): { q: Int8Array; scales: Float32Array } {
  const n = axis === 0 ? rows : cols
  const scales = new Float32Array(n)
  const at = (i: number, c: number): number => (axis === 0 ? c * cols + i : i * cols + c) // i-th element of channel c
  const len = axis === 0 ? cols : rows
  const q = new Int8Array(v.length)
  for (let c = 0; c < n; c++) {
    let amax = 0
    for (let i = 0; i < len; i++) amax = Math.max(amax, Math.abs(v[at(i, c)]))
    const scale = symmetricScale(amax, top)
    scales[c] = scale
    for (let i = 0; i < len; i++) q[at(i, c)] = int8Level(v[at(i, c)], scale, top)
  }
  return { q, scales }
}

function int8Graph(graph: DecoderGraph, form: Int8Form): DecoderGraph {
  const { perChannel } = form
  const top = form.reduceRange ? 63 : 127
  const { byWeight } = linearLayers(graph)
  const weights = new Map(graph.weights.map((w) => [w.name, { ...w }]))
  // Per channel, a MatMul weight [K, N] gets a scale per output column. The embedding keeps one per tensor: its
  // gathered rows are dequantized by DequantizeLinear, whose axis would be the batch's, and a tied head reads the
  // same int8 values with the same scale.
  const gathered = new Set(graph.nodes.filter((n) => n.op_type === 'Gather').map((n) => n.input[0]))
  /** Stores weight `name` as int8 (`_quantized`, `_scale`, `_zero_point`); returns the quantized tensor's name. */
  const toInt8 = (name: string): string => {
    const w = weights.get(name)!
    w.store = (v) => {
      if (perChannel && w.dims.length === 2 && !gathered.has(name)) {
        const { q, scales } = quantizeInt8PerChannel(v, w.dims[0], w.dims[1], 1, top)
        return [
          { name: `${name}_quantized`, dims: w.dims, dataType: DataType.INT8, bytes: bytes(q) },
          { name: `${name}_scale`, dims: [scales.length], dataType: DataType.FLOAT, bytes: bytes(scales) },
          { name: `${name}_zero_point`, dims: [scales.length], dataType: DataType.INT8, bytes: new Uint8Array(scales.length) },
        ]
      }
      const { q, scale } = quantizeInt8(v, top)
      return [
        { name: `${name}_quantized`, dims: w.dims, dataType: DataType.INT8, bytes: bytes(q) },
        { name: `${name}_scale`, dims: [], dataType: DataType.FLOAT, bytes: bytes(Float32Array.of(scale)) },
        { name: `${name}_zero_point`, dims: [], dataType: DataType.INT8, bytes: new Uint8Array(1) },
      ]
    }
    return `${name}_quantized`
  }
  /** An int8 view of a weight (the tied head's Transpose of the embedding) -> the weight whose scale it shares. */
  const viewOf = new Map<string, string>()
  const quantizedInputs = new Set<string>()
  const nodes = graph.nodes.flatMap((node): Node[] => {
    const [a, b] = node.input
    const out = node.output[0]
    // The embedding as quantize_dynamic writes a Gather of a weight: int8 rows gathered, then dequantized.
    if (node.op_type === 'Gather' && byWeight.has(a)) {
      return [
        { ...node, input: [toInt8(a), b], output: [`${out}_quantized`] },
        { name: `${node.name}_DequantizeLinear`, op_type: 'DequantizeLinear', input: [`${out}_quantized`, `${a}_scale`, `${a}_zero_point`], output: [out] },
      ]
    }
    // A Transpose of a weight (the tied head) moves the int8 values as they are (ORT folds it at load).
    if (node.op_type === 'Transpose' && byWeight.has(a)) {
      viewOf.set(out, a)
      return [{ ...node, input: [toInt8(a)] }]
    }
    const source = node.op_type === 'MatMul' ? (byWeight.has(b) ? b : viewOf.get(b)) : undefined
    if (!source) return [node]
    const weight = byWeight.has(b) ? toInt8(b) : b
    const added: Node[] = []
    const aq = { q: `${a}_quantized`, scale: `${a}_scale`, zeroPoint: `${a}_zero_point` }
    // One DynamicQuantizeLinear per activation, shared by every MatMul reading it (q/k/v, gate/up).
    if (!quantizedInputs.has(a)) {
      quantizedInputs.add(a)
      added.push(quantizeActivation(`${a}_QuantizeLinear`, a, aq))
    }
    added.push(...int8MatMul(node.name, aq, { q: weight, scale: `${source}_scale`, zeroPoint: `${source}_zero_point` }, out))
    return added
  })
  return { ...graph, nodes, weights: [...weights.values()] }
}

function fp16Graph(graph: DecoderGraph): DecoderGraph {
  const half = (v: ValueInfo): ValueInfo => {
    const t = v.type?.tensor_type
    return t?.elem_type === DataType.FLOAT ? { ...v, type: { tensor_type: { ...t, elem_type: DataType.FLOAT16 } } } : v
  }
  const constants = graph.constants.map((c): Tensor => {
    if (c.data_type !== DataType.FLOAT || !c.raw_data) return c
    const v = new Float32Array(Uint8Array.from(c.raw_data).buffer)
    // float32's lowest (the attention mask's fill) becomes float16's.
    return { ...c, data_type: DataType.FLOAT16, raw_data: toHalfBytes(v, true) }
  })
  const nodes = graph.nodes.map((n) =>
    n.op_type === 'Cast' && n.attribute?.some((a) => a.name === 'to' && a.i === DataType.FLOAT)
      ? { ...n, attribute: n.attribute.map((a) => (a.name === 'to' ? { ...a, type: AttrType.INT, i: DataType.FLOAT16 } : a)) }
      : n,
  )
  const weights = graph.weights.map((w) => ({ ...w, store: (v: Float32Array): StoredTensor[] => [{ name: w.name, dims: w.dims, dataType: DataType.FLOAT16, bytes: toHalfBytes(v) }] }))
  return { ...graph, nodes, constants, weights, inputs: graph.inputs.map(half), outputs: graph.outputs.map(half) }
}

const withMsOpset = (graph: DecoderGraph): { domain: string; version: number }[] =>
  graph.extraOpsets?.some((o) => o.domain === MS_DOMAIN) ? graph.extraOpsets : [...(graph.extraOpsets ?? []), { domain: MS_DOMAIN, version: 1 }]

/** The decoder graph with its weights in `dtype`'s form (the float32 graph is the one its builder returns); `nbits`
 * changes the q4 variant's MatMulNBits form (default DEFAULT_NBITS), `int8` the int8 variant's (default DEFAULT_INT8). */
export function variantGraph(graph: DecoderGraph, dtype: WeightDtype, nbits: NBitsForm = DEFAULT_NBITS, int8: Int8Form = DEFAULT_INT8): DecoderGraph {
  switch (dtype) {
    case 'q4':
      return q4Graph(graph, nbits)
    case 'int8':
      return int8Graph(graph, int8)
    case 'fp16':
      return fp16Graph(graph)
  }
}
