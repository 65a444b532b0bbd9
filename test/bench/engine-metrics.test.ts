import { describe, expect, it } from 'vitest'
import { engineTime, parseStepTotals } from '../../src/bench/engine-metrics.js'

const scrape = (decode: [number, number, number], prefill: [number, number, number]): string =>
  [
    '# HELP onnxd_batch_step_seconds Histogram of one engine step.',
    '# TYPE onnxd_batch_step_seconds histogram',
    `onnxd_batch_step_seconds_bucket{le="0.1",model_name="m",phase="decode"} 3`,
    `onnxd_batch_step_seconds_sum{model_name="m",phase="decode"} ${decode[0]}`,
    `onnxd_batch_step_seconds_count{model_name="m",phase="decode"} ${decode[1]}`,
    `onnxd_batch_size_sum{model_name="m",phase="decode"} ${decode[2]}`,
    `onnxd_batch_size_count{model_name="m",phase="decode"} ${decode[1]}`,
    `onnxd_batch_step_seconds_sum{model_name="m",phase="prefill"} ${prefill[0]}`,
    `onnxd_batch_step_seconds_count{model_name="m",phase="prefill"} ${prefill[1]}`,
    `onnxd_iteration_tokens_sum{model_name="m",phase="prefill"} ${prefill[2]}`,
    'onnxd_prompt_tokens_total{model_name="m"} 999',
    `onnxd_graph_replays_total{model_name="m"} ${decode[1] - 2}`,
  ].join('\n')

describe('engine time from /metrics', () => {
  it('reads the step histograms per phase', () => {
    expect(parseStepTotals(scrape([1.5, 10, 40], [0.5, 2, 256]))).toEqual({
      decode: { seconds: 1.5, steps: 10, rows: 40, tokens: 0, replays: 8 },
      prefill: { seconds: 0.5, steps: 2, rows: 0, tokens: 256, replays: 0 },
    })
  })

  it('diffs two scrapes into where a level spent its wall time', () => {
    const e = engineTime(parseStepTotals(scrape([1, 10, 10], [0, 0, 0])), parseStepTotals(scrape([3, 30, 90], [1, 4, 512])), 5)
    expect(e).toMatchObject({ decode_steps: 20, decode_seconds: 2, mean_decode_batch: 4, prefill_steps: 4, prefill_seconds: 1, prefill_tokens: 512, other_seconds: 2, graph_replays: 20 })
    expect(e.mean_decode_step_ms).toBeCloseTo(100, 10)
    expect(e.forward_fraction).toBeCloseTo(0.6, 10)
  })
})
