// A request's prompt: its fields, how many bytes of text it brings, and its token ids (the rule that exactly one
// field is given is shared/prompt-input.ts). Used where prompts are tokenized: the pool's tokenizer threads, and an
// engine run in-process.
import { OnnxdError } from '../../shared/errors.js'
import type { Message, TextTokenizer } from './tokenizer.js'
import type { FunctionTool } from '../../shared/tools.js'

export interface PromptInput {
  messages?: Message[]
  prompt?: string
  input_ids?: number[]
  /** With messages: the tools the chat template renders. */
  tools?: FunctionTool[]
}

/** UTF-8 bytes of a value as a chat template writes it: a string as it is, anything else as its JSON. */
const renderedBytes = (v: unknown): number => (typeof v === 'string' ? Buffer.byteLength(v) : v === undefined ? 0 : Buffer.byteLength(JSON.stringify(v) ?? ''))

/**
 * UTF-8 bytes of the text a prompt brings to the tokenizer: the prompt; or, for chat, every value of every message
 * (role, content, and whatever else the chat template may render: name, tool_calls with their arguments, as JSON,
 * tool_call_id) and the tools' JSON. Templates add their own markup around these and leave out little of them (a
 * call's id or type, quotes): a request over the byte bound cannot fit the context, whichever field holds its bytes,
 * and is refused before any of it is rendered or tokenized.
 */
export function promptTextBytes(req: PromptInput): number {
  if (req.prompt !== undefined) return Buffer.byteLength(req.prompt)
  let n = 0
  for (const m of req.messages ?? []) for (const v of Object.values(m)) n += renderedBytes(v)
  if (req.tools?.length) n += renderedBytes(req.tools)
  return n
}

/** Token ids of a text prompt (messages through the chat template). */
export function encodeTextPrompt(tok: TextTokenizer | null, modelId: string, req: PromptInput): number[] {
  if (!tok) throw new OnnxdError('invalid_value', `model ${modelId} has no tokenizer: send \`input_ids\``)
  if (req.tools?.length && !req.messages) throw new OnnxdError('invalid_value', '`tools` need `messages`: the chat template renders them', { param: 'tools' })
  const ids = req.messages ? tok.encodeChat(req.messages, req.tools) : tok.encode(req.prompt ?? '')
  if (ids.length === 0) throw new OnnxdError('invalid_value', '`prompt` encodes to no tokens')
  return ids
}

/**
 * What bounds a text prompt's size before it is tokenized: the most UTF-8 bytes one token stands for, and whether
 * every byte of text survives into tokens. A TextTokenizer is one (its maxTokenBytes and lengthPreserving); the pool,
 * which holds no tokenizer, gets the two values from its tokenizer threads.
 */
export interface PromptBound {
  maxTokenBytes: number
  lengthPreserving: boolean
}

/**
 * The most UTF-8 bytes of prompt text that can fit `contextTokens` tokens. Exact for a length-preserving tokenizer;
 * otherwise four times that, so only a pathological text that normalization shrinks fourfold is refused wrongly.
 */
export function promptByteLimit(contextTokens: number, bound: PromptBound): number {
  return contextTokens * bound.maxTokenBytes * (bound.lengthPreserving ? 1 : 4)
}
