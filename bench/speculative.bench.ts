// Speculative decoding by n-gram lookup (--speculative-tokens) against plain decoding: the same greedy requests
// through two in-thread engines on one model, one drafting and one not, alternating engines and rounds in one
// process. Prints output tok/s of each, their ratio, the drafts' hit rate and tokens per decode step, and checks that
// both engines gave the same tokens. Two workloads: `repeat` asks the model to go on from a prompt that repeats a
// passage (a model that copies gains, as code edits and extraction do), `random` prompts of random ids (where drafts
// are rare: the cost of looking). docs/runtimes-and-gpus.md, "Speculative decoding", has its figures.
//
//   npx tsx bench/speculative.bench.ts [--model DIR] [--dtype q4] [--k 4] [--streams 1,16] [--requests 16]
//     [--prompt-len 128] [--max-tokens 128] [--rounds 2] [--threads 0]
import { loadavg } from 'node:os'
import { parseArgs } from 'node:util'
import { Engine, type StepObservation } from '../src/engine/bench-surface.js'
import type { Dtype } from '../src/shared/model.js'
import { median, writeReport } from './lib/report.js'

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: '.cache/models/onnxd-135m-gqa' },
    dtype: { type: 'string' },
    k: { type: 'string', default: '4' },
    streams: { type: 'string', default: '1,16' },
    requests: { type: 'string', default: '16' },
    'prompt-len': { type: 'string', default: '128' },
    'max-tokens': { type: 'string', default: '128' },
    rounds: { type: 'string', default: '2' },
    threads: { type: 'string', default: '0' },
  },
})
const [k, requests, promptLen, maxTokens, rounds, threads] = [values.k, values.requests, values['prompt-len'], values['max-tokens'], values.rounds, values.threads].map(Number)
const streams = values.streams.split(',').map(Number)

interface Counts {
  steps: number
  drafted: number
  accepted: number
}
const counts = (): Counts => ({ steps: 0, drafted: 0, accepted: 0 })
const observe = (c: Counts) => ({
  onStep: (s: StepObservation) => {
    if (s.phase !== 'decode') return
    c.steps++
    c.drafted += s.drafted ?? 0
    c.accepted += s.accepted ?? 0
  },
})

const opts = { modelDir: values.model, ...(values.dtype ? { dtype: values.dtype as Dtype } : {}), intraOpThreads: threads, prefixCaching: false }
const offCounts = counts()
const onCounts = counts()
const engines = {
  off: await Engine.load(opts, observe(offCounts)),
  on: await Engine.load({ ...opts, speculativeTokens: k }, observe(onCounts)),
}
const V = engines.off.model.vocab

/** Prompt i of a workload: `repeat` is a passage of promptLen / 2 ids twice over (the model goes on from the second copy's middle). */
function prompt(workload: string, i: number): number[] {
  const rand = (j: number): number => 3 + ((i * 7919 + j * 104_729) % (V - 3))
  if (workload === 'random') return Array.from({ length: promptLen }, (_, j) => rand(j))
  const half = Math.floor(promptLen / 2)
  const passage = Array.from({ length: half }, (_, j) => rand(j))
  return [...passage, ...passage.slice(0, promptLen - half)]
}

/** Runs `n` requests `c` at a time on `e`; returns the seconds and each request's tokens. */
async function run(e: Engine, workload: string, c: number, n: number): Promise<{ seconds: number; ids: number[][] }> {
  const ids: number[][] = new Array(n)
  let next = 0
  const t0 = performance.now()
  const one = async (): Promise<void> => {
    while (next < n) {
      const i = next++
      ids[i] = await new Promise<number[]>((resolve, reject) => {
        const got: number[] = []
        e.submit({ model: e.model.id, request_id: `b${i}`, input_ids: prompt(workload, i), max_tokens: maxTokens, temperature: 0, ignore_eos: true } as never, (ev) => {
          if (ev.type === 'token' || ev.type === 'done') got.push(...ev.ids)
          if (ev.type === 'done') resolve(got)
          if (ev.type === 'error') reject(new Error(ev.error.message))
        })
      })
    }
  }
  await Promise.all(Array.from({ length: c }, one))
  return { seconds: (performance.now() - t0) / 1000, ids }
}

const rows: object[] = []
console.log(`${values.model}${values.dtype ? ` (${values.dtype})` : ''}: k ${k}, prompt ${promptLen}, output ${maxTokens}, ${requests} requests per cell, load ${loadavg()[0].toFixed(2)}`)
console.log('workload  streams  off tok/s  on tok/s  on/off  accepted/drafted  decode steps off/on  same tokens')
for (const workload of ['repeat', 'random']) {
  for (const c of streams) {
    const n = Math.max(c, requests)
    await run(engines.off, workload, c, Math.min(n, c))
    await run(engines.on, workload, c, Math.min(n, c))
    const t: Record<'off' | 'on', number[]> = { off: [], on: [] }
    let same = true
    let on0 = counts()
    let off0 = counts()
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 ? (['on', 'off'] as const) : (['off', 'on'] as const)
      const got: Record<string, number[][]> = {}
      for (const which of order) {
        if (r === 0 && which === 'on') on0 = { ...onCounts }
        if (r === 0 && which === 'off') off0 = { ...offCounts }
        const { seconds, ids } = await run(engines[which], workload, c, n)
        t[which].push((n * maxTokens) / seconds)
        got[which] = ids
      }
      same &&= JSON.stringify(got.on) === JSON.stringify(got.off)
    }
    const d = { steps: onCounts.steps - on0.steps, drafted: onCounts.drafted - on0.drafted, accepted: onCounts.accepted - on0.accepted }
    const offSteps = offCounts.steps - off0.steps
    const off = median(t.off)
    const on = median(t.on)
    const row = { workload, streams: c, off_tok_s: off, on_tok_s: on, ratio: on / off, drafted: d.drafted, accepted: d.accepted, steps_on: d.steps, steps_off: offSteps, same_tokens: same }
    rows.push(row)
    console.log(
      `${workload.padEnd(8)}  ${String(c).padStart(7)}  ${off.toFixed(1).padStart(9)}  ${on.toFixed(1).padStart(8)}  ${(on / off).toFixed(2).padStart(6)}  ${`${d.accepted}/${d.drafted}`.padStart(16)}  ${`${offSteps}/${d.steps}`.padStart(19)}  ${same ? 'yes' : 'NO'}`,
    )
  }
}
await engines.off.close()
await engines.on.close()
console.log(`report: ${writeReport('speculative', { model: values.model, dtype: values.dtype ?? null, k, prompt: promptLen, output: maxTokens, requests, rounds, load_end: loadavg()[0], rows })}`)
