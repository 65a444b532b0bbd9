// fetchNewKvOnly: the rewritten graph returns, in place of each present output, only the new rows its
// Concat(past, new) appends, and the rewrite is refused (null) wherever that shape is not there.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import * as ort from 'onnxruntime-node'
import { beforeAll, describe, expect, it } from 'vitest'
import { readBundle } from '../../../src/engine/model/bundle.js'
import { LOGITS_AT_INPUT, NEXT_TOKEN_OUTPUT, externalDataConfig, fetchNewKvOnly, graphOutputNames, greedyTokens, prepareDecoderGraph } from '../../../src/engine/model/decoder-graph.js'
import { ModelProto, type Node } from '../../../src/engine/model/onnx-proto.js'
import { tinyPlainModelDir, fixture, haveFixtures } from '../../helpers/fixtures.js'

interface Tiny {
  onnxDir: string
  bytes: Uint8Array
  layers: number
  kvHeads: number
  headDim: number
  /** present.<i>.key|value -> past_key_values.<i>.key|value, for every layer. */
  map: Map<string, string>
}

function loadTiny(): Tiny {
  const dir = tinyPlainModelDir()
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, number>
  const layers = config.num_hidden_layers
  const kvHeads = config.num_key_value_heads ?? config.num_attention_heads
  const headDim = config.head_dim ?? config.hidden_size / config.num_attention_heads
  const map = new Map<string, string>()
  for (let i = 0; i < layers; i++) for (const kv of ['key', 'value']) map.set(`present.${i}.${kv}`, `past_key_values.${i}.${kv}`)
  const onnxDir = join(dir, 'onnx')
  return { onnxDir, bytes: readFileSync(join(onnxDir, 'model.onnx')), layers, kvHeads, headDim, map }
}

/** The Concat nodes that read a past input: the cache copies a step makes. */
function cacheConcats(model: Uint8Array): Node[] {
  const m = ModelProto.toObject(ModelProto.decode(model), { defaults: true }) as { graph: { node: Node[] } }
  return m.graph.node.filter((n) => n.op_type === 'Concat' && n.input.some((i) => i.startsWith('past_key_values.')))
}

const i64 = (values: number[], dims: number[]): ort.Tensor => new ort.Tensor('int64', BigInt64Array.from(values.map(BigInt)), dims)

const maxAbsDiff = (a: ArrayLike<number>, b: ArrayLike<number>): number => {
  expect(a.length).toBe(b.length)
  let m = 0
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]))
  return m
}

/** Slots [from, to) of a [1, heads, seq, headDim] tensor, as [1, heads, to - from, headDim]. */
function slots(data: Float32Array, heads: number, seq: number, headDim: number, from: number, to: number): Float32Array {
  const out = new Float32Array(heads * (to - from) * headDim)
  for (let h = 0; h < heads; h++) out.set(data.subarray((h * seq + from) * headDim, (h * seq + to) * headDim), h * (to - from) * headDim)
  return out
}

describe('fetchNewKvOnly on the embedded default model', () => {
  let tiny: Tiny
  beforeAll(() => {
    tiny = loadTiny()
  })

  it('maps each present output to a distinct new-rows output and replaces the present outputs with them', () => {
    const before = graphOutputNames(tiny.bytes)
    expect(before).toEqual(['logits', ...tiny.map.keys()])
    const r = fetchNewKvOnly(tiny.bytes, tiny.map, 4)
    expect(r).not.toBeNull()
    const { model, outputs } = r!
    expect([...outputs.keys()]).toEqual([...tiny.map.keys()])
    const targets = [...outputs.values()]
    expect(new Set(targets).size).toBe(2 * tiny.layers)
    for (const t of targets) {
      expect(tiny.map.has(t)).toBe(false)
      expect([...tiny.map.values()]).not.toContain(t)
    }
    // The outputs keep their order, each present in its place; the original bytes are not modified.
    expect(graphOutputNames(model)).toEqual(['logits', ...targets])
    expect(graphOutputNames(tiny.bytes)).toEqual(before)
  })

  it('the rewritten graph returns the last rows of each present: a 2-token step on a 3-token past', async () => {
    const { kvHeads: H, headDim: D, onnxDir } = tiny
    const r = fetchNewKvOnly(tiny.bytes, tiny.map, 4)!
    const opts: ort.InferenceSession.SessionOptions = { logSeverityLevel: 3, extra: externalDataConfig(join(onnxDir, 'model.onnx')) }
    const original = await ort.InferenceSession.create(join(onnxDir, 'model.onnx'), { logSeverityLevel: 3 })
    const rewritten = await ort.InferenceSession.create(r.model, opts)
    try {
      const pastLen = 3
      const seq = 2
      const feeds: Record<string, ort.Tensor> = {
        input_ids: i64([17, 250], [1, seq]),
        attention_mask: i64([1, 1, 1, 1, 1], [1, pastLen + seq]),
        position_ids: i64([3, 4], [1, seq]),
      }
      const pasts = new Map<string, Float32Array>()
      let salt = 0
      for (const past of tiny.map.values()) {
        salt++
        const data = Float32Array.from({ length: H * pastLen * D }, (_, i) => Math.sin(i * 0.37 + salt) * 0.5)
        pasts.set(past, data)
        feeds[past] = new ort.Tensor('float32', data, [1, H, pastLen, D])
      }
      expect(rewritten.outputNames).toEqual(['logits', ...r.outputs.values()])
      const full = await original.run(feeds)
      const fresh = await rewritten.run(feeds)
      expect(maxAbsDiff(fresh.logits.data as Float32Array, full.logits.data as Float32Array)).toBeLessThanOrEqual(1e-5)
      for (const [present, past] of tiny.map) {
        const p = full[present]
        expect(p.dims).toEqual([1, H, pastLen + seq, D])
        const pData = p.data as Float32Array
        // The original present is concat(past, new): its first slots are the past fed in.
        expect(maxAbsDiff(slots(pData, H, pastLen + seq, D, 0, pastLen), pasts.get(past)!)).toBe(0)
        const n = fresh[r.outputs.get(present)!]
        expect(n.dims).toEqual([1, H, seq, D])
        const newRows = slots(pData, H, pastLen + seq, D, pastLen, pastLen + seq)
        expect(newRows.some((v) => v !== 0)).toBe(true)
        expect(maxAbsDiff(n.data as Float32Array, newRows)).toBeLessThanOrEqual(1e-5)
      }
    } finally {
      await original.release()
      await rewritten.release()
    }
  })

  it('drops the cache concats, which only fed the present outputs: the builder graph\'s attention reads past and new apart', () => {
    expect(cacheConcats(tiny.bytes)).toHaveLength(2 * tiny.layers)
    expect(cacheConcats(fetchNewKvOnly(tiny.bytes, tiny.map, 4)!.model)).toHaveLength(0)
  })

  it('returns null when a mapped output is not the Concat of that past', () => {
    // present.0.key concatenates past_key_values.0.key, not .1.
    expect(fetchNewKvOnly(tiny.bytes, new Map([['present.0.key', 'past_key_values.1.key']]), 4)).toBeNull()
    // One wrong entry among correct ones is enough.
    const oneWrong = new Map(tiny.map)
    oneWrong.set('present.1.value', 'past_key_values.1.key')
    expect(fetchNewKvOnly(tiny.bytes, oneWrong, 4)).toBeNull()
    // Not an output of any node.
    expect(fetchNewKvOnly(tiny.bytes, new Map([['present.99.key', 'past_key_values.99.key']]), 4)).toBeNull()
    // Not a Concat: logits come from a MatMul.
    expect(fetchNewKvOnly(tiny.bytes, new Map([['logits', 'past_key_values.0.key']]), 4)).toBeNull()
    // A concat along another axis than the sequence one of the given rank.
    expect(fetchNewKvOnly(tiny.bytes, tiny.map, 5)).toBeNull()
    // The correct map still works, so each null above is for its own reason.
    expect(fetchNewKvOnly(tiny.bytes, tiny.map, 4)).not.toBeNull()
  })

  it('returns null for bytes that are not a model', () => {
    expect(fetchNewKvOnly(new TextEncoder().encode('not an onnx model'), tiny.map, 4)).toBeNull()
  })
})

describe('greedyTokens', () => {
  it('adds each row\'s argmax of the logits at each named position as an int64 output, first index on ties', async () => {
    const tiny = loadTiny()
    const g = prepareDecoderGraph(tiny.bytes)
    expect(g.nextToken).toBe(NEXT_TOKEN_OUTPUT)
    expect(graphOutputNames(g.model).at(-1)).toBe(NEXT_TOKEN_OUTPUT)
    const s = await ort.InferenceSession.create(g.model, { logSeverityLevel: 3 })
    try {
      const rows = 3
      const seq = 4
      const feeds: Record<string, ort.Tensor> = {
        input_ids: i64(Array.from({ length: rows * seq }, (_, i) => (i * 37 + 5) % 2000), [rows, seq]),
        attention_mask: i64(new Array<number>(rows * seq).fill(1), [rows, seq]),
        position_ids: i64(Array.from({ length: rows * seq }, (_, i) => i % seq), [rows, seq]),
        // Two positions per row: where a draft's tokens are checked.
        [LOGITS_AT_INPUT]: i64([1, seq - 1], [2]),
      }
      for (const past of tiny.map.values()) feeds[past] = new ort.Tensor('float32', new Float32Array(0), [rows, tiny.kvHeads, 0, tiny.headDim])
      const out = await s.run(feeds)
      const logits = out.logits.data as Float32Array
      expect(out.logits.dims.slice(0, 2)).toEqual([rows, 2])
      const V = logits.length / (rows * 2)
      const want = Array.from({ length: rows * 2 }, (_, k) => {
        const row = logits.subarray(k * V, (k + 1) * V)
        return row.indexOf(Math.max(...row))
      })
      expect(out[NEXT_TOKEN_OUTPUT].dims).toEqual([rows, 2])
      expect(Array.from(out[NEXT_TOKEN_OUTPUT].data as BigInt64Array, Number)).toEqual(want)
    } finally {
      await s.release()
    }
  })

  it('returns null for a name that is no output', () => {
    expect(greedyTokens(loadTiny().bytes, 'no_such_output')).toBeNull()
  })

  it.skipIf(!haveFixtures)('leaves a graph alone whose logits are float16 (tiny-random-LlamaForCausalLM-fp16)', () => {
    const fp16 = readFileSync(readBundle(fixture('tiny-random-LlamaForCausalLM-fp16')).onnxPath)
    expect(greedyTokens(fp16, 'logits')).toBeNull()
    expect(prepareDecoderGraph(fp16).nextToken).toBeNull()
  })
})

describe.skipIf(!haveFixtures)('fetchNewKvOnly on an optimum export whose attention reads the concat', () => {
  it('stories260K-hf: the outputs carry the new rows and the concats attention reads stay', () => {
    const bytes = readFileSync(readBundle(fixture('stories260K-hf')).onnxPath)
    const map = new Map(
      graphOutputNames(bytes).flatMap((n): [string, string][] => {
        const m = /^present\.(\d+)\.(key|value)$/.exec(n)
        return m ? [[n, `past_key_values.${m[1]}.${m[2]}`]] : []
      }),
    )
    expect(map.size).toBeGreaterThan(0)
    const r = fetchNewKvOnly(bytes, map, 4)
    expect(r).not.toBeNull()
    expect(graphOutputNames(r!.model)).not.toContain([...map.keys()][0])
    expect(cacheConcats(r!.model)).toHaveLength(map.size)
  })
})

describe.skipIf(!haveFixtures)('fetchNewKvOnly on stacked (GPT-2) caches', () => {
  for (const name of ['tiny-random-gpt2-fp32', 'tiny-random-gpt2-fp16']) {
    it(`${name}: present_<i> is not a Concat of past_<i>, so the graph is left alone`, () => {
      const bytes = readFileSync(readBundle(fixture(name)).onnxPath)
      const presents = graphOutputNames(bytes).filter((n) => /^present_\d+$/.test(n))
      expect(presents.length).toBeGreaterThan(0)
      const map = new Map(presents.map((n) => [n, n.replace('present_', 'past_')]))
      expect(fetchNewKvOnly(bytes, map, 5)).toBeNull()
      expect(fetchNewKvOnly(bytes, map, 4)).toBeNull()
    })
  }
})
