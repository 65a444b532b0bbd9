import { describe, expect, it } from 'vitest'
import { isOnnxdError, type ErrorCode } from '../../../src/shared/errors.js'
import { validateSampling } from '../../../src/engine/generation/params.js'
import { DEFAULT_MAX_TOKENS, type SamplingInput } from '../../../src/shared/sampling.js'

const limits = { maxContext: 1024, promptTokens: 10, vocab: 512 }

function errorOf(input: SamplingInput, lim = limits): { code: ErrorCode; message: string } {
  try {
    validateSampling(input, lim)
  } catch (e) {
    if (isOnnxdError(e)) return { code: e.code, message: e.message }
    throw e
  }
  throw new Error(`accepted ${JSON.stringify(input)}`)
}

describe('validateSampling', () => {
  it('fills the defaults', () => {
    const p = validateSampling({}, limits)
    expect(p).toEqual({
      temperature: 1,
      top_p: 1,
      top_k: 0,
      min_p: 0,
      seed: undefined,
      presence_penalty: 0,
      frequency_penalty: 0,
      repetition_penalty: 1,
      max_tokens: DEFAULT_MAX_TOKENS,
      min_tokens: 0,
      ignore_eos: false,
      stop: [],
      logit_bias: [],
      logprobs: false,
      top_logprobs: 0,
      response_format: null,
      stop_token_ids: [],
    })
  })

  it('reads logit_bias as (id, bias) pairs, and refuses keys that are not token ids below the vocabulary and biases outside [-100, 100]', () => {
    expect(validateSampling({ logit_bias: { '0': -100, '511': 100, '7': 0.5 } }, limits).logit_bias).toEqual([
      [0, -100],
      [7, 0.5],
      [511, 100],
    ])
    for (const [bias, rule] of [
      [{ '512': 1 }, /`logit_bias` must be keyed by token ids in \[0, 512\)\. Given: "512"/],
      [{ '-1': 1 }, /keyed by token ids/],
      [{ '01': 1 }, /keyed by token ids/],
      [{ x: 1 }, /keyed by token ids/],
      [{ '3': 100.5 }, /`logit_bias\.3` must be >= -100 and <= 100\. Given: 100\.5/],
      [{ '3': Number.NaN }, /`logit_bias\.3` must be a finite number/],
    ] as const) {
      const e = errorOf({ logit_bias: bias as Record<string, number> })
      expect(e.code).toBe('invalid_value')
      expect(e.message).toMatch(rule)
    }
  })

  it('takes at most 1024 logit_bias entries', () => {
    const many = (n: number): Record<string, number> => Object.fromEntries(Array.from({ length: n }, (_, i) => [String(i), 1]))
    expect(validateSampling({ logit_bias: many(1024) }, { ...limits, vocab: 4096 }).logit_bias).toHaveLength(1024)
    expect(errorOf({ logit_bias: many(1025) }, { ...limits, vocab: 4096 }).message).toMatch(/`logit_bias` must be at most 1024 entries\. Given: 1025/)
  })

  it('takes top_logprobs up to 20, and only with logprobs', () => {
    expect(validateSampling({ logprobs: true, top_logprobs: 20 }, limits)).toMatchObject({ logprobs: true, top_logprobs: 20 })
    expect(errorOf({ logprobs: true, top_logprobs: 21 }).message).toMatch(/`top_logprobs` must be >= 0 and <= 20/)
    expect(errorOf({ top_logprobs: 3 }).message).toMatch(/`top_logprobs` must be used only with logprobs: true\. Given: 3/)
    expect(validateSampling({ top_logprobs: 0 }, limits).logprobs).toBe(false)
  })

  it('keeps given values, normalises top_k -1 to 0 (off) and a single stop string to a list', () => {
    const p = validateSampling(
      {
        temperature: 0.7,
        top_p: 0.9,
        top_k: -1,
        min_p: 0.05,
        seed: -42,
        presence_penalty: -2,
        frequency_penalty: 2,
        repetition_penalty: 1.3,
        max_tokens: 100,
        min_tokens: 100,
        ignore_eos: true,
        stop: '\n',
        stop_token_ids: [0, 511],
      },
      limits,
    )
    expect(p).toMatchObject({ temperature: 0.7, top_p: 0.9, top_k: 0, min_p: 0.05, seed: -42, max_tokens: 100 })
    expect(p).toMatchObject({ presence_penalty: -2, frequency_penalty: 2, repetition_penalty: 1.3, min_tokens: 100 })
    expect(p.ignore_eos).toBe(true)
    expect(p.stop).toEqual(['\n'])
    expect(p.stop_token_ids).toEqual([0, 511])
    expect(validateSampling({ top_k: 40 }, limits).top_k).toBe(40)
  })

  it('accepts every bound itself', () => {
    for (const input of [
      { temperature: 0 },
      { temperature: 2 },
      { top_p: 1 },
      { top_p: 1e-9 },
      { top_k: 0 },
      { top_k: 1 },
      { min_p: 0 },
      { min_p: 1 },
      { presence_penalty: 2, frequency_penalty: -2 },
      { repetition_penalty: 2 },
      { max_tokens: 1, min_tokens: 0 },
      { stop: ['a', 'b', 'c', 'd'] },
    ]) {
      expect(() => validateSampling(input, limits), JSON.stringify(input)).not.toThrow()
    }
  })

  it.each<[SamplingInput, string, string]>([
    [{ temperature: 3 }, 'temperature', '`temperature` must be >= 0 and <= 2. Given: 3'],
    [{ temperature: -0.1 }, 'temperature', '`temperature` must be >= 0 and <= 2. Given: -0.1'],
    [{ top_p: 0 }, 'top_p', '`top_p` must be > 0 and <= 1. Given: 0'],
    [{ top_p: 1.5 }, 'top_p', '`top_p` must be > 0 and <= 1. Given: 1.5'],
    [{ top_k: -2 }, 'top_k', '`top_k` must be -1 or 0 (disabled) or >= 1. Given: -2'],
    [{ top_k: 2.5 }, 'top_k', 'Given: 2.5'],
    [{ min_p: -0.5 }, 'min_p', '`min_p` must be >= 0 and <= 1. Given: -0.5'],
    [{ min_p: 1.01 }, 'min_p', 'Given: 1.01'],
    [{ presence_penalty: 2.5 }, 'presence_penalty', '`presence_penalty` must be >= -2 and <= 2. Given: 2.5'],
    [{ frequency_penalty: -3 }, 'frequency_penalty', '`frequency_penalty` must be >= -2 and <= 2. Given: -3'],
    [{ repetition_penalty: 0 }, 'repetition_penalty', '`repetition_penalty` must be > 0 and <= 2. Given: 0'],
    [{ repetition_penalty: 2.1 }, 'repetition_penalty', 'Given: 2.1'],
    [{ max_tokens: 0 }, 'max_tokens', '`max_tokens` must be >= 1. Given: 0'],
    [{ max_tokens: 1.5 }, 'max_tokens', '`max_tokens` must be an integer. Given: 1.5'],
    [{ min_tokens: -1 }, 'min_tokens', '`min_tokens` must be >= 0. Given: -1'],
    [{ max_tokens: 5, min_tokens: 6 }, 'min_tokens', '`min_tokens` must be >= 0 and <= max_tokens (5). Given: 6'],
    [{ seed: 0.5 }, 'seed', 'Given: 0.5'],
    [{ temperature: Number.NaN }, 'temperature', 'Given: NaN'],
    [{ stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop', '`stop` must be at most 4 strings. Given: 5'],
    [{ stop: ['a', ''] }, 'stop', '`stop` must be non-empty strings. Given: "" at index 1'],
    [{ stop: '' }, 'stop', 'Given: "" at index 0'],
    [{ stop_token_ids: [3, 512] }, 'stop_token_ids', '`stop_token_ids` must be integers in [0, 512). Given: 512 at index 1'],
    [{ stop_token_ids: [-1] }, 'stop_token_ids', '`stop_token_ids` must be integers in [0, 512). Given: -1 at index 0'],
    [{ stop_token_ids: [1.5] }, 'stop_token_ids', 'Given: 1.5 at index 0'],
  ])('rejects %j as invalid_value naming %s', (input, field, message) => {
    const e = errorOf(input)
    expect(e.code).toBe('invalid_value')
    expect(e.message).toContain(`\`${field}\``)
    expect(e.message).toContain(message)
  })

  it('rejects prompt + max_tokens over the context as context_length_exceeded', () => {
    expect(() => validateSampling({ max_tokens: 1014 }, limits)).not.toThrow()
    expect(errorOf({ max_tokens: 1015 })).toEqual({
      code: 'context_length_exceeded',
      message: 'prompt tokens + max_tokens must be <= 1024. Given: 10 + 1015',
    })
  })

  it('defaults max_tokens to the room left in the context when that is below the default', () => {
    expect(validateSampling({}, { maxContext: 100, promptTokens: 90, vocab: 512 }).max_tokens).toBe(10)
    expect(validateSampling({}, { maxContext: 4096, promptTokens: 90, vocab: 512 }).max_tokens).toBe(DEFAULT_MAX_TOKENS)
    expect(validateSampling({}, { maxContext: 4096, promptTokens: 90, vocab: 512, defaultMaxTokens: 16 }).max_tokens).toBe(16)
  })

  it('rejects a prompt that fills the context when max_tokens is not given', () => {
    const e = errorOf({}, { maxContext: 100, promptTokens: 100, vocab: 512 })
    expect(e.code).toBe('context_length_exceeded')
    expect(e.message).toContain('100')
    expect(errorOf({}, { maxContext: 100, promptTokens: 130, vocab: 512 }).code).toBe('context_length_exceeded')
  })

  it('rejects min_tokens that cannot fit next to the prompt when max_tokens is defaulted', () => {
    const e = errorOf({ min_tokens: 20 }, { maxContext: 100, promptTokens: 90, vocab: 512 })
    expect(e).toEqual({
      code: 'context_length_exceeded',
      message: 'prompt tokens + min_tokens must be <= 100. Given: 90 + 20',
    })
  })

  it('reports value errors before context errors', () => {
    expect(errorOf({ temperature: 9, max_tokens: 5000 }).code).toBe('invalid_value')
  })
})
