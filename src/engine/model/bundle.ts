// Model bundles on disk: finds the files of a Hugging Face ONNX export or an onnxruntime-genai folder and reads
// their configs. Pure file I/O: no ONNX Runtime here (session.ts discovers the graph's signature).
import { existsSync, readFileSync, statSync, openSync, readSync, closeSync } from 'node:fs'
import { join } from 'node:path'
import { OnnxdError } from '../../shared/errors.js'
import { DTYPE_FILES, modelIdFor, type Dtype } from '../../shared/model.js'

export type Layout = 'hf' | 'genai'

/** The ONNX file name for each `dtype` (defined in shared/model.ts, which the builder writes them by). */
export const VARIANTS = DTYPE_FILES

export interface Bundle {
  /** Model id: the folder name unless the caller names it. */
  id: string
  dir: string
  layout: Layout
  onnxPath: string
  /** Parsed tokenizer.json and tokenizer_config.json; null when the bundle has none (input_ids only). */
  tokenizer: { json: object; config: Record<string, unknown> } | null
  chatTemplate: string | null
  /** Every id that ends a sequence. Never empty. */
  eosTokenIds: number[]
  /** Context window in tokens (max positions). */
  contextLength: number
  /** 'right' for GroupQueryAttention graphs, which find each row's length from the mask and keep caches left-aligned. */
  padding: 'left' | 'right'
}

const fail = (msg: string): never => {
  throw new OnnxdError('bad_bundle', msg)
}

function readJson(path: string, required: true): Record<string, unknown>
function readJson(path: string, required: false): Record<string, unknown> | null
function readJson(path: string, required: boolean): Record<string, unknown> | null {
  if (!existsSync(path)) return required ? fail(`${path}: file not found`) : null
  try {
    const v: unknown = JSON.parse(readFileSync(path, 'utf8'))
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return fail(`${path}: expected a JSON object`)
    return v as Record<string, unknown>
  } catch (e) {
    if (e instanceof OnnxdError) throw e
    return fail(`${path}: invalid JSON (${(e as Error).message})`)
  }
}

const ids = (v: unknown): number[] =>
  typeof v === 'number' ? [v] : Array.isArray(v) ? v.filter((x): x is number => typeof x === 'number') : []

/** Whether the ONNX graph (not its external data) names an op; op types are plain strings in the protobuf. */
function graphMentions(path: string, needle: string): boolean {
  const size = statSync(path).size
  const fd = openSync(path, 'r')
  try {
    const chunk = Buffer.alloc(Math.min(size, 64 << 20))
    const pat = Buffer.from(needle)
    for (let pos = 0; pos < size; pos += chunk.length - pat.length) {
      const n = readSync(fd, chunk, 0, chunk.length, pos)
      if (chunk.subarray(0, n).includes(pat)) return true
      if (pos + n >= size) break
    }
    return false
  } finally {
    closeSync(fd)
  }
}

export interface BundleOptions {
  id?: string
  dtype?: Dtype
  /** A chat template used in place of the bundle's (the text of a Jinja template). */
  chatTemplate?: string
}

/** A bundle's tokenizer.json, tokenizer_config.json and chat template, without touching its ONNX files. */
export function readTokenizerFiles(dir: string, chatTemplate?: string): Pick<Bundle, 'tokenizer' | 'chatTemplate'> {
  const json = readJson(join(dir, 'tokenizer.json'), false)
  const config = json ? (readJson(join(dir, 'tokenizer_config.json'), false) ?? {}) : null
  return {
    tokenizer: json && config ? { json, config } : null,
    chatTemplate: chatTemplate ?? (typeof config?.chat_template === 'string' ? config.chat_template : null),
  }
}

/** Reads a bundle directory. Every failure is an OnnxdError('bad_bundle') naming the file and the problem. */
export function readBundle(dir: string, opts: BundleOptions = {}): Bundle {
  if (!existsSync(dir)) fail(`${dir}: model directory not found`)
  if (!statSync(dir).isDirectory()) fail(`${dir}: not a directory`)
  const dtype = opts.dtype ?? 'fp32'
  if (!(dtype in VARIANTS)) fail(`dtype must be one of ${Object.keys(VARIANTS).join(', ')}. Given: ${dtype}`)

  const genaiPath = join(dir, 'genai_config.json')
  const hfConfigPath = join(dir, 'config.json')
  let layout: Layout
  let onnxPath: string
  let contextLength: number | undefined
  let eos: number[] = []

  if (existsSync(genaiPath)) {
    layout = 'genai'
    const g = readJson(genaiPath, true)
    const model = (g.model ?? {}) as Record<string, unknown>
    const decoder = (model.decoder ?? {}) as Record<string, unknown>
    if (typeof decoder.filename !== 'string') fail(`${genaiPath}: model.decoder.filename is missing`)
    // genai_config.json names the float32 decoder; another dtype is its variant file beside it (onnxd's builder
    // writes model_q4.onnx etc. there), never silently the float32 one.
    onnxPath = dtype === 'fp32' ? join(dir, decoder.filename as string) : join(dir, VARIANTS[dtype])
    if (!existsSync(onnxPath)) fail(`${onnxPath}: file not found (dtype ${dtype})`)
    contextLength = typeof model.context_length === 'number' ? model.context_length : undefined
    eos = ids(model.eos_token_id)
  } else if (existsSync(hfConfigPath)) {
    layout = 'hf'
    const c = readJson(hfConfigPath, true)
    const gen = readJson(join(dir, 'generation_config.json'), false) ?? {}
    const file = VARIANTS[dtype]
    const candidates = [join(dir, 'onnx', file), join(dir, file)]
    onnxPath = candidates.find((p) => existsSync(p)) ?? fail(`${candidates[0]}: file not found (dtype ${dtype})`)
    const ctx = c.max_position_embeddings ?? c.n_positions ?? c.max_sequence_length
    contextLength = typeof ctx === 'number' ? ctx : undefined
    eos = ids(gen.eos_token_id ?? c.eos_token_id)
  } else {
    return fail(`${dir}: unknown model layout (expected config.json with onnx/model.onnx, or genai_config.json)`)
  }
  if (!existsSync(onnxPath)) fail(`${onnxPath}: file not found`)

  const { tokenizer, chatTemplate } = readTokenizerFiles(dir, opts.chatTemplate)
  const tokMax = tokenizer?.config.model_max_length
  contextLength ??= typeof tokMax === 'number' && tokMax < 1e9 ? tokMax : undefined
  if (!contextLength) fail(`${layout === 'hf' ? hfConfigPath : genaiPath}: no context length (max_position_embeddings or context_length)`)
  if (eos.length === 0) fail(`${layout === 'hf' ? hfConfigPath : genaiPath}: no eos_token_id (also looked in generation_config.json)`)

  return {
    id: modelIdFor(dir, opts.id),
    dir,
    layout,
    onnxPath,
    tokenizer,
    chatTemplate,
    eosTokenIds: [...new Set(eos)],
    contextLength: contextLength as number,
    padding: graphMentions(onnxPath, 'GroupQueryAttention') ? 'right' : 'left',
  }
}
