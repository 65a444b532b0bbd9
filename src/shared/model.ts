// How a model is named and asked for, by the node's options, the CLI and the engine alike: the embedded default
// bundle's directory, the id a bundle is served under when none is configured, the check that a request names the
// served model, and the execution providers and ONNX variants an operator can ask for. Imports: shared errors.
import { basename, resolve } from 'node:path'
import { clip, OnnxdError } from './errors.js'

/**
 * The embedded default model's bundle, built on first use when no other model is configured: the tiny preset in the
 * builder's default graph form (GroupQueryAttention), where `onnxd model build tiny` writes it. The plain form's
 * models/onnxd-tiny (the default before) is another bundle, never taken for this one.
 */
export const DEFAULT_MODEL_DIR = 'models/onnxd-tiny-gqa'

/** The id the embedded default is served under: the model's name, whichever graph form its bundle holds. */
export const DEFAULT_MODEL_ID = 'onnxd-tiny'

/**
 * ONNX Runtime execution providers onnxd can run on. `webgpu` ships inside onnxruntime-node (Dawn over Vulkan on
 * Linux); `cuda` and `tensorrt` are installed apart (docs/runtimes-and-gpus.md).
 */
export const PROVIDERS = ['cpu', 'webgpu', 'cuda', 'tensorrt'] as const
export type Provider = (typeof PROVIDERS)[number]

/** The ONNX variants of a bundle (`onnx/model_<dtype>.onnx`; fp32 is `model.onnx`). */
export const DTYPES = ['fp32', 'fp16', 'q4', 'int8', 'quantized'] as const
export type Dtype = (typeof DTYPES)[number]

/** The ONNX file name for each `dtype`, as optimum / transformers.js / onnx-community name their variants. */
export const DTYPE_FILES: Record<Dtype, string> = {
  fp32: 'model.onnx',
  fp16: 'model_fp16.onnx',
  q4: 'model_q4.onnx',
  int8: 'model_int8.onnx',
  quantized: 'model_quantized.onnx',
}

/** The id a bundle is served under: `id` if configured, else DEFAULT_MODEL_ID for the embedded default's bundle, else
 * the bundle's folder name. */
export function modelIdFor(dir: string, id?: string): string {
  const path = resolve(dir)
  return id ?? (path === resolve(DEFAULT_MODEL_DIR) ? DEFAULT_MODEL_ID : basename(path))
}

/**
 * An unknown model is a value error (422). The node answers it before a request reaches a worker, and the engine
 * for its in-process callers (`onnxd generate`, the benchmarks); the facade has its own check over all its nodes.
 */
export function checkModel(requested: string, served: string): void {
  if (requested !== served) throw new OnnxdError('invalid_value', `The model '${clip(requested)}' does not exist on this node. Available: ${served}`)
}
