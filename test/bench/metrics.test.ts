import { describe, expect, it } from 'vitest'
import type { RequestRecord } from '../../src/bench/client.js'
import { levelFigures } from '../../src/bench/metrics.js'
import { records } from './fixtures.js'

const rec = (o: Partial<RequestRecord>): RequestRecord => ({ ok: true, status: '200', cut: false, startMs: 0, ttftMs: 10, itlMs: [], e2eMs: 10, promptTokens: 4, cachedTokens: 0, outputTokens: 1, ...o })

describe('levelFigures', () => {
  it("computes vLLM's figures: throughputs, TTFT, TPOT = (e2e - ttft) / (out - 1), ITL", () => {
    const f = levelFigures(records(4, { ttft: 100, tpot: 20, out: 11, prompt: 30 }), 2, 4, Infinity)
    expect(f).toMatchObject({ completed: 4, failed: 0, cut: 0, max_concurrency: 4, request_rate: null, total_input_tokens: 120, total_output_tokens: 44 })
    expect(f.request_throughput).toBe(2)
    expect(f.cached_input_tokens).toBe(0)
    // Prompt tokens a server's prefix cache gave, as its usage said, of the completed requests only.
    expect(levelFigures([rec({ cachedTokens: 16 }), rec({ cachedTokens: 32 }), rec({ ok: false, status: '500', cachedTokens: 48 })], 1, 3, Infinity).cached_input_tokens).toBe(48)
    expect(f.output_throughput).toBe(22)
    expect(f.total_token_throughput).toBe(82)
    expect(f.mean_ttft_ms).toBe(100)
    expect(f.median_tpot_ms).toBeCloseTo(20, 10)
    expect(f.p99_itl_ms).toBe(20)
    expect(f.mean_e2el_ms).toBe(300)
  })

  it('counts failures by status and keeps them out of the latencies', () => {
    const f = levelFigures([rec({}), rec({ ok: false, status: '503', ttftMs: NaN }), rec({ ok: false, status: '503' }), rec({ ok: false, status: 'stream:500' })], 1, 1, 2)
    expect(f.failed).toBe(3)
    expect(f.errors_by_status).toEqual({ '503': 2, 'stream:500': 1 })
    expect(f.request_rate).toBe(2)
    expect(f.completed).toBe(1)
  })

  it('leaves one-token requests out of TPOT', () => {
    const f = levelFigures([rec({ outputTokens: 1, e2eMs: 50 })], 1, 1, Infinity)
    expect(f.mean_tpot_ms).toBe(0)
    expect(f.mean_ttft_ms).toBe(10)
  })

  it('counts tokens that cut requests streamed, and their missing first token as a TTFT lower bound', () => {
    const cut = [rec({ ok: false, cut: true, status: 'cut', startMs: 500, ttftMs: NaN, outputTokens: 0 }), rec({ ok: false, cut: true, status: 'cut', startMs: 0, ttftMs: 30, itlMs: [5, 5], outputTokens: 3 })]
    const f = levelFigures([rec({ outputTokens: 5, e2eMs: 50, ttftMs: 10 }), ...cut], 2, 4, Infinity)
    expect(f).toMatchObject({ completed: 1, failed: 0, cut: 2, ttft_censored: 1, cut_output_tokens: 3, total_output_tokens: 5 })
    expect(f.output_throughput).toBe(4)
    // TTFTs: 10 (done), 30 (cut after its first token), 2000 - 500 (censored at the deadline).
    expect(f.p99_ttft_ms).toBeGreaterThan(1400)
    expect(f.median_ttft_ms).toBe(30)
    expect(f.errors_by_status).toEqual({})
    // TPOT: the done request's (50 - 10) / 4 and the cut one's streamed part, (5 + 5) / 2.
    expect(f.mean_tpot_ms).toBe(7.5)
  })

  it('a level the cap cut whole still has a TPOT, from what its requests streamed', () => {
    const f = levelFigures([rec({ ok: false, cut: true, status: 'cut', ttftMs: 100, itlMs: [20, 40, 30], outputTokens: 4 })], 1, 1, Infinity)
    expect(f.completed).toBe(0)
    expect(f.mean_tpot_ms).toBe(30)
  })
})
