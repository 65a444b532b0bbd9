// What the prefix cache costs a prompt that no later prompt reuses: groups of prompts prefilled as the batcher
// prefills them (rows of a KvCache shaped like a model's cache), every whole block of each prompt copied into a
// PrefixCache as the batcher does after a prefill, on a new cache (a node that has just started, as the serving
// benchmark's nodes are). Prints wall and CPU ms for the inserts, and the garbage collections they caused.
// docs/benchmarks.md, "Between the steps at 64 streams", has its figures.
//
//   npx tsx bench/prefix-cache.bench.ts [--prompts 128] [--prompt-len 128] [--group 4] [--layers 30] [--kv-heads 3]
//     [--head-dim 64] [--rounds 3]      (the defaults: 135m's cache, the standard workload's prompts)
import { PerformanceObserver } from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import { KvCache, PrefixCache, type KvTensor } from '../src/engine/bench-surface.js'

const { values } = parseArgs({
  options: {
    prompts: { type: 'string', default: '128' },
    'prompt-len': { type: 'string', default: '128' },
    group: { type: 'string', default: '4' },
    layers: { type: 'string', default: '30' },
    'kv-heads': { type: 'string', default: '3' },
    'head-dim': { type: 'string', default: '64' },
    rounds: { type: 'string', default: '3' },
  },
})
const [prompts, len, group, layers, heads, headDim, rounds] = [values.prompts, values['prompt-len'], values.group, values.layers, values['kv-heads'], values['head-dim'], values.rounds].map(Number)
if ([prompts, len, group, layers, heads, headDim, rounds].some((n) => !Number.isInteger(n) || n < 1)) {
  process.stderr.write('usage: npx tsx bench/prefix-cache.bench.ts [--prompts 128] [--prompt-len 128] [--group 4] [--layers 30] [--kv-heads 3] [--head-dim 64] [--rounds 3]\n')
  process.exit(2)
}

let gcs = 0
let gcMs = 0
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    gcs++
    gcMs += e.duration
  }
}).observe({ entryTypes: ['gc'] })

// A prefill group's cache ([rows, heads, slots, headDim] per past tensor), filled once: what its rows hold does not
// change the copies.
const shape = { tensors: 2 * layers, outer: 1, heads, headDim, dtype: 'float32' as const, present: 'appended' as const }
const present: KvTensor[] = Array.from({ length: shape.tensors }, () => ({ data: new Float32Array(group * heads * len * headDim).fill(0.5), dims: [group, heads, len, headDim] }))
const rows = new KvCache(shape)
rows.addRows(group)
rows.append(present, Array.from({ length: group }, () => len))

let next = 0
for (let round = 0; round < rounds; round++) {
  const cache = new PrefixCache()
  const [gcs0, gcMs0] = [gcs, gcMs]
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  for (let p = 0; p < prompts; p++) {
    // Prompts no other prompt shares a block with, as the serving benchmark's random prompts.
    const ids = Array.from({ length: len }, (_, i) => 3 + ((i * 7919 + ++next * 104729) % 49000))
    const r = p % group
    cache.insert(ids, (from, n, into) => rows.readSlots(r, from, n, into))
  }
  const ms = performance.now() - t0
  const cpu = process.cpuUsage(cpu0)
  // The collections that the inserts started end in the next turns.
  await new Promise((res) => setTimeout(res, 200))
  process.stdout.write(
    `round ${round}: ${prompts} prompts of ${len}, ${cache.size} blocks, ${(cache.bytes / 2 ** 20).toFixed(0)} MB: ${ms.toFixed(0)} ms wall, ` +
      `${((cpu.user + cpu.system) / 1000).toFixed(0)} ms CPU (every thread), ${gcs - gcs0} collections, ${(gcMs - gcMs0).toFixed(0)} ms in them\n`,
  )
}
process.exit(0)
