// maskFromLengths (decoder-graph.ts): a plain graph on the device computes its attention mask from each row's kept
// cache length and the step's two edges (MASK_INPUTS), so that a decode step hands the device O(batch) bytes, not a
// mask as wide as the cache. The computed mask must be the one the device step fed before (1 on [0, kept) and on
// [from, width)), for readers that cast it and for any other reader; the builder's plain graph must give the same
// logits from it as from the fed mask; graphs it cannot rewrite are left alone.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import * as ort from 'onnxruntime-node'
import { describe, expect, it } from 'vitest'
import { readBundle } from '../../../src/engine/model/bundle.js'
import { MASK_INPUTS, maskFromLengths, prepareDecoderGraph } from '../../../src/engine/model/decoder-graph.js'
import { DataType, ModelProto, encodeModel, type Node, type ValueInfo } from '../../../src/engine/model/onnx-proto.js'
import { tinyPlainModelDir } from '../../helpers/fixtures.js'

const info = (name: string, type: number, dims: Array<number | string>): ValueInfo => ({
  name,
  type: { tensor_type: { elem_type: type, shape: { dim: dims.map((d) => (typeof d === 'number' ? { dim_value: d } : { dim_param: d })) } } },
})

/** y = x * Cast(mask, float), and the mask itself as an output (a reader that is not a Cast). */
const maskReader = (opset: number): Uint8Array =>
  encodeModel({
    ir_version: 8,
    opset_import: [{ domain: '', version: opset }],
    producer_name: 'test',
    producer_version: '1',
    graph: {
      name: 'mask_reader',
      node: [
        { name: 'cast', op_type: 'Cast', input: ['attention_mask'], output: ['maskf'], attribute: [{ name: 'to', type: 2, i: DataType.FLOAT }] },
        { name: 'mul', op_type: 'Mul', input: ['x', 'maskf'], output: ['y'] },
        { name: 'copy', op_type: 'Identity', input: ['attention_mask'], output: ['mask_out'] },
      ],
      initializer: [],
      input: [info('x', DataType.FLOAT, ['batch', 'width']), info('attention_mask', DataType.INT64, ['batch', 'width'])],
      output: [info('y', DataType.FLOAT, ['batch', 'width']), info('mask_out', DataType.INT64, ['batch', 'width'])],
    },
  })

const nodesOf = (model: Uint8Array): Node[] => (ModelProto.toObject(ModelProto.decode(model)) as { graph: { node: Node[] } }).graph.node
const inputsOf = (model: Uint8Array): string[] => (ModelProto.toObject(ModelProto.decode(model)) as { graph: { input: Array<{ name: string }> } }).graph.input.map((i) => i.name)

/** The three inputs for rows that keep `kept` tokens, over a step of `width` columns whose own tokens start at `from`. */
const lengthFeeds = (kept: number[], width: number, from: number): Record<string, ort.Tensor> => ({
  [MASK_INPUTS.kept]: new ort.Tensor('int32', Int32Array.from(kept), [kept.length, 1]),
  [MASK_INPUTS.width]: new ort.Tensor('int32', Int32Array.of(width), []),
  [MASK_INPUTS.from]: new ort.Tensor('int32', Int32Array.of(from), []),
})

/** The mask the device step used to feed: 1 on [0, kept[r]) and on [from, width). */
const fedMask = (kept: number[], width: number, from: number): BigInt64Array => {
  const m = new BigInt64Array(kept.length * width)
  kept.forEach((k, r) => {
    m.fill(1n, r * width, r * width + k)
    m.fill(1n, r * width + from, (r + 1) * width)
  })
  return m
}

describe('maskFromLengths', () => {
  it("computes the mask the device step fed, for a Cast reader and any other reader, and drops the mask input", async () => {
    const rewritten = maskFromLengths(maskReader(17))!
    expect(rewritten).not.toBeNull()
    expect(inputsOf(rewritten)).toEqual(['x', MASK_INPUTS.kept, MASK_INPUTS.width, MASK_INPUTS.from])
    // The Cast reads the int32 mask itself; the Identity reads it cast back to int64.
    const nodes = nodesOf(rewritten)
    expect(nodes.find((n) => n.name === 'cast')!.input).toEqual(['/onnxd/mask/int32'])
    expect(nodes.find((n) => n.name === 'copy')!.input).toEqual(['attention_mask'])
    const s = await ort.InferenceSession.create(rewritten)
    try {
      const kept = [2, 0, 5, 4]
      const width = 7
      const from = 5
      const x = Float32Array.from({ length: kept.length * width }, (_, i) => i + 1)
      const out = await s.run({ x: new ort.Tensor('float32', x, [kept.length, width]), ...lengthFeeds(kept, width, from) })
      const want = fedMask(kept, width, from)
      expect(Array.from(out.mask_out.data as BigInt64Array)).toEqual(Array.from(want))
      expect(Array.from(out.y.data as Float32Array)).toEqual(Array.from(x, (v, i) => v * Number(want[i])))
    } finally {
      await s.release()
    }
  })

  it('leaves alone a graph without the mask, one that already has the inputs, and one before opset 12', () => {
    expect(maskFromLengths(maskReader(17), 'no_such_mask')).toBeNull()
    expect(maskFromLengths(maskFromLengths(maskReader(17))!)).toBeNull()
    expect(maskFromLengths(maskReader(11))).toBeNull()
  })

  it("gives the builder's plain graph the logits of the fed mask, over a cache of holes", async () => {
    const bundle = readBundle(tinyPlainModelDir())
    const g = prepareDecoderGraph(readFileSync(bundle.onnxPath))
    const rewritten = maskFromLengths(g.model)!
    expect(rewritten).not.toBeNull()
    const opts = { intraOpNumThreads: 1, logSeverityLevel: 3 as const, extra: { 'session.model_external_initializers_file_folder_path': join(bundle.onnxPath, '..') } }
    const a = await ort.InferenceSession.create(g.model, opts)
    const b = await ort.InferenceSession.create(rewritten, opts)
    try {
      const past = a.inputNames.filter((n) => n.startsWith('past_key_values.'))
      const meta = a.inputMetadata.find((m) => m.name === past[0]) as { shape: ReadonlyArray<number | string> }
      const [heads, headDim] = [meta.shape[1] as number, meta.shape[3] as number]
      // Rows keeping 3, 0 and 8 tokens of a cap of 8, one new token each (a decode step over device slots).
      const kept = [3, 0, 8]
      const cap = 8
      const rows = kept.length
      const feeds: Record<string, ort.Tensor> = {
        input_ids: new ort.Tensor('int64', BigInt64Array.from(kept, (_, r) => BigInt(7 + 5 * r)), [rows, 1]),
        position_ids: new ort.Tensor('int64', BigInt64Array.from(kept, BigInt), [rows, 1]),
        onnxd_logits_at: new ort.Tensor('int64', BigInt64Array.of(0n), [1]),
      }
      for (const [k, n] of past.entries()) {
        const size = rows * heads * cap * headDim
        feeds[n] = new ort.Tensor('float32', Float32Array.from({ length: size }, (_, i) => Math.sin(i * 0.37 + k)), [rows, heads, cap, headDim])
      }
      const fed = await a.run({ ...feeds, attention_mask: new ort.Tensor('int64', fedMask(kept, cap + 1, cap), [rows, cap + 1]) })
      const computed = await b.run({ ...feeds, ...lengthFeeds(kept, cap + 1, cap) })
      const la = fed.logits.data as Float32Array
      const lb = computed.logits.data as Float32Array
      expect(lb.length).toBe(la.length)
      let worst = 0
      for (let i = 0; i < la.length; i++) worst = Math.max(worst, Math.abs(la[i] - lb[i]))
      expect(worst).toBeLessThan(1e-6)
    } finally {
      await a.release()
      await b.release()
    }
  })
})
