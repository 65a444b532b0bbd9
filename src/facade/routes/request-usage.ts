// A request's usage from its node answers, the one place every /v1 surface counts it (the answer's usage, the bill,
// the request span): a client request runs one node request per prompt and choice (n), laid out as withChoices
// lays them, each prompt's choices in a row. Each prompt counts once, however many choices it has, as OpenAI and
// vLLM count it; every choice's completion counts. Imports: the contract's types.
import type { Usage } from '../../contract/completions.js'

/**
 * The usage of a request whose node requests are prompts × `choices` in a row: `us[i]` is what node request i
 * reported (null or missing: nothing yet). A prompt's tokens are the most any of its choices reported (they share
 * the prompt: one that failed early may report fewer), its cached tokens the fewest (the first choice computes the
 * prompt; the others find it in the prefix cache).
 */
export function requestUsage(us: readonly (Partial<Usage> | null | undefined)[], choices = 1): Usage {
  let prompt = 0
  let cached = 0
  let completion = 0
  for (let start = 0; start < us.length; start += choices) {
    const group = us.slice(start, start + choices).filter((u): u is Partial<Usage> => u !== null && u !== undefined)
    if (group.length === 0) continue
    prompt += Math.max(...group.map((u) => u.prompt_tokens ?? 0))
    cached += Math.min(...group.map((u) => u.prompt_tokens_details?.cached_tokens ?? 0))
    completion += group.reduce((n, u) => n + (u.completion_tokens ?? 0), 0)
  }
  return { prompt_tokens: prompt, completion_tokens: completion, prompt_tokens_details: { cached_tokens: cached } }
}
