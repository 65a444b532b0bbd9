// Structured outputs' per-step cost (issue 14): the grammar mask of B sequences (xgrammar's next-token bitmask,
// then the mask applied to each row of logits) against one decode step of the engine at batch B on the same model,
// sampled at temperature 1 (off the graph's argmax, as constrained rows run). B = 1 and 16.
//
//   npx tsx bench/grammar.bench.ts [--preset 135m] [--steps 200]
import { parseArgs } from 'node:util'
import { ensureBundle } from '../src/bench/bundles.js'
import { applyMask, Engine, Grammars, type SeqEvent, type TokenMask } from '../src/engine/bench-surface.js'
import { median, printSystem, systemInfo, writeReport } from './lib/report.js'

/** The structured-output tests' nested schema: objects, arrays, enums, bounded numbers and integers, optional fields. */
export const SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    score: { type: 'number', minimum: 0, maximum: 10 },
    kind: { enum: ['cat', 'dog', 'bird'] },
    tags: { type: 'array', items: { type: 'string', maxLength: 6 }, maxItems: 3 },
    owner: { type: 'object', properties: { id: { type: 'integer', minimum: 1, maximum: 99999 }, verified: { type: 'boolean' } }, required: ['id', 'verified'], additionalProperties: false },
    nickname: { type: 'string', maxLength: 8 },
  },
  required: ['name', 'age', 'score', 'kind', 'tags', 'owner'],
  additionalProperties: false,
}

export interface MaskCost {
  batch: number
  /** Median ms per step: B masks computed and applied. */
  mask_ms: number
  /** Median ms of the engine's decode step at batch B (temperature 1). */
  step_ms: number
  ratio: number
  /** Mask steps timed, and decode steps of the engine at batch B timed: what each median is of. */
  mask_steps: number
  decode_steps: number
  /** What the walk wrote under the masks: the values it completed, and each row's value in progress at the end. */
  values: string[]
  walking: string[]
}

interface MaskWalk {
  ms: number
  steps: number
  values: string[]
  walking: string[]
}

/**
 * Times `steps` mask steps of `batch` sequences walking the schema (random allowed tokens; a finished one restarts),
 * and keeps the text the walk wrote (`decode`: token ids to text) to show the masks are the schema's.
 */
async function maskMs(grammars: Grammars, vocab: number, batch: number, steps: number, decode: (ids: number[]) => string): Promise<MaskWalk> {
  const masks: TokenMask[] = await Promise.all(Array.from({ length: batch }, () => grammars.matcher({ type: 'json_schema', schema: SCHEMA })))
  const rows = Array.from({ length: batch }, () => new Float32Array(vocab))
  const times: number[] = []
  const ids: number[][] = Array.from({ length: batch }, () => [])
  const values: string[] = []
  let seed = 1
  for (let s = 0; s < steps; s++) {
    for (const r of rows) r.fill(0)
    const t0 = performance.now()
    await Promise.all(masks.map((m) => m.next()))
    masks.forEach((m, i) => applyMask(rows[i]!, m.bits))
    times.push(performance.now() - t0)
    for (const [i, m] of masks.entries()) {
      // The last pick completed the value (the thread says so with the next mask): this row starts again.
      if (m.terminated) {
        values.push(decode(ids[i]!))
        ids[i] = []
        m.dispose()
        masks[i] = await grammars.matcher({ type: 'json_schema', schema: SCHEMA })
        continue
      }
      const allowed: number[] = []
      rows[i]!.forEach((x, id) => x === 0 && allowed.push(id))
      seed = (seed * 48271) % 2147483647
      const id = allowed[seed % allowed.length]!
      m.accept(id)
      ids[i]!.push(id)
    }
  }
  for (const m of masks) m.dispose()
  return { ms: median(times), steps: times.length, values, walking: ids.map((x) => (x.length > 0 ? decode(x) : '')) }
}

/** The engine's median decode step at batch `batch`: that many requests at temperature 1, together. */
async function stepMs(modelDir: string, batch: number, steps: number): Promise<{ ms: number; steps: number }> {
  const decode: number[] = []
  const engine = await Engine.load({ modelDir }, { onStep: (s) => s.phase === 'decode' && s.batch === batch && decode.push(s.seconds * 1000) })
  try {
    const tokens = Math.max(8, Math.ceil(steps / 4))
    await Promise.all(
      Array.from({ length: batch }, (_, i) => new Promise<void>((done) => {
        engine.submit({ model: engine.model.id, request_id: `b${i}`, input_ids: [5, 6, 7, 8 + i], max_tokens: tokens, temperature: 1, seed: i, ignore_eos: true }, (e: SeqEvent) => {
          if (e.type === 'done' || e.type === 'error') done()
        })
      })),
    )
  } finally {
    await engine.close()
  }
  return { ms: median(decode), steps: decode.length }
}

/** Both figures at each batch. */
export async function measureMaskCost(modelDir: string, batches: number[], steps: number): Promise<MaskCost[]> {
  const probe = await Engine.load({ modelDir })
  const tok = probe.model.tokenizer!
  const vocab = probe.model.vocab
  const grammars = new Grammars(() => tok.vocabulary(vocab), [...probe.model.eos])
  await probe.close()
  const out: MaskCost[] = []
  for (const batch of batches) {
    const mask = await maskMs(grammars, vocab, batch, steps, (ids) => tok.decode(ids))
    const step = await stepMs(modelDir, batch, steps)
    out.push({ batch, mask_ms: mask.ms, step_ms: step.ms, ratio: mask.ms / step.ms, mask_steps: mask.steps, decode_steps: step.steps, values: mask.values, walking: mask.walking })
  }
  await grammars.close()
  return out
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({ options: { preset: { type: 'string', default: '135m' }, steps: { type: 'string', default: '200' }, 'models-dir': { type: 'string', default: '.cache/models' } } })
  const dir = await ensureBundle(values['models-dir']!, values.preset!, 'plain', (s) => process.stdout.write(`${s}\n`))
  const sys = systemInfo()
  printSystem(sys)
  const rows = await measureMaskCost(dir, [1, 16], Number(values.steps))
  for (const r of rows)
    process.stdout.write(`batch ${r.batch}: grammar mask ${r.mask_ms.toFixed(3)} ms per step vs decode step ${r.step_ms.toFixed(2)} ms (${(100 * r.ratio).toFixed(1)}% of the step)\n`)
  writeReport('grammar', { system: sys, preset: values.preset, schema: SCHEMA, rows })
}
