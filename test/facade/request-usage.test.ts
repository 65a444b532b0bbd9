// A request's usage from its node answers (request-usage.ts): each prompt once however many choices it has, every
// choice's completion, a choice without an answer yet left out.
import { describe, expect, it } from 'vitest'
import { requestUsage } from '../../src/facade/routes/request-usage.js'

const u = (prompt: number, completion: number, cached = 0): { prompt_tokens: number; completion_tokens: number; prompt_tokens_details: { cached_tokens: number } } => ({
  prompt_tokens: prompt,
  completion_tokens: completion,
  prompt_tokens_details: { cached_tokens: cached },
})

describe('requestUsage', () => {
  it('n = 2 on a 16-token prompt: 16 prompt tokens (not 32), both completions, the cached tokens of the prompt once', () => {
    expect(requestUsage([u(16, 5, 0), u(16, 7, 16)], 2)).toEqual(u(16, 12, 0))
  })
  it('several prompts × n, as withChoices lays them out: each prompt once', () => {
    expect(requestUsage([u(4, 1), u(4, 2), u(9, 3, 8), u(9, 4, 8)], 2)).toEqual(u(13, 10, 8))
    // Without n (one choice each), every answer is its own prompt.
    expect(requestUsage([u(4, 1), u(9, 3)])).toEqual(u(13, 4, 0))
  })
  it('a choice that failed or has not reported counts nothing; one that reported fewer prompt tokens does not lower the prompt', () => {
    expect(requestUsage([null, u(16, 3)], 2)).toEqual(u(16, 3, 0))
    expect(requestUsage([{ prompt_tokens: 0, completion_tokens: 2 }, u(16, 3)], 2)).toEqual(u(16, 5, 0))
    expect(requestUsage([null, undefined], 2)).toEqual(u(0, 0, 0))
  })
})
