// Writes the builder's Llama presets as GGUF v3 files for llama.cpp (the benchmark's second peer): the same
// weights as the ONNX bundle of that preset and seed (regenerated from them, bit for bit), under llama.cpp's tensor
// names and metadata keys, as F32, F16 (matrices; round to nearest even, as ggml's fp32->fp16), or Q8_0 or Q4_0 with ggml's reference quantizers (quantize_row_q8_0_ref /
// quantize_row_q4_0_ref in ggml-quants.c) byte for byte. Q and K projections are permuted the way llama.cpp's
// convert_hf_to_gguf.py does: the ONNX graph rotates halves (HF rotate_half), llama.cpp's LLAMA rope pairs adjacent
// dims. Deterministic bytes. Imports: shared, and the builder's graph, presets, tokenizer, quantize and writer.
import { open } from 'node:fs/promises'
import { endianness } from 'node:os'
import { join } from 'node:path'
import { OnnxdError } from '../shared/errors.js'
import { llamaGraph } from './graph.js'
import { BUILDER_VERSION, builderRecord, presetOf } from './index.js'
import type { Preset } from './presets.js'
import { floatToHalf } from './quantize.js'
import { BOS_ID, CHAT_TEMPLATE, EOS_ID, PAD_ID, SPECIAL_TOKENS, trainByteLevelBpe } from './tokenizer.js'
import { makeWeight } from './write-onnx.js'

export const GGUF_TYPES = ['f32', 'f16', 'q8_0', 'q4_0'] as const
export type GgufType = (typeof GGUF_TYPES)[number]

const GGUF_MAGIC = 0x46554747 // "GGUF" read as a little-endian u32
const GGUF_VERSION = 3
const ALIGNMENT = 32
/** Elements per Q8_0 / Q4_0 block (QK8_0, QK4_0). */
export const GGML_BLOCK = 32
/** ggml_type ids. */
const GGML_TYPE = { f32: 0, f16: 1, q4_0: 2, q8_0: 8 } as const
/** llama_ftype ids written as general.file_type (LLAMA_FTYPE_ALL_F32, MOSTLY_F16, MOSTLY_Q4_0, MOSTLY_Q8_0). */
const FILE_TYPE = { f32: 0, f16: 1, q4_0: 2, q8_0: 7 } as const
/** gguf_metadata_value_type ids. */
const V = { u32: 4, i32: 5, f32: 6, bool: 7, string: 8, array: 9 } as const
/** llama_token_type: NORMAL, CONTROL. */
const TOKEN_NORMAL = 1
const TOKEN_CONTROL = 3

/** C's roundf: halves away from zero (Math.round takes -2.5 to -2). */
const roundf = (x: number): number => Math.sign(x) * Math.floor(Math.abs(x) + 0.5)

/** ggml's quantize_row_q8_0_ref: per block of 32, fp16 d = amax/127, then int8 roundf(x/d). 34 bytes a block. */
export function quantizeQ8_0(x: Float32Array): Uint8Array {
  if (x.length % GGML_BLOCK) throw new Error(`Q8_0 rows must be a multiple of ${GGML_BLOCK} long (got ${x.length})`)
  const nb = x.length / GGML_BLOCK
  const out = new Uint8Array(nb * 34)
  const view = new DataView(out.buffer)
  for (let i = 0; i < nb; i++) {
    let amax = 0
    for (let j = 0; j < GGML_BLOCK; j++) amax = Math.max(amax, Math.abs(x[i * GGML_BLOCK + j]))
    const d = Math.fround(amax / 127)
    const id = d ? Math.fround(1 / d) : 0
    view.setUint16(i * 34, floatToHalf(d), true)
    for (let j = 0; j < GGML_BLOCK; j++) view.setInt8(i * 34 + 2 + j, roundf(Math.fround(x[i * GGML_BLOCK + j] * id)))
  }
  return out
}

/**
 * ggml's quantize_row_q4_0_ref: per block of 32, fp16 d = max / -8 (max: the signed value of largest magnitude),
 * q = min(15, trunc(x/d + 8.5)); byte j holds element j in its low nibble and element j+16 in its high one. 18 bytes.
 */
export function quantizeQ4_0(x: Float32Array): Uint8Array {
  if (x.length % GGML_BLOCK) throw new Error(`Q4_0 rows must be a multiple of ${GGML_BLOCK} long (got ${x.length})`)
  const nb = x.length / GGML_BLOCK
  const half = GGML_BLOCK / 2
  const out = new Uint8Array(nb * 18)
  const view = new DataView(out.buffer)
  const q = (v: number, id: number): number => Math.min(15, Math.trunc(Math.fround(Math.fround(v * id) + 8.5)))
  for (let i = 0; i < nb; i++) {
    let amax = 0
    let max = 0
    for (let j = 0; j < GGML_BLOCK; j++) {
      const v = x[i * GGML_BLOCK + j]
      if (amax < Math.abs(v)) {
        amax = Math.abs(v)
        max = v
      }
    }
    const d = Math.fround(max / -8)
    const id = d ? Math.fround(1 / d) : 0
    view.setUint16(i * 18, floatToHalf(d), true)
    for (let j = 0; j < half; j++) {
      out[i * 18 + 2 + j] = q(x[i * GGML_BLOCK + j], id) | (q(x[i * GGML_BLOCK + half + j], id) << 4)
    }
  }
  return out
}

/** Appends GGUF scalars, strings and arrays (all little-endian) to a growing buffer. */
class Out {
  private buf = new Uint8Array(1 << 12) // grows by doubling: even the tiny preset's vocabulary outgrows it several times
  private view = new DataView(this.buf.buffer)
  length = 0
  private room(n: number): number {
    if (this.length + n > this.buf.length) {
      const next = new Uint8Array(Math.max(this.buf.length * 2, this.length + n))
      next.set(this.buf.subarray(0, this.length))
      this.buf = next
      this.view = new DataView(next.buffer)
    }
    const at = this.length
    this.length += n
    return at
  }
  // Each writer takes its offset first: room() may replace buf and view, so they are read after it.
  u32(v: number): void {
    const at = this.room(4)
    this.view.setUint32(at, v, true)
  }
  i32(v: number): void {
    const at = this.room(4)
    this.view.setInt32(at, v, true)
  }
  u64(v: number): void {
    const at = this.room(8)
    this.view.setBigUint64(at, BigInt(v), true)
  }
  f32(v: number): void {
    const at = this.room(4)
    this.view.setFloat32(at, v, true)
  }
  u8(v: number): void {
    const at = this.room(1)
    this.view.setUint8(at, v)
  }
  string(s: string): void {
    const b = Buffer.from(s, 'utf8')
    this.u64(b.length)
    const at = this.room(b.length)
    this.buf.set(b, at)
  }
  pad(): void {
    this.room((ALIGNMENT - (this.length % ALIGNMENT)) % ALIGNMENT)
  }
  bytes(): Uint8Array {
    return this.buf.subarray(0, this.length)
  }
}

type Meta =
  | { t: 'u32' | 'i32' | 'f32'; v: number }
  | { t: 'bool'; v: boolean }
  | { t: 'string'; v: string }
  | { t: 'strings'; v: string[] }
  | { t: 'i32s'; v: number[] }

function writeMeta(o: Out, key: string, m: Meta): void {
  o.string(key)
  switch (m.t) {
    case 'u32':
    case 'i32':
    case 'f32':
      o.u32(V[m.t])
      o[m.t](m.v)
      return
    case 'bool':
      o.u32(V.bool)
      o.u8(m.v ? 1 : 0)
      return
    case 'string':
      o.u32(V.string)
      o.string(m.v)
      return
    case 'strings':
      o.u32(V.array)
      o.u32(V.string)
      o.u64(m.v.length)
      for (const s of m.v) o.string(s)
      return
    case 'i32s':
      o.u32(V.array)
      o.u32(V.i32)
      o.u64(m.v.length)
      for (const v of m.v) o.i32(v)
  }
}

/** One GGUF tensor: its llama.cpp name, ggml dims (ne[0], the contiguous one, first), and its row-major float32 data. */
interface GgufTensor {
  name: string
  ne: number[]
  data: () => Float32Array
}

/** The [rows, cols] row-major matrix `m` transposed ([cols, rows]). */
function transpose(m: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(m.length)
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = m[r * cols + c]
  return out
}

/**
 * convert_hf_to_gguf.py's LlamaModel.permute of a q/k_proj weight ([heads * headDim, in], HF layout): within each
 * head, output row s * headDim/2 + i (half s of rotate_half) moves to row 2i + s (the pair llama.cpp rotates).
 */
export function permuteRope(w: Float32Array, heads: number, headDim: number, inDim: number): Float32Array {
  const out = new Float32Array(w.length)
  const halfDim = headDim / 2
  for (let h = 0; h < heads; h++) {
    for (let s = 0; s < 2; s++) {
      for (let i = 0; i < halfDim; i++) {
        const from = (h * headDim + s * halfDim + i) * inDim
        const to = (h * headDim + 2 * i + s) * inDim
        out.set(w.subarray(from, from + inDim), to)
      }
    }
  }
  return out
}

/** The preset's tensors under llama.cpp's names, in the ONNX graph's order (the RoPE tables are not weights there). */
function tensorsOf(p: Preset, seed: number): GgufTensor[] {
  const specs = new Map(llamaGraph(p).weights.map((w) => [w.name, w]))
  const values = (name: string): Float32Array => {
    const w = specs.get(name)
    if (!w) throw new Error(`the builder graph has no weight ${name}`)
    return makeWeight(w, seed)
  }
  const c = p.hiddenSize
  const qDim = p.heads * p.headDim
  const kvDim = p.kvHeads * p.headDim
  // The graph stores MatMul weights as [in, out] (`weight_T`); ggml wants HF's [out, in] rows, ne = [in, out].
  const linear = (gguf: string, onnx: string, inDim: number, outDim: number, permuteHeads?: number): GgufTensor => ({
    name: gguf,
    ne: [inDim, outDim],
    data: () => {
      const hf = transpose(values(onnx), inDim, outDim)
      return permuteHeads ? permuteRope(hf, permuteHeads, p.headDim, inDim) : hf
    },
  })
  const vector = (gguf: string, onnx: string): GgufTensor => ({ name: gguf, ne: [c], data: () => values(onnx) })
  const out: GgufTensor[] = [{ name: 'token_embd.weight', ne: [c, p.vocabSize], data: () => values('model.embed_tokens.weight') }]
  for (let i = 0; i < p.layers; i++) {
    const pre = `model.layers.${i}`
    const blk = `blk.${i}`
    out.push(
      vector(`${blk}.attn_norm.weight`, `${pre}.input_layernorm.weight`),
      linear(`${blk}.attn_q.weight`, `${pre}.self_attn.q_proj.weight_T`, c, qDim, p.heads),
      linear(`${blk}.attn_k.weight`, `${pre}.self_attn.k_proj.weight_T`, c, kvDim, p.kvHeads),
      linear(`${blk}.attn_v.weight`, `${pre}.self_attn.v_proj.weight_T`, c, kvDim),
      linear(`${blk}.attn_output.weight`, `${pre}.self_attn.o_proj.weight_T`, qDim, c),
      vector(`${blk}.ffn_norm.weight`, `${pre}.post_attention_layernorm.weight`),
      linear(`${blk}.ffn_gate.weight`, `${pre}.mlp.gate_proj.weight_T`, c, p.intermediateSize),
      linear(`${blk}.ffn_up.weight`, `${pre}.mlp.up_proj.weight_T`, c, p.intermediateSize),
      linear(`${blk}.ffn_down.weight`, `${pre}.mlp.down_proj.weight_T`, p.intermediateSize, c),
    )
  }
  out.push(vector('output_norm.weight', 'model.norm.weight'))
  // Tied embeddings: llama.cpp reads token_embd.weight as the LM head when output.weight is absent.
  if (!p.tieEmbeddings) out.push(linear('output.weight', 'lm_head.weight_T', c, p.vocabSize))
  return out
}

/**
 * The element type a tensor is stored as: matrices in the file's type (F16 always, Q8_0/Q4_0 when their rows split
 * into whole blocks of 32, else F32: the tiny preset's ffn_down rows are 172 long); norm vectors always F32, as
 * convert_hf_to_gguf.py and llama-quantize keep them.
 */
export function tensorType(ne: number[], type: GgufType): GgufType {
  if (type === 'f32' || ne.length < 2) return 'f32'
  return type === 'f16' || ne[0] % GGML_BLOCK === 0 ? type : 'f32'
}

/** IEEE half bits of each value, little-endian (values beyond half's range become infinities, as ggml's do). */
function toF16(x: Float32Array): Uint8Array {
  const out = new Uint8Array(x.length * 2)
  const view = new DataView(out.buffer)
  for (let i = 0; i < x.length; i++) view.setUint16(i * 2, floatToHalf(x[i]), true)
  return out
}

function encode(data: Float32Array, type: GgufType): Uint8Array {
  if (type === 'q8_0') return quantizeQ8_0(data)
  if (type === 'q4_0') return quantizeQ4_0(data)
  if (type === 'f16') return toF16(data)
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
}

const storedBytes = (ne: number[], type: GgufType): number => {
  const n = ne.reduce((a, b) => a * b, 1)
  if (type === 'f32' || type === 'f16') return n * (type === 'f32' ? 4 : 2)
  return (n / GGML_BLOCK) * (type === 'q8_0' ? 34 : 18)
}

function metadata(p: Preset, name: string, type: GgufType): [string, Meta][] {
  const bpe = trainByteLevelBpe(p.vocabSize)
  const special = new Set<string>(SPECIAL_TOKENS)
  return [
    ['general.architecture', { t: 'string', v: 'llama' }],
    ['general.name', { t: 'string', v: name }],
    ['general.alignment', { t: 'u32', v: ALIGNMENT }],
    ['general.file_type', { t: 'u32', v: FILE_TYPE[type] }],
    ['llama.vocab_size', { t: 'u32', v: p.vocabSize }],
    ['llama.context_length', { t: 'u32', v: p.maxPositions }],
    ['llama.embedding_length', { t: 'u32', v: p.hiddenSize }],
    ['llama.block_count', { t: 'u32', v: p.layers }],
    ['llama.feed_forward_length', { t: 'u32', v: p.intermediateSize }],
    ['llama.attention.head_count', { t: 'u32', v: p.heads }],
    ['llama.attention.head_count_kv', { t: 'u32', v: p.kvHeads }],
    ['llama.attention.key_length', { t: 'u32', v: p.headDim }],
    ['llama.attention.value_length', { t: 'u32', v: p.headDim }],
    ['llama.rope.dimension_count', { t: 'u32', v: p.headDim }],
    ['llama.rope.freq_base', { t: 'f32', v: p.ropeTheta }],
    ['llama.attention.layer_norm_rms_epsilon', { t: 'f32', v: p.rmsNormEps }],
    // The builder's tokenizer is GPT-2's byte-level BPE with GPT-2's pre-tokenizer regex.
    ['tokenizer.ggml.model', { t: 'string', v: 'gpt2' }],
    ['tokenizer.ggml.pre', { t: 'string', v: 'gpt-2' }],
    ['tokenizer.ggml.tokens', { t: 'strings', v: bpe.tokens }],
    ['tokenizer.ggml.token_type', { t: 'i32s', v: bpe.tokens.map((t) => (special.has(t) ? TOKEN_CONTROL : TOKEN_NORMAL)) }],
    ['tokenizer.ggml.merges', { t: 'strings', v: bpe.merges.map(([a, b]) => `${a} ${b}`) }],
    ['tokenizer.ggml.bos_token_id', { t: 'u32', v: BOS_ID }],
    ['tokenizer.ggml.eos_token_id', { t: 'u32', v: EOS_ID }],
    ['tokenizer.ggml.padding_token_id', { t: 'u32', v: PAD_ID }],
    // As the onnxd tokenizer does (tokenizer_config.json add_bos_token: false): no BOS is prepended.
    ['tokenizer.ggml.add_bos_token', { t: 'bool', v: false }],
    ['tokenizer.chat_template', { t: 'string', v: CHAT_TEMPLATE }],
  ]
}

export interface GgufOptions {
  preset: Preset
  /** general.name, e.g. `onnxd-tiny`. */
  name: string
  seed: number
  type: GgufType
}

/** Writes the GGUF file to `path` (overwriting it). Returns the bytes written. */
export async function writeGguf(path: string, opts: GgufOptions): Promise<number> {
  if (endianness() !== 'LE') throw new Error('the GGUF writer needs a little-endian host')
  if (!GGUF_TYPES.includes(opts.type)) throw new OnnxdError('config', `GGUF type must be one of ${GGUF_TYPES.join(', ')}. Given: ${String(opts.type)}`)
  const p = opts.preset
  const tensors = tensorsOf(p, opts.seed)
  const meta = metadata(p, opts.name, opts.type)
  const head = new Out()
  head.u32(GGUF_MAGIC)
  head.u32(GGUF_VERSION)
  head.u64(tensors.length)
  head.u64(meta.length)
  for (const [key, m] of meta) writeMeta(head, key, m)
  let offset = 0
  for (const t of tensors) {
    const type = tensorType(t.ne, opts.type)
    head.string(t.name)
    head.u32(t.ne.length)
    for (const d of t.ne) head.u64(d)
    head.u32(GGML_TYPE[type])
    head.u64(offset)
    offset += storedBytes(t.ne, type)
    offset += (ALIGNMENT - (offset % ALIGNMENT)) % ALIGNMENT
  }
  head.pad()
  const fh = await open(path, 'w')
  let written = 0
  try {
    await fh.write(head.bytes())
    written += head.length
    for (const t of tensors) {
      const bytes = encode(t.data(), tensorType(t.ne, opts.type))
      await fh.write(bytes)
      const pad = (ALIGNMENT - (bytes.length % ALIGNMENT)) % ALIGNMENT
      if (pad) await fh.write(new Uint8Array(pad))
      written += bytes.length + pad
    }
  } finally {
    await fh.close()
  }
  return written
}

/**
 * Writes `type` GGUF of the onnxd bundle in `dir`, in either form (its builder record names the preset and seed it was
 * built from; the weights are regenerated from them, so they are the bundle's own) to `out` (default
 * `dir/model-<type>.gguf`).
 */
export async function writeBundleGguf(dir: string, type: GgufType, out?: string): Promise<{ path: string; bytes: number; preset: string; seed: number }> {
  let built: ReturnType<typeof builderRecord>
  try {
    built = builderRecord(dir)
  } catch (e) {
    throw new OnnxdError('bad_bundle', `${dir}: cannot read which builder made it (${(e as Error).message}); GGUF conversion needs a bundle onnxd built`)
  }
  if (built === null) throw new OnnxdError('bad_bundle', `${dir}: no config.json or genai_config.json; GGUF conversion needs a bundle onnxd built`)
  const { path, record: origin } = built
  if (!origin || typeof origin.preset !== 'string' || typeof origin.seed !== 'number')
    throw new OnnxdError('bad_bundle', `${path}: not built by onnxd (no onnxd_builder preset and seed); only the builder's bundles convert`)
  if (origin.version !== BUILDER_VERSION)
    throw new OnnxdError('bad_bundle', `${path}: built by builder version ${String(origin.version)}, this is ${BUILDER_VERSION}; rebuild it (onnxd model build) first`)
  const target = out ?? join(dir, `model-${type}.gguf`)
  const bytes = await writeGguf(target, { preset: presetOf(origin.preset), name: `onnxd-${origin.preset}`, seed: origin.seed, type })
  return { path: target, bytes, preset: origin.preset, seed: origin.seed }
}
