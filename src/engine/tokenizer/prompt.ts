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

/** UTF-8 bytes of a text prompt: the prompt, or every message's content (the chat template only adds to them). */
export function promptTextBytes(req: PromptInput): number {
  if (req.prompt !== undefined) return Buffer.byteLength(req.prompt)
  return (req.messages ?? []).reduce((n, m) => n + Buffer.byteLength(m.content), 0)
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
 * The most UTF-8 bytes of prompt text that can fit `contextTokens` tokens, for a tokenizer whose tokens stand for at
 * most `maxTokenBytes` bytes: exact when it is length-preserving, else four times that (see TextTokenizer).
 */
export function promptByteLimit(contextTokens: number, maxTokenBytes: number, lengthPreserving: boolean): number {
  return contextTokens * maxTokenBytes * (lengthPreserving ? 1 : 4)
}
