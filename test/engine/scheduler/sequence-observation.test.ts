// What a sequence reports when it ends (the node's onnxd_request_success_total{finished_reason}, its latency
// histograms): a sequence that fails in its last step is counted as an error, never as a stop.
import { describe, expect, it } from 'vitest'
import { Sequence } from '../../../src/engine/scheduler/sequence.js'
import { validateSampling } from '../../../src/engine/generation/params.js'
import type { TokenMask } from '../../../src/engine/generation/grammar.js'
import type { LoadedModel } from '../../../src/engine/model/load.js'
import type { SeqEvent } from '../../../src/engine/types.js'

const VOCAB = 16
const model = { eos: [2], vocab: VOCAB, contextLength: 64, tokenizer: null } as unknown as LoadedModel

function sequence(maxTokens: number): { seq: Sequence; events: SeqEvent[] } {
  const events: SeqEvent[] = []
  const params = validateSampling({ max_tokens: maxTokens, temperature: 0 }, { maxContext: 64, promptTokens: 2, vocab: VOCAB })
  return { seq: new Sequence('s', [1, 3], params, model, (e) => events.push(e)), events }
}

describe('Sequence.observation', () => {
  it('a token its grammar refuses ends the sequence with an error, observed as one', () => {
    const { seq, events } = sequence(8)
    seq.constrain({ accept: () => false, dispose: () => {}, bits: new Int32Array(1) } as unknown as TokenMask)
    seq.admitted()
    expect(seq.stepToken(5)).toBe(true)
    expect(seq.finished).toBe(false)
    expect(events.at(-1)?.type).toBe('error')
    expect(seq.observation('done').finishReason).toBe('error')
  })

  it('a sequence that reaches max_tokens is observed as length, one that meets an end token as stop', () => {
    const long = sequence(2)
    long.seq.admitted()
    expect(long.seq.stepToken(5)).toBe(false)
    expect(long.seq.stepToken(6)).toBe(true)
    expect(long.seq.observation('done').finishReason).toBe('length')
    const eos = sequence(8)
    eos.seq.admitted()
    expect(eos.seq.stepToken(2)).toBe(true)
    expect(eos.seq.observation('done').finishReason).toBe('stop')
  })
})
