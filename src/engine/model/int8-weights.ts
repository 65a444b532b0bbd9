// 4-bit weights served on ONNX Runtime's int8 kernels (the node's --nbits-as-int8; issue 36). A q4 export (com.microsoft
// MatMulNBits: onnx-community's model_q4, onnxruntime-genai's int4 CPU builds) keeps its weights in 4 bits, and on a
// CPU ORT's 4-bit kernel re-reads the packed weights for every pair or few of rows: at 16 and 64 rows its step costs
// 1.1-1.6x the int8 form's (MatMulInteger, quantize_dynamic's layout), while at one row it is the cheaper one
// (docs/benchmarks.md, weight forms). This rewrite, at load, turns each MatMulNBits whose weights it can read into
// quantize_dynamic's int8 form of the same weights: the 4-bit values dequantized and quantized again, per tensor and
// symmetric, to int8 [K, N] (the form and rounding of onnx-community's model_int8), with the activation's
// DynamicQuantizeLinear shared by every such MatMul reading it, which ORT fuses as it fuses model_int8's. The file
// stays 4-bit; the weights take a byte each in memory, twice the 4-bit form's, and hold the 4-bit values to within
// half an int8 step.
//
// A node stays MatMulNBits (and says why) where its weights are not initializers this reads (inline or in an
// external data file beside the model), its scales are not float32, its zero points are not packed uint8, or it has
// a g_idx or a bias input. The new weights go inline, so the rewritten model must fit one protobuf (2 GiB).
// Imports: the ONNX protobuf codec and graph-bytes.
import { closeSync, openSync, readSync } from 'node:fs'
import { isAbsolute, join, normalize, sep } from 'node:path'
import { AttrType, DataLocation, DataType, TensorProto, type Node, type StringEntry } from './onnx-proto.js'
import { defaultOpset, encodeNode, INITIALIZER, lengthDelimited, readGraph, tensorName, writeGraph, type Field } from './graph-bytes.js'

/** Numpy's rounding (half to even), as onnxruntime.quantization rounds weights. */
export function roundHalfEven(x: number): number {
  const r = Math.round(x)
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r
}

/** quantize_dynamic's symmetric int8 scale for values whose largest magnitude is `amax` (levels -top..top). */
export const symmetricScale = (amax: number, top = 127): number => Math.fround(amax / top) || 1

/** `x`'s int8 level at `scale`: rounded as numpy rounds, held to -top..top. */
export const int8Level = (x: number, scale: number, top = 127): number => Math.max(-top, Math.min(top, roundHalfEven(x / scale)))

/** An int8 operand of quantize_dynamic's form: the int8 tensor, its float scale and its zero point. */
export interface Quantized {
  q: string
  scale: string
  zeroPoint: string
}

/**
 * quantize_dynamic's MatMul of activation `a` by weight `w` (both int8 operands), producing float `out`:
 * MatMulInteger, Cast to float, and the product of the two scales. ORT fuses it, with the DynamicQuantizeLinear
 * that made `a`, into DynamicQuantizeMatMul or MatMulIntegerToFloat. The builder's int8 form and this rewrite both
 * write it.
 */
export function int8MatMul(name: string, a: Quantized, w: Quantized, out: string): Node[] {
  return [
    { name: `${name}_quant`, op_type: 'MatMulInteger', input: [a.q, w.q, a.zeroPoint, w.zeroPoint], output: [`${out}_quantized`] },
    { name: `${name}_quant_output_scale_cast`, op_type: 'Cast', input: [`${out}_quantized`], output: [`${out}_quantized_cast_output`], attribute: [{ name: 'to', type: AttrType.INT, i: DataType.FLOAT }] },
    { name: `${name}_quant_scales_mul`, op_type: 'Mul', input: [a.scale, w.scale], output: [`${out}_scales_mul`] },
    { name: `${name}_quant_output_scale_mul`, op_type: 'Mul', input: [`${out}_quantized_cast_output`, `${out}_scales_mul`], output: [out] },
  ]
}

/** The DynamicQuantizeLinear of activation `a` into `to`'s three names. */
export const quantizeActivation = (name: string, a: string, to: Quantized): Node => ({
  name,
  op_type: 'DynamicQuantizeLinear',
  input: [a],
  output: [to.q, to.scale, to.zeroPoint],
})

const MS_DOMAIN = 'com.microsoft'
/** protobuf's limit on one message; the rewritten model is one. */
const PROTOBUF_MAX_BYTES = 2 ** 31 - 1

interface DecodedTensor {
  name: string
  dims: number[]
  data_type: number
  raw_data?: Uint8Array
  float_data?: number[]
  external_data?: StringEntry[]
  data_location?: number
}

/** A tensor's bytes: inline, or read from its external data file in `dir` (a path that stays inside it). */
function tensorBytes(t: DecodedTensor, dir: string): Uint8Array | string {
  if (t.data_location === DataLocation.EXTERNAL) {
    const entry = (k: string): string | undefined => t.external_data?.find((e) => e.key === k)?.value
    const location = entry('location')
    if (!location || isAbsolute(location) || normalize(location).split(sep).includes('..')) return `external data location ${JSON.stringify(location)} is not a file beside the model`
    const offset = Number(entry('offset') ?? 0)
    const length = Number(entry('length') ?? NaN)
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length)) return 'external data without an offset and length'
    const out = new Uint8Array(length)
    const fd = openSync(join(dir, location), 'r')
    try {
      let at = 0
      while (at < length) {
        const n = readSync(fd, out, at, length - at, offset + at)
        if (n === 0) return `external data file ${location} ends before byte ${offset + length}`
        at += n
      }
    } finally {
      closeSync(fd)
    }
    return out
  }
  if (t.raw_data?.length) return t.raw_data
  if (t.data_type === DataType.FLOAT && t.float_data?.length) return new Uint8Array(Float32Array.from(t.float_data).buffer)
  return 'no data'
}

interface Weight {
  /** int8 `dims` ([K, N]), row-major. */
  q: Int8Array
  dims: [number, number]
  scale: number
}

/**
 * MatMulNBits' weights (B [N, blocks, block * bits / 8], scales [N * blocks], zero points [N, ceil(blocks * bits / 8)]
 * packed as B, default 2^(bits - 1)) as per-tensor symmetric int8 [K, N]: scale = the largest dequantized magnitude
 * / 127, q = round-half-even(value / scale) (symmetricScale, int8Level). No float copy of the matrix is made.
 */
export function nbitsToInt8(K: number, N: number, bits: number, block: number, packed: Uint8Array, scales: Float32Array, zeros: Uint8Array | null): Weight {
  const blocks = Math.ceil(K / block)
  const blob = (block * bits) / 8
  const zeroBytes = Math.ceil((blocks * bits) / 8)
  const mid = 1 << (bits - 1)
  const zeroOf = (n: number, b: number): number => {
    if (!zeros) return mid
    if (bits === 8) return zeros[n * zeroBytes + b]
    const z = zeros[n * zeroBytes + (b >> 1)]
    return b & 1 ? z >> 4 : z & 15
  }
  const level = (base: number, j: number): number => {
    const byte = packed[base + (bits === 8 ? j : j >> 1)]
    return bits === 8 ? byte : j & 1 ? byte >> 4 : byte & 15
  }
  let amax = 0
  for (let n = 0; n < N; n++) {
    for (let b = 0; b < blocks; b++) {
      const z = zeroOf(n, b)
      const base = (n * blocks + b) * blob
      const len = Math.min(block, K - b * block)
      let lo = z
      let hi = z
      for (let j = 0; j < len; j++) {
        const l = level(base, j)
        if (l < lo) lo = l
        else if (l > hi) hi = l
      }
      amax = Math.max(amax, Math.max(z - lo, hi - z) * Math.abs(scales[n * blocks + b]))
    }
  }
  const scale = symmetricScale(amax)
  const q = new Int8Array(K * N)
  // A 4-bit block's 16 levels map to int8 through a table built once per block; columns go in tiles of 64, so that a
  // block's rows of a tile are written while their cache lines are held.
  const table = new Int8Array(1 << bits)
  for (let n0 = 0; n0 < N; n0 += 64) {
    for (let b = 0; b < blocks; b++) {
      const k0 = b * block
      const len = Math.min(block, K - k0)
      for (let n = n0; n < Math.min(N, n0 + 64); n++) {
        const z = zeroOf(n, b)
        const sc = scales[n * blocks + b]
        const base = (n * blocks + b) * blob
        if (bits === 8) for (let j = 0; j < len; j++) q[(k0 + j) * N + n] = int8Level((level(base, j) - z) * sc, scale)
        else {
          for (let l = 0; l < table.length; l++) table[l] = int8Level((l - z) * sc, scale)
          for (let j = 0; j < len; j++) q[(k0 + j) * N + n] = table[level(base, j)]
        }
      }
    }
  }
  return { q, dims: [K, N], scale }
}

export interface Int8Rewrite {
  /** The model with its convertible MatMulNBits nodes in int8 form. */
  model: Uint8Array
  /** How many MatMulNBits nodes were turned into int8. */
  converted: number
  /** Each MatMulNBits node left as it is, with why. */
  kept: string[]
}

const attrOf = (n: Node, name: string): number | undefined => n.attribute?.find((a) => a.name === name)?.i

/**
 * `model` (its external data files in `dir`) with every MatMulNBits it can read in int8 form (file comment). Null
 * when the model has no MatMulNBits or cannot take the int8 operators (no default-domain opset 11 or later). Throws
 * when the int8 weights do not fit one protobuf.
 */
export function nbitsAsInt8(model: Uint8Array, dir: string): Int8Rewrite | null {
  const v = readGraph(model)
  if (!v) return null
  const initializers = new Map(v.fields.filter((f) => f.no === INITIALIZER).map((f) => [tensorName(f), f]))
  const nbits = v.nodes.filter(({ node }) => node.op_type === 'MatMulNBits' && node.domain === MS_DOMAIN)
  if (!nbits.length || v.subgraphs || defaultOpset(v) < 11) return null

  const tensor = (name: string): DecodedTensor | undefined => {
    const f = initializers.get(name)
    return f && (TensorProto.toObject(TensorProto.decode(f.data!), { longs: Number }) as DecodedTensor)
  }
  const kept: string[] = []
  /** Converted weights by B's name (a B read by two nodes is converted once). */
  const weights = new Map<string, Weight>()
  const converted = new Map<Field, { node: Node; weight: string }>()
  for (const { field, node } of nbits) {
    const [, b, s, zp, gIdx, bias] = node.input
    const K = attrOf(node, 'K') ?? 0
    const N = attrOf(node, 'N') ?? 0
    const bits = attrOf(node, 'bits') ?? 4
    const block = attrOf(node, 'block_size') ?? 0
    const why = ((): string | null => {
      if (gIdx || bias) return gIdx ? 'it has a g_idx input' : 'it has a bias input'
      if ((bits !== 4 && bits !== 8) || K <= 0 || N <= 0 || block < 16 || (block & (block - 1)) !== 0) return `K ${K}, N ${N}, bits ${bits}, block_size ${block} is not a form this reads`
      if (weights.has(b)) return null
      const [bt, st, zt] = [tensor(b), tensor(s), zp ? tensor(zp) : undefined]
      if (!bt || !st || (zp && !zt)) return 'its weights are not initializers'
      if (bt.data_type !== DataType.UINT8) return 'its packed weights are not uint8'
      if (st.data_type !== DataType.FLOAT) return 'its scales are not float32'
      if (zt && zt.data_type !== DataType.UINT8) return 'its zero points are not packed uint8'
      const [packed, scaleBytes, zeroBytes] = [tensorBytes(bt, dir), tensorBytes(st, dir), zt ? tensorBytes(zt, dir) : null]
      for (const x of [packed, scaleBytes, zeroBytes]) if (typeof x === 'string') return x
      const blocks = Math.ceil(K / block)
      const p = packed as Uint8Array
      const sb = scaleBytes as Uint8Array
      const zb = zeroBytes as Uint8Array | null
      if (p.length !== (N * blocks * block * bits) / 8) return `its packed weights hold ${p.length} bytes, not ${(N * blocks * block * bits) / 8}`
      if (sb.length !== N * blocks * 4) return `its scales hold ${sb.length / 4} values, not ${N * blocks}`
      if (zb && zb.length !== N * Math.ceil((blocks * bits) / 8)) return `its zero points hold ${zb.length} bytes, not ${N * Math.ceil((blocks * bits) / 8)}`
      const scales = new Float32Array(sb.buffer.slice(sb.byteOffset, sb.byteOffset + sb.length))
      weights.set(b, nbitsToInt8(K, N, bits, block, p, scales, zb))
      return null
    })()
    if (why) kept.push(`${node.name || node.output[0]}: ${why}`)
    else converted.set(field, { node, weight: b })
  }
  if (!converted.size) return { model, converted: 0, kept }

  // The initializers only converted nodes read go; the int8 ones take their place.
  const stillRead = new Set(v.nodes.flatMap(({ node, field }) => (converted.has(field) ? [] : node.input)))
  const dropped = new Set<Field>()
  for (const { node } of converted.values()) {
    for (const name of node.input.slice(1)) {
      const f = name ? initializers.get(name) : undefined
      if (f && !stillRead.has(name)) dropped.add(f)
    }
  }
  const operand = (w: string): Quantized => ({ q: `/onnxd/int8/${w}/int8`, scale: `/onnxd/int8/${w}/scale`, zeroPoint: `/onnxd/int8/${w}/zero_point` })
  const initializer = (name: string, dims: number[], dataType: number, bytes: Uint8Array): Uint8Array =>
    lengthDelimited(INITIALIZER, TensorProto.encode(TensorProto.fromObject({ name, dims, data_type: dataType, raw_data: bytes })).finish())
  const added: Uint8Array[] = []
  let addedBytes = 0
  for (const [b, w] of weights) {
    const { q, scale, zeroPoint } = operand(b)
    added.push(
      initializer(q, w.dims, DataType.INT8, new Uint8Array(w.q.buffer)),
      initializer(scale, [], DataType.FLOAT, new Uint8Array(Float32Array.of(w.scale).buffer)),
      initializer(zeroPoint, [], DataType.INT8, new Uint8Array(1)),
    )
    addedBytes += w.q.length
  }
  const keptBytes = model.length - [...dropped].reduce((n, f) => n + f.end - f.start, 0)
  if (keptBytes + addedBytes + 1024 > PROTOBUF_MAX_BYTES) {
    throw new RangeError(`its int8 weights (${(addedBytes / 2 ** 30).toFixed(2)} GiB) and the rest of the graph (${(keptBytes / 2 ** 30).toFixed(2)} GiB) do not fit one ONNX protobuf (2 GiB)`)
  }
  const activations = new Set<string>()
  const edit = (f: Field): Uint8Array[] | undefined => {
    if (dropped.has(f)) return []
    const c = converted.get(f)
    if (!c) return undefined
    const a = c.node.input[0]
    const aq = operand(`activation/${a}`)
    const out: Node[] = []
    if (!activations.has(a)) {
      activations.add(a)
      out.push(quantizeActivation(`/onnxd/int8/${a}/DynamicQuantizeLinear`, a, aq))
    }
    out.push(...int8MatMul(`/onnxd/int8/${c.node.name || c.node.output[0]}`, aq, operand(c.weight), c.node.output[0]))
    return out.map(encodeNode)
  }
  const lastField = v.fields[v.fields.length - 1]
  const rewritten = writeGraph(model, v, (f) => (f === lastField ? [...(edit(f) ?? [v.graph.data!.subarray(f.start, f.end)]), ...added] : edit(f)))
  return { model: rewritten, converted: converted.size, kept }
}
