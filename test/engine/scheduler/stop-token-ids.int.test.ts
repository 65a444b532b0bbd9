// stop_token_ids on the embedded default model (tiny preset): a listed id ends the sequence as EOS does, in the
// engine run in-thread and through the worker pool; ids outside the vocabulary are 422s.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Engine } from '../../../src/engine/engine.js'
import { createEnginePool } from '../../../src/engine/pool/pool.js'
import type { EngineClient, EngineRequest, SeqEvent } from '../../../src/engine/index.js'
import { tinyPlainModelDir } from '../../helpers/fixtures.js'
import { runRequest, type RunResult } from '../../helpers/engine-run.js'

const prompt = 'Once upon a time'
// ignore_eos: the greedy run cannot end early, and stop_token_ids must still apply under it.
const greedy = { prompt, max_tokens: 12, temperature: 0, ignore_eos: true }

describe('stop_token_ids on the tiny default model', () => {
  let engine: Engine
  let full: RunResult
  /** An id greedy decoding produces at step 5, and where it first appears. */
  let id: number
  let first: number
  beforeAll(async () => {
    engine = await Engine.load({ modelDir: tinyPlainModelDir() })
    full = await runRequest(engine, greedy)
    expect(full.ids).toHaveLength(12)
    id = full.ids[4]!
    first = full.ids.indexOf(id)
  })
  afterAll(() => engine.close())

  it('ends the output at the first listed id, with finish_reason stop and the id counted', async () => {
    const r = await runRequest(engine, { ...greedy, stop_token_ids: [id] })
    expect(r.end.type).toBe('done')
    if (r.end.type !== 'done') return
    expect(r.end.finishReason).toBe('stop')
    expect(r.ids).toEqual(full.ids.slice(0, first + 1))
    expect(r.end.usage.completion_tokens).toBe(first + 1)
    // As with EOS, the stop token's own text is not emitted.
    expect(full.text.startsWith(r.text)).toBe(true)
  })

  it('cannot be drawn before min_tokens', async () => {
    const min = first + 2
    const r = await runRequest(engine, { ...greedy, stop_token_ids: [id], min_tokens: min })
    expect(r.ids.length).toBeGreaterThanOrEqual(min)
    expect(r.ids.slice(0, min)).not.toContain(id)
  })

  it('refuses ids outside the vocabulary as invalid_value', async () => {
    const r = await runRequest(engine, { ...greedy, stop_token_ids: [id, engine.model.vocab] })
    expect(r.end.type === 'error' && r.end.error).toMatchObject({
      code: 'invalid_value',
      message: `\`stop_token_ids\` must be integers in [0, ${engine.model.vocab}). Given: ${engine.model.vocab} at index 1`,
    })
  })

  describe('through the worker pool', () => {
    let pool: EngineClient
    beforeAll(async () => {
      pool = createEnginePool({ modelDir: tinyPlainModelDir(), modelId: 'onnxd-tiny', workers: 1, intraOpThreads: 1 })
      await pool.ready()
    })
    afterAll(() => pool.close())

    it('stops at the same place', async () => {
      const events: SeqEvent[] = await new Promise((resolve) => {
        const seen: SeqEvent[] = []
        const req: EngineRequest = { model: 'onnxd-tiny', request_id: 'stop-ids', ...greedy, stop_token_ids: [id] }
        pool.submit(req, (e) => {
          seen.push(e)
          if (e.type === 'done' || e.type === 'error') resolve(seen)
        })
      })
      const end = events[events.length - 1]!
      expect(end.type === 'done' && end.finishReason).toBe('stop')
      const ids = events.flatMap((e) => (e.type === 'token' || e.type === 'done' ? e.ids : []))
      expect(ids).toEqual(full.ids.slice(0, first + 1))
    })
  })
})
