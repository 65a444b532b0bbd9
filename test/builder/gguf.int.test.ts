// The GGUF conversion checked against llama.cpp itself (node-llama-cpp's prebuilt binary; skipped where it cannot
// load): the tiny preset's F32 GGUF gives onnxd's greedy tokens for the same ids and the ONNX model's log-probabilities
// at every position to within float noise (a GGUF without the rotary permutation is off by about 20 times the bound);
// the F16, Q8_0 and Q4_0 files load, generate, and stay near the F32 distribution.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as ort from 'onnxruntime-node'
import type { Llama, LlamaModel, Token } from 'node-llama-cpp'
import { PRESETS, buildModel } from '../../src/builder/index.js'
import { GGUF_TYPES, writeGguf, type GgufType } from '../../src/builder/gguf.js'
import { loadLlama } from '../../src/bench/peer/llama-cpp.js'
import { Engine } from '../../src/engine/engine.js'
import { runRequest } from '../helpers/engine-run.js'

const p = PRESETS.tiny
const llama: Llama | undefined = await loadLlama(1).catch(() => undefined)
const PROMPTS = [[5, 100, 200, 300], [0, 17, 42], [1000, 1500, 7, 9, 11, 13, 250, 260]]
const STEPS = 16

describe.skipIf(!llama)('GGUF in llama.cpp (tiny preset)', () => {
  let root: string
  let dir: string
  const models = new Map<GgufType, LlamaModel>()
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'onnxd-gguf-int-'))
    // The plain form: its ONNX graph takes position_ids, as the log-probability check below feeds it.
    dir = (await buildModel({ preset: 'tiny', outDir: join(root, 'tiny'), attention: 'plain' })).dir
    for (const type of GGUF_TYPES) {
      const file = join(dir, `model-${type}.gguf`)
      await writeGguf(file, { preset: p, name: 'onnxd-tiny', seed: 0, type })
      models.set(type, await llama!.loadModel({ modelPath: file, gpuLayers: 0 }))
    }
  })
  afterAll(async () => {
    for (const m of models.values()) await m.dispose()
    await llama?.dispose()
    await rm(root, { recursive: true, force: true })
  })

  /** Greedy continuations of each prompt (ids in, no BOS added). */
  const llamaGreedy = async (type: GgufType): Promise<number[][]> => {
    const out: number[][] = []
    const ctx = await models.get(type)!.createContext({ contextSize: 64, threads: 1 })
    try {
      for (const prompt of PROMPTS) {
        const seq = ctx.getSequence()
        const got: number[] = []
        for await (const t of seq.evaluate(prompt as Token[], { temperature: 0, yieldEogToken: true })) if (got.push(t) >= STEPS) break
        await seq.dispose()
        out.push(got)
      }
    } finally {
      await ctx.dispose()
    }
    return out
  }

  /** Worst |log p_onnx - log p_llama| over the vocabulary at every position of the third prompt. */
  const logprobGap = async (type: GgufType): Promise<number> => {
    const ids = PROMPTS[2]
    const n = ids.length
    const V = p.vocabSize
    const s = await ort.InferenceSession.create(join(dir, 'onnx/model.onnx'))
    const i64 = (v: number[]): ort.Tensor => new ort.Tensor('int64', BigInt64Array.from(v, BigInt), [1, v.length])
    const feeds: Record<string, ort.Tensor> = { input_ids: i64(ids), attention_mask: i64(ids.map(() => 1)), position_ids: i64(ids.map((_, i) => i)) }
    for (let l = 0; l < p.layers; l++) for (const kv of ['key', 'value']) feeds[`past_key_values.${l}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [1, p.kvHeads, 0, p.headDim])
    const logits = (await s.run(feeds)).logits.data as Float32Array
    await s.release()
    const ctx = await models.get(type)!.createContext({ contextSize: 64, threads: 1 })
    try {
      const res = await ctx.getSequence().controlledEvaluate(ids.map((t) => [t as Token, { generateNext: { probabilities: true } }]))
      let worst = 0
      for (let t = 0; t < n; t++) {
        const row = logits.subarray(t * V, (t + 1) * V)
        let m = -Infinity
        for (const x of row) m = Math.max(m, x)
        let z = 0
        for (const x of row) z += Math.exp(x - m)
        const probs = res[t]!.next!.probabilities!
        for (let v = 0; v < V; v++) worst = Math.max(worst, Math.abs(row[v] - m - Math.log(z) - Math.log(probs.get(v as Token) ?? 0)))
      }
      return worst
    } finally {
      await ctx.dispose()
    }
  }

  it('carries llama.cpp metadata and tensor names (no output.weight when tied)', () => {
    const info = models.get('f32')!.fileInfo
    const md = info.metadata as unknown as { general: Record<string, unknown>; llama: Record<string, unknown>; tokenizer: { ggml: Record<string, unknown> } }
    expect(md.general.architecture).toBe('llama')
    expect(md.llama.block_count).toBe(p.layers)
    expect(md.llama.context_length).toBe(p.maxPositions)
    expect((md.llama.attention as Record<string, unknown>).head_count_kv).toBe(p.kvHeads)
    expect(md.tokenizer.ggml.model).toBe('gpt2')
    expect(md.tokenizer.ggml.add_bos_token).toBe(false)
    const names = info.tensorInfo!.map((t) => t.name)
    expect(names).toContain('blk.3.ffn_down.weight')
    expect(names).toContain('output_norm.weight')
    expect(names).not.toContain('output.weight')
  })

  it('F32: the ONNX model\'s log-probabilities at every position, to within float noise', async () => {
    expect(await logprobGap('f32')).toBeLessThan(1e-3)
  })

  it('F32: onnxd\'s greedy tokens for every prompt, none differing', async () => {
    const engine = await Engine.load({ modelDir: dir, intraOpThreads: 1 })
    const want: number[][] = []
    try {
      for (const input_ids of PROMPTS) {
        const r = await runRequest(engine, { input_ids, max_tokens: STEPS, temperature: 0, ignore_eos: true })
        expect(r.end.type).toBe('done')
        want.push(r.ids)
      }
    } finally {
      await engine.close()
    }
    expect(await llamaGreedy('f32')).toEqual(want)
  })

  it('F16, Q8_0 and Q4_0 load, generate, and stay near the F32 distribution', async () => {
    for (const type of ['f16', 'q8_0', 'q4_0'] as const) {
      for (const ids of await llamaGreedy(type)) expect(ids, type).toHaveLength(STEPS)
    }
    // Measured on this preset: f16 5e-4, q8_0 about 0.01, q4_0 about 0.14 (nats, worst over the vocabulary and positions).
    expect(await logprobGap('f16')).toBeLessThan(0.01)
    expect(await logprobGap('q8_0')).toBeLessThan(0.05)
    expect(await logprobGap('q4_0')).toBeLessThan(0.5)
  })
})
