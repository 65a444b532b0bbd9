// The rule on a completion request's prompt: exactly one of `messages`, `prompt` or `input_ids`. The node checks
// it on the HTTP body (400 before the engine sees it), the engine on what it is submitted. Imports: shared errors.
import { OnnxdError } from './errors.js'

export const PROMPT_FIELDS = ['messages', 'prompt', 'input_ids'] as const

/** Throws `invalid_request` (400, a malformed request) unless exactly one of the prompt fields is given. */
export function checkOnePrompt(req: { readonly [K in (typeof PROMPT_FIELDS)[number]]?: unknown }): void {
  const given = PROMPT_FIELDS.filter((k) => req[k] !== undefined)
  if (given.length === 1) return
  throw new OnnxdError(
    'invalid_request',
    given.length === 0
      ? "Missing required field: one of 'messages', 'prompt' or 'input_ids'"
      : `Exactly one of 'messages', 'prompt' or 'input_ids' is allowed. Given: ${given.join(', ')}`,
  )
}
