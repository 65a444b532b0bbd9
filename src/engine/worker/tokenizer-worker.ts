// The piscina entry of the pool's tokenizer threads: renders chat templates and tokenizes prompts, so that this
// work (up to a second for a megabyte of text) never runs on an engine replica's step-loop thread. Loads only the
// bundle's tokenizer files, no ONNX Runtime.
import { workerData } from 'node:worker_threads'
import { toErrorData } from '../../shared/errors.js'
import { modelIdFor } from '../../shared/model.js'
import { readTokenizerFiles } from '../model/bundle.js'
import { TextTokenizer } from '../tokenizer/tokenizer.js'
import { encodeTextPrompt } from '../tokenizer/prompt.js'
import type { TokenizeReply, TokenizeTask, TokenizerWorkerData } from '../pool/protocol.js'

const data = workerData as TokenizerWorkerData

function init(): (t: TokenizeTask) => TokenizeReply {
  const files = readTokenizerFiles(data.modelDir, data.chatTemplate)
  const tok = files.tokenizer ? new TextTokenizer(files.tokenizer.json, files.tokenizer.config, files.chatTemplate) : null
  const modelId = modelIdFor(data.modelDir, data.modelId)
  return (t) => {
    if (t.kind === 'info') {
      return { kind: 'info', maxTokenBytes: tok?.maxTokenBytes ?? 0, lengthPreserving: tok?.lengthPreserving ?? false }
    }
    try {
      return { kind: 'ids', ids: encodeTextPrompt(tok, modelId, t) }
    } catch (e) {
      return { kind: 'error', error: toErrorData(e) }
    }
  }
}

export default init()
