// The sampling fields are defined once (src/shared/sampling.ts); the facade's schema, the node's contract, the
// facade-to-node translation and the engine's validation are derived from it. These tests hold that they agree.
import { describe, expect, it } from 'vitest'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { CompletionRequest } from '../../src/contract/completions.js'
import { validateSampling } from '../../src/engine/generation/params.js'
import { ChatParams, HONOURED_FIELDS, parseChatParams } from '../../src/facade/routes/chat-completions/schema.js'
import { toNodeRequest } from '../../src/facade/routes/chat-completions/translate.js'
import { isOnnxdError } from '../../src/shared/errors.js'
import { checkOnePrompt } from '../../src/shared/prompt-input.js'
import { DEFAULT_SAMPLING, SAMPLING_FIELD_NAMES, SAMPLING_FIELDS, openAiNames, type SamplingFieldName } from '../../src/shared/sampling.js'

const chat = { model: 'm', messages: [{ role: 'user', content: 'hi' }] }
const contract = TypeCompiler.Compile(CompletionRequest)
/** Room for any max_tokens probed below, so only value errors remain. */
const limits = { maxContext: 2 ** 60, promptTokens: 1, vocab: 2 ** 40 }

function facadeAccepts(k: string, v: unknown): boolean {
  try {
    parseChatParams({ ...chat, ...WITH[k as SamplingFieldName], [k]: v })
    return true
  } catch (e) {
    if (isOnnxdError(e) && e.code === 'invalid_value') return false
    throw e
  }
}

/** Fields that only mean something beside another: probed with it (top_logprobs with logprobs: true). */
const WITH: Partial<Record<SamplingFieldName, Record<string, unknown>>> = { top_logprobs: { logprobs: true } }

function engineAccepts(k: SamplingFieldName, v: unknown): boolean {
  try {
    validateSampling({ ...WITH[k], [k]: v }, limits)
    return true
  } catch (e) {
    if (isOnnxdError(e) && e.code === 'invalid_value') return false
    if (isOnnxdError(e) && e.code === 'context_length_exceeded') return true // a value error would have come first
    throw e
  }
}

const NUMBERS = [-1e9, -3, -2.5, -2, -1.5, -1, -0.5, -1e-9, 0, 1e-9, 0.5, 1, 1.5, 2, 2.5, 3, 7, 1e9, 2 ** 53, -(2 ** 53)]
const PROBES: Record<string, unknown[]> = {
  number: NUMBERS,
  integer: NUMBERS,
  boolean: [true, false],
  // Token ids: the vocabulary bound is the engine's alone (the facade does not know the model); below it they agree.
  ids: [[], [0], [5, 7], [-1], [1.5], [2 ** 30], 'x'],
  strings: ['', 'a', [], ['a'], ['a', ''], ['a', 'b', 'c', 'd'], ['a', 'b', 'c', 'd', 'e'], Array(20).fill('x')],
  // logit_bias: token ids as decimal keys (the vocabulary bound is the engine's), biases in [-100, 100].
  tokenMap: [{}, { '5': 1 }, { '0': -100, '7': 100 }, { '5': 101 }, { '5': -100.5 }, { x: 1 }, { '-1': 2 }, { '05': 1 }, { '5': 'a' }, [], 'x', 3],
  responseFormat: [
    { type: 'text' },
    { type: 'json_object' },
    { type: 'json_schema', json_schema: { name: 'a', schema: { type: 'object' } } },
    { type: 'json_schema', json_schema: { name: 'a', strict: true } },
    { type: 'json_schema' },
    { type: 'json_schema', json_schema: { schema: {} } },
    { type: 'xml' },
    { type: 'text', extra: 1 },
    {},
    'json',
  ],
}

function probesOf(k: SamplingFieldName): unknown[] {
  const s = SAMPLING_FIELDS[k].schema as { type?: string; anyOf?: { type?: string }[]; items?: { type?: string } }
  if (s.type === 'object') return PROBES.tokenMap!
  if (s.anyOf?.some((x) => x.type === 'object')) return PROBES.responseFormat!
  if (s.items?.type === 'integer') return PROBES.ids!
  if (s.anyOf || s.type === 'array') return PROBES.strings!
  return PROBES[s.type!]!
}

describe('one definition per sampling field', () => {
  it('the facade knows every field under each of its OpenAI names, the node under its own name', () => {
    for (const k of SAMPLING_FIELD_NAMES) {
      for (const name of openAiNames(k)) expect(HONOURED_FIELDS.has(name), name).toBe(true)
      expect(Object.keys(CompletionRequest.properties), k).toContain(k)
    }
    expect(openAiNames('max_tokens')).toEqual(['max_tokens', 'max_completion_tokens'])
  })

  it.each(SAMPLING_FIELD_NAMES)('the facade and the engine accept the same values of %s', (k) => {
    for (const v of probesOf(k)) expect(facadeAccepts(k, v), `${k}=${JSON.stringify(v)}`).toBe(engineAccepts(k, v))
  })

  it("the node's contract checks types only: an out-of-range value reaches the engine, which answers 422", () => {
    const body = { ...chat, temperature: 9, top_p: 0, max_tokens: 0, stop: ['a', 'b', 'c', 'd', 'e'] }
    expect(contract.Check(body)).toBe(true)
    expect(contract.Check({ ...chat, temperature: 'hot' })).toBe(false)
    expect(ChatParams.properties.temperature).toMatchObject({ minimum: 0, maximum: 2 })
    expect(CompletionRequest.properties.temperature).not.toHaveProperty('maximum')
  })

  it('the engine defaults each field to its definition (max_tokens: capped by the context)', () => {
    const p = validateSampling({}, { maxContext: 10_000, promptTokens: 10, vocab: 100 })
    for (const k of SAMPLING_FIELD_NAMES) if (k !== 'max_tokens') expect(p[k], k).toEqual(SAMPLING_FIELDS[k].default)
    expect(p.max_tokens).toBe(DEFAULT_SAMPLING.max_tokens)
  })

  it('the facade forwards every field under its node name, in a body the contract accepts', () => {
    const openAi = {
      ...chat,
      max_completion_tokens: 9,
      temperature: 0.5,
      top_p: 0.9,
      top_k: 5,
      min_p: 0.1,
      seed: 7,
      stop: ['x'],
      presence_penalty: 1,
      frequency_penalty: -1,
      repetition_penalty: 1.1,
      ignore_eos: true,
      min_tokens: 2,
      stop_token_ids: [3],
      logit_bias: { '4': -3 },
      logprobs: true,
      top_logprobs: 2,
      response_format: { type: 'text' },
      user: 'u',
    }
    const req = toNodeRequest(parseChatParams(openAi), 'r1')
    const { model: _m, messages: _ms, max_completion_tokens: _mct, user: _u, ...sampling } = openAi
    expect(req).toEqual({ model: 'm', messages: chat.messages, request_id: 'r1', max_tokens: 9, ...sampling })
    expect(contract.Check(req)).toBe(true)
    // Each field is in the request, so a newly defined field without a value here fails this test.
    expect(Object.keys(req).filter((k) => (SAMPLING_FIELD_NAMES as string[]).includes(k)).sort()).toEqual([...SAMPLING_FIELD_NAMES].sort())
  })

  it('max_tokens wins over its alias max_completion_tokens', () => {
    expect(toNodeRequest(parseChatParams({ ...chat, max_tokens: 3, max_completion_tokens: 4 }), 'r').max_tokens).toBe(3)
  })
})

describe('exactly one of messages, prompt or input_ids', () => {
  it('names what is missing or what is given twice', () => {
    expect(() => checkOnePrompt({ prompt: 'x' })).not.toThrow()
    expect(() => checkOnePrompt({})).toThrow("Missing required field: one of 'messages', 'prompt' or 'input_ids'")
    expect(() => checkOnePrompt({ prompt: 'x', input_ids: [1] })).toThrow(
      "Exactly one of 'messages', 'prompt' or 'input_ids' is allowed. Given: prompt, input_ids",
    )
  })
})
