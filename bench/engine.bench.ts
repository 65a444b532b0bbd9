// Single-stream engine benchmark (issue 2): prefill and decode tokens/s of onnxd's engine next to a plain ORT
// greedy loop (session.run in a for-loop, argmax, nothing else) on the same bundle, in the same run.
//
//   npx tsx bench/engine.bench.ts [--presets small,135m] [--prompt 128] [--decode 128] [--reps 3]
import { parseArgs } from 'node:util'
import { join, resolve } from 'node:path'
import * as ort from 'onnxruntime-node'
import { buildModel } from '../src/builder/index.js'
import { Engine, type EngineRequest, type SeqEvent } from '../src/engine/bench-surface.js'
import { existsSync } from 'node:fs'
import { median, printSystem, rsd, systemInfo, writeReport } from './lib/report.js'

const { values } = parseArgs({
  options: {
    presets: { type: 'string', default: 'small,135m' },
    prompt: { type: 'string', default: '128' },
    decode: { type: 'string', default: '128' },
    reps: { type: 'string', default: '3' },
    threads: { type: 'string', default: '0' },
    'models-dir': { type: 'string', default: '.cache/models' },
  },
})
const PROMPT = Number(values.prompt)
const DECODE = Number(values.decode)
const REPS = Number(values.reps)
const THREADS = Number(values.threads)

async function ensurePreset(preset: string): Promise<string> {
  const dir = resolve(values['models-dir']!, `onnxd-${preset}`)
  if (!existsSync(join(dir, 'config.json'))) {
    process.stdout.write(`building ${preset} into ${dir} ...\n`)
    await buildModel({ preset, outDir: dir, attention: 'plain' })
  }
  return dir
}

const promptIds = (vocab: number): number[] => Array.from({ length: PROMPT }, (_, i) => 3 + ((i * 7919) % (vocab - 3)))

/** The reference: ORT alone. Prefill the prompt, then argmax and feed back one token at a time. */
async function plainLoop(dir: string): Promise<{ prefillS: number; decodeS: number }> {
  const s = await ort.InferenceSession.create(join(dir, 'onnx', 'model.onnx'), { intraOpNumThreads: THREADS, graphOptimizationLevel: 'all' })
  const meta = s.inputMetadata.find((m) => m.name === 'past_key_values.0.key') as ort.InferenceSession.TensorValueMetadata
  const [heads, headDim] = [meta.shape[1] as number, meta.shape[3] as number]
  const layers = s.inputNames.filter((n) => n.startsWith('past_key_values.')).length / 2
  const vocab = (s.outputMetadata[0] as ort.InferenceSession.TensorValueMetadata).shape[2] as number
  const ids = promptIds(vocab)
  const feeds: Record<string, ort.Tensor> = {}
  const i64 = (xs: number[]): BigInt64Array => BigInt64Array.from(xs, BigInt)
  let past: ort.Tensor[] = []
  for (let l = 0; l < layers * 2; l++) past.push(new ort.Tensor('float32', new Float32Array(0), [1, heads, 0, headDim]))
  const run = async (tok: number[], pos0: number): Promise<number> => {
    feeds.input_ids = new ort.Tensor('int64', i64(tok), [1, tok.length])
    feeds.attention_mask = new ort.Tensor('int64', new BigInt64Array(pos0 + tok.length).fill(1n), [1, pos0 + tok.length])
    feeds.position_ids = new ort.Tensor('int64', i64(tok.map((_, i) => pos0 + i)), [1, tok.length])
    for (let l = 0; l < layers; l++) {
      feeds[`past_key_values.${l}.key`] = past[2 * l]
      feeds[`past_key_values.${l}.value`] = past[2 * l + 1]
    }
    const out = await s.run(feeds)
    past = []
    for (let l = 0; l < layers; l++) past.push(out[`present.${l}.key`], out[`present.${l}.value`])
    const logits = out.logits.data as Float32Array
    const base = (tok.length - 1) * vocab
    let best = 0
    for (let v = 1; v < vocab; v++) if (logits[base + v] > logits[base + best]) best = v
    return best
  }
  const t0 = performance.now()
  let next = await run(ids, 0)
  const t1 = performance.now()
  for (let i = 1; i < DECODE; i++) next = await run([next], PROMPT + i - 1)
  const t2 = performance.now()
  await s.release()
  return { prefillS: (t1 - t0) / 1000, decodeS: (t2 - t1) / 1000 }
}

/** onnxd's engine: one request with the same prompt, greedy, ignore_eos, timed from its own events. */
async function onnxdEngine(engine: Engine): Promise<{ prefillS: number; decodeS: number }> {
  const ids = promptIds(engine.model.vocab)
  return new Promise((resolve, reject) => {
    const t0 = performance.now()
    let first = 0
    const req: EngineRequest = { model: engine.model.id, request_id: 'bench', input_ids: ids, max_tokens: DECODE, temperature: 0, ignore_eos: true }
    engine.submit(req, (e: SeqEvent) => {
      if (e.type === 'token' && !first) first = performance.now()
      if (e.type === 'error') reject(new Error(e.error.message))
      if (e.type === 'done') {
        const t2 = performance.now()
        resolve({ prefillS: (first - t0) / 1000, decodeS: (t2 - first) / 1000 })
      }
    })
  })
}

const sys = systemInfo()
printSystem(sys)
process.stdout.write(`single stream: prompt ${PROMPT} tokens, ${DECODE} generated, median of ${REPS} runs (after one warm-up)\n\n`)
const rows: Record<string, unknown>[] = []
const results: unknown[] = []
for (const preset of values.presets!.split(',')) {
  const dir = await ensurePreset(preset)
  const engine = await Engine.load({ modelDir: dir, intraOpThreads: THREADS, maxRunning: 1 })
  await plainLoop(dir)
  await onnxdEngine(engine)
  const plain: { prefillS: number; decodeS: number }[] = []
  const ours: { prefillS: number; decodeS: number }[] = []
  for (let r = 0; r < REPS; r++) {
    plain.push(await plainLoop(dir))
    ours.push(await onnxdEngine(engine))
  }
  await engine.close()
  const tps = (xs: { prefillS: number; decodeS: number }[], k: 'prefillS' | 'decodeS', n: number): number[] => xs.map((x) => n / x[k])
  const plainPrefill = tps(plain, 'prefillS', PROMPT)
  const plainDecode = tps(plain, 'decodeS', DECODE - 1)
  const oursPrefill = tps(ours, 'prefillS', PROMPT)
  const oursDecode = tps(ours, 'decodeS', DECODE - 1)
  const r = {
    preset,
    plainPrefillTps: median(plainPrefill),
    onnxdPrefillTps: median(oursPrefill),
    plainDecodeTps: median(plainDecode),
    onnxdDecodeTps: median(oursDecode),
    decodeRatio: median(oursDecode) / median(plainDecode),
    rsdPercent: { plainDecode: rsd(plainDecode), onnxdDecode: rsd(oursDecode) },
  }
  results.push(r)
  rows.push({
    preset,
    'plain prefill tok/s': r.plainPrefillTps.toFixed(0),
    'onnxd prefill tok/s': r.onnxdPrefillTps.toFixed(0),
    'plain decode tok/s': r.plainDecodeTps.toFixed(1),
    'onnxd decode tok/s': r.onnxdDecodeTps.toFixed(1),
    'onnxd/plain decode': `${(r.decodeRatio * 100).toFixed(1)}%`,
    '±% (onnxd)': r.rsdPercent.onnxdDecode.toFixed(1),
  })
}
console.table(rows)
const path = writeReport('engine', { bench: 'engine-single-stream', params: { prompt: PROMPT, decode: DECODE, reps: REPS, threads: THREADS }, system: sys, results })
process.stdout.write(`target: onnxd decode >= 90% of the plain loop. JSON: ${path}\n`)
