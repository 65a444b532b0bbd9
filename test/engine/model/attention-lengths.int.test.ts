// feedAttentionLengths (decoder-graph.ts): GroupQueryAttention's seqlens_k and total_sequence_length become graph
// inputs, the mask subgraph goes, and the attention_mask input goes when nothing else reads it. The rewritten graph
// must give the exported graph's logits and presents, with right-padded rows of different lengths, on the builder's
// GQA form and on a real onnxruntime-genai export; a graph where the mask still feeds something keeps it; graphs
// without GroupQueryAttention are left alone.
import { readFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import * as ort from 'onnxruntime-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildModel } from '../../../src/builder/index.js'
import { SEQLENS_K_INPUT, TOTAL_LENGTH_INPUT, externalDataConfig, feedAttentionLengths } from '../../../src/engine/model/decoder-graph.js'
import { ModelProto, type Node } from '../../../src/engine/model/onnx-proto.js'
import { tinyPlainModelDir, fixture, haveFixtures } from '../../helpers/fixtures.js'

interface Decoded {
  graph: { node: Node[]; input: Array<{ name: string }>; output: Array<{ name: string }>; initializer: Array<{ name: string }> }
}
const decode = (b: Uint8Array): Decoded => ModelProto.toObject(ModelProto.decode(b), { defaults: true }) as Decoded

const maxAbsDiff = (a: ArrayLike<number>, b: ArrayLike<number>): number => {
  expect(a.length).toBe(b.length)
  let m = 0
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]))
  return m
}

interface Shape {
  layers: number
  kvHeads: number
  headDim: number
}

/**
 * One prefill of right-padded rows (`lens` real tokens each, width max(lens)), then one decode step over its presents,
 * through the exported graph (mask) and the rewritten one (lengths fed); every logit and present compared.
 */
async function compare(exported: string | Uint8Array, rewritten: Uint8Array, extDir: string, s: Shape, lens: number[], vocab: number): Promise<number> {
  const opts = { intraOpNumThreads: 1, logSeverityLevel: 3 as const }
  const a = typeof exported === 'string' ? await ort.InferenceSession.create(exported, opts) : await ort.InferenceSession.create(exported, { ...opts, extra: externalDataConfig(join(extDir, 'x.onnx')) })
  const b = await ort.InferenceSession.create(rewritten, { ...opts, extra: externalDataConfig(join(extDir, 'x.onnx')) })
  try {
    const rows = lens.length
    const width = Math.max(...lens)
    const kvNames = Array.from({ length: s.layers }, (_, i) => [`${i}.key`, `${i}.value`]).flat()
    const empty = (): Record<string, ort.Tensor> => Object.fromEntries(kvNames.map((n) => [`past_key_values.${n}`, new ort.Tensor('float32', new Float32Array(0), [rows, s.kvHeads, 0, s.headDim])]))
    let worst = 0
    let pastA = empty()
    let pastB = empty()
    let cur = lens.slice()
    for (const seq of [width, 1]) {
      const total = seq === width ? width : width + 1
      const ids = BigInt64Array.from({ length: rows * seq }, (_, k) => BigInt((k * 37 + 11) % vocab))
      const mask = new BigInt64Array(rows * total)
      const after = cur.map((l) => (seq === width ? l : l + 1))
      after.forEach((l, r) => mask.fill(1n, r * total, r * total + l))
      const ra = await a.run({ input_ids: new ort.Tensor('int64', ids, [rows, seq]), attention_mask: new ort.Tensor('int64', mask, [rows, total]), ...pastA })
      const fed: Record<string, ort.Tensor> = {
        input_ids: new ort.Tensor('int64', ids, [rows, seq]),
        [SEQLENS_K_INPUT]: new ort.Tensor('int32', Int32Array.from(after, (l) => l - 1), [rows]),
        [TOTAL_LENGTH_INPUT]: new ort.Tensor('int32', Int32Array.of(total), []),
        ...pastB,
      }
      if (b.inputNames.includes('attention_mask')) fed.attention_mask = new ort.Tensor('int64', mask, [rows, total])
      const rb = await b.run(fed)
      worst = Math.max(worst, maxAbsDiff(ra.logits.data as Float32Array, rb.logits.data as Float32Array))
      for (const n of kvNames) worst = Math.max(worst, maxAbsDiff(ra[`present.${n}`].data as Float32Array, rb[`present.${n}`].data as Float32Array))
      pastA = Object.fromEntries(kvNames.map((n) => [`past_key_values.${n}`, ra[`present.${n}`]]))
      pastB = Object.fromEntries(kvNames.map((n) => [`past_key_values.${n}`, rb[`present.${n}`]]))
      cur = after
    }
    return worst
  } finally {
    await a.release()
    await b.release()
  }
}

let root: string
let gqaPath: string
let tiny: Shape & { vocab: number }
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'onnxd-lengths-'))
  gqaPath = join((await buildModel({ preset: 'tiny', outDir: join(root, 'gqa'), seed: 0, attention: 'gqa' })).dir, 'model.onnx')
  const c = JSON.parse(readFileSync(join(tinyPlainModelDir(), 'config.json'), 'utf8')) as Record<string, number>
  tiny = { layers: c.num_hidden_layers, kvHeads: c.num_key_value_heads, headDim: c.head_dim ?? c.hidden_size / c.num_attention_heads, vocab: c.vocab_size }
})
afterAll(async () => {
  await rm(root, { recursive: true, force: true })
})

describe('feedAttentionLengths on the builder GroupQueryAttention form', () => {
  it('feeds every layer one shared pair of length inputs and drops the mask, its subgraph and the constants only it read', () => {
    const bytes = readFileSync(gqaPath)
    const r = feedAttentionLengths(bytes)
    expect(r).not.toBeNull()
    expect(r!.maskKept).toBe(false)
    const before = decode(bytes).graph
    const g = decode(r!.model).graph
    const gqa = g.node.filter((n) => n.op_type === 'GroupQueryAttention')
    expect(gqa).toHaveLength(tiny.layers)
    for (const n of gqa) expect(n.input.slice(5, 7)).toEqual([SEQLENS_K_INPUT, TOTAL_LENGTH_INPUT])
    const inputs = g.input.map((i) => i.name)
    expect(inputs).not.toContain('attention_mask')
    expect(inputs).toContain(SEQLENS_K_INPUT)
    expect(inputs).toContain(TOTAL_LENGTH_INPUT)
    // Nothing of the mask subgraph is left: no node reads a name no one produces.
    const made = new Set([...g.input.map((i) => i.name), ...g.initializer.map((t) => t.name), ...g.node.flatMap((n) => n.output), ''])
    for (const n of g.node) for (const i of n.input) expect(made.has(i), `${n.name} reads ${i}`).toBe(true)
    expect(g.node.length).toBe(before.node.length - 6) // ReduceSum, Sub, Cast, Shape, Gather, Cast
    expect(g.node.some((n) => n.name.includes('attn_mask_reformat'))).toBe(false)
    expect(g.initializer.length).toBeLessThan(before.initializer.length)
  })

  it('gives the exported graph logits and presents: a prefill of right-padded rows of lengths 5, 2 and 4, then a decode step', async () => {
    const r = feedAttentionLengths(readFileSync(gqaPath))!
    const d = await compare(gqaPath, r.model, dirname(gqaPath), tiny, [5, 2, 4], tiny.vocab)
    expect(d).toBeLessThan(1e-5)
  })

  it('keeps the mask where something else still reads it (and then both are fed)', async () => {
    const m = ModelProto.decode(readFileSync(gqaPath)) as unknown as { graph: { node: object[]; output: object[] } }
    m.graph.node.push({ name: 'echo', op_type: 'Cast', input: ['attention_mask'], output: ['mask_echo'], attribute: [{ name: 'to', type: 2, i: 1 }] })
    m.graph.output.push({ name: 'mask_echo', type: { tensor_type: { elem_type: 1 } } })
    const bytes = ModelProto.encode(ModelProto.fromObject(m)).finish()
    const r = feedAttentionLengths(bytes)
    expect(r).not.toBeNull()
    expect(r!.maskKept).toBe(true)
    const g = decode(r!.model).graph
    expect(g.input.map((i) => i.name)).toEqual(expect.arrayContaining(['attention_mask', SEQLENS_K_INPUT, TOTAL_LENGTH_INPUT]))
    expect(g.node.some((n) => n.op_type === 'ReduceSum')).toBe(false)
    const d = await compare(bytes, r!.model, dirname(gqaPath), tiny, [3, 1], tiny.vocab)
    expect(d).toBeLessThan(1e-5)
  })

  it('leaves graphs without GroupQueryAttention alone (the plain form), and bytes that are no model', () => {
    expect(feedAttentionLengths(readFileSync(join(tinyPlainModelDir(), 'onnx', 'model.onnx')))).toBeNull()
    expect(feedAttentionLengths(new Uint8Array([1, 2, 3]))).toBeNull()
  })
})

describe.skipIf(!haveFixtures)('feedAttentionLengths on real onnxruntime-genai exports', () => {
  it('tiny-random-LlamaForCausalLM-fp32-derived: the mask goes, and the logits and presents stay', async () => {
    const path = fixture('tiny-random-LlamaForCausalLM-fp32-derived/model.onnx')
    const r = feedAttentionLengths(readFileSync(path))
    expect(r).not.toBeNull()
    expect(r!.maskKept).toBe(false)
    const d = await compare(path, r!.model, dirname(path), { layers: 2, kvHeads: 1, headDim: 16 }, [4, 2], 32000)
    expect(d).toBeLessThan(1e-5)
  })

  it('tiny-random-LlamaForCausalLM-fp16 (MultiHeadAttention, no GroupQueryAttention) is left alone', () => {
    expect(feedAttentionLengths(readFileSync(fixture('tiny-random-LlamaForCausalLM-fp16/model.onnx')))).toBeNull()
  })
})
