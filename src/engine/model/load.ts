// Loads a model bundle into a ready-to-run model: bundle files, ONNX session and tokenizer, checked against
// each other (a tokenizer that can emit ids the graph has no logits for is a broken pairing).
import { join } from 'node:path'
import { OnnxdError } from '../../shared/errors.js'
import { readBundle, type Bundle, type BundleOptions } from './bundle.js'
import { DecoderSession, type SessionOptions } from './session.js'
import { TextTokenizer } from '../tokenizer/tokenizer.js'

export interface LoadedModel {
  id: string
  bundle: Bundle
  session: DecoderSession
  /** Null for a bundle without tokenizer.json: it serves `input_ids` requests only. */
  tokenizer: TextTokenizer | null
  /** Logits width. */
  vocab: number
  contextLength: number
  eos: ReadonlySet<number>
  /** Bytes of KV cache one token of one sequence takes (all layers, keys and values). */
  kvBytesPerToken: number
}

export type LoadOptions = BundleOptions &
  SessionOptions & {
    /**
     * The longest sequence served, prompt and output (vLLM's --max-model-len): the model's context length unless
     * shorter. Requests past it are refused as past the context; a device cache's slots are no longer.
     */
    maxModelLen?: number
  }

export async function loadModel(dir: string, opts: LoadOptions = {}): Promise<LoadedModel> {
  const bundle = readBundle(dir, opts)
  if (opts.maxModelLen !== undefined && !(Number.isInteger(opts.maxModelLen) && opts.maxModelLen >= 2 && opts.maxModelLen <= bundle.contextLength)) {
    throw new OnnxdError('config', `--max-model-len must be an integer from 2 to the model's context length, ${bundle.contextLength} (${dir}). Given: ${opts.maxModelLen}`)
  }
  const tokenizer = bundle.tokenizer
    ? new TextTokenizer(bundle.tokenizer.json, bundle.tokenizer.config, bundle.chatTemplate, join(dir, 'tokenizer.json'))
    : null
  const session = await DecoderSession.create(bundle, opts)
  const sig = session.signature
  try {
    const vocab = sig.logits.vocab
    if (tokenizer && tokenizer.vocabSize > vocab) {
      throw new OnnxdError(
        'bad_bundle',
        `${join(dir, 'tokenizer.json')}: tokenizer vocabulary (${tokenizer.vocabSize} ids) is larger than the model's logits (${vocab}) in ${bundle.onnxPath}: the tokenizer does not belong to this model`,
      )
    }
    const badEos = bundle.eosTokenIds.filter((id) => id < 0 || id >= vocab)
    if (badEos.length) throw new OnnxdError('bad_bundle', `${dir}: eos_token_id ${badEos.join(', ')} is outside the model's vocabulary (${vocab})`)
    const { layers, heads, headDim, dtype } = sig.kv
    return {
      id: bundle.id,
      bundle,
      session,
      tokenizer,
      vocab,
      contextLength: opts.maxModelLen ?? bundle.contextLength,
      eos: new Set(bundle.eosTokenIds),
      kvBytesPerToken: layers * 2 * heads * headDim * (dtype === 'float16' ? 2 : 4),
    }
  } catch (e) {
    await session.dispose()
    throw e
  }
}
