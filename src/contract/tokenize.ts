// The worker node's tokenize endpoint (POST /internal/v1/tokenize): how many tokens a prompt is, rendered and
// tokenized exactly as a completion of it would be (chat messages through the model's chat template, with their
// tools; or raw text), without running the model. Shared by the node (server side) and the facade (client side),
// which counts prompts with it (Anthropic's count_tokens). Imports: typebox, the completion contract.
import { Type, type Static } from '@sinclair/typebox'
import { CompletionRequest } from './completions.js'

export const TOKENIZE_PATH = '/internal/v1/tokenize'

const { model, messages, prompt, tools } = CompletionRequest.properties

/** The prompt fields of a completion request, as a completion takes them: `model`, and `messages` (with `tools`) or `prompt`. */
export const TokenizeRequest = Type.Object({ model, messages, prompt, tools }, { additionalProperties: false })
export type TokenizeRequest = Static<typeof TokenizeRequest>

export const TokenizeResponse = Type.Object({
  model: Type.String(),
  /** The prompt's tokens: what a completion of it reports as `usage.prompt_tokens`. */
  prompt_tokens: Type.Integer(),
})
export type TokenizeResponse = Static<typeof TokenizeResponse>
