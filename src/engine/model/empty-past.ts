// One masked dummy past slot for a step over an empty cache, on providers that cannot run one (webgpu). ONNX
// Runtime's WebGPU provider (1.30, Dawn over Vulkan) crashes the process on a plain-op decoder's step with an empty
// past: the attention MatMul over the past then has an inner dimension of 0. A past of one zero slot whose mask is 0
// attends to nothing (the additive mask drives its softmax weight to 0), so the logits are the empty past's.
// Where the graph returns concat(past, new) ('appended' presents) the dummy slot is cut off again; presents that are
// only the new rows need nothing. Not for graphs without a mask input (nothing could hide the slot), nor for
// GroupQueryAttention caches written in place, nor for a several-token step on a graph that takes several new tokens
// only over an empty past (no chunked prefill: onnxruntime-genai's MultiHeadAttention exports, whose mask subgraph
// refuses the slot); those run an empty past on WebGPU as they are (tiny-random-LlamaForCausalLM-fp16 does).
// Imports: the step's types.
import type { ForwardInput, KvData, KvTensor, PresentLayout } from './step-io.js'

/** Whether this step over this graph takes the dummy slot (see above). */
export function needsPastSlot(x: ForwardInput, graph: { masked: boolean; present: PresentLayout; chunkedPrefill: boolean }): boolean {
  return x.pastLen === 0 && graph.masked && graph.present !== 'in-place' && (x.seq === 1 || graph.chunkedPrefill)
}

/** `x` with one zero past slot in front of every row, masked out (mask [rows, 1 + seq]). */
export function withPastSlot(x: ForwardInput): ForwardInput {
  const width = x.seq
  const mask = new Uint8Array(x.rows * (width + 1))
  for (let r = 0; r < x.rows; r++) mask.set(x.mask.subarray(r * width, (r + 1) * width), r * (width + 1) + 1)
  const past = x.past.map((t) => {
    const dims = [...t.dims]
    dims[dims.length - 2] = 1
    const n = dims.reduce((a, b) => a * b, 1)
    return { data: t.data instanceof Uint16Array ? new Uint16Array(n) : new Float32Array(n), dims }
  })
  return { ...x, pastLen: 1, mask, past }
}

/** An 'appended' present of a step run withPastSlot, without that slot (the first along the sequence axis). */
export function dropPastSlot(t: { data: unknown; dims: readonly number[] }): KvTensor {
  const src = t.data as KvData
  const dims = [...t.dims]
  const P = dims[dims.length - 2]
  const D = dims[dims.length - 1]
  const blocks = dims.slice(0, -2).reduce((a, b) => a * b, 1)
  dims[dims.length - 2] = P - 1
  const out = src instanceof Uint16Array ? new Uint16Array(blocks * (P - 1) * D) : new Float32Array(blocks * (P - 1) * D)
  for (let b = 0; b < blocks; b++) out.set(src.subarray((b * P + 1) * D, (b + 1) * P * D), b * (P - 1) * D)
  return { data: out, dims }
}
