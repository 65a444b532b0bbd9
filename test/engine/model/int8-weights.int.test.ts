// --nbits-as-int8: a 4-bit (MatMulNBits) file's weights served on ORT's int8 kernels. The conversion holds each
// 4-bit value to within half an int8 step (symmetric, zero points, 8 bits); the rewritten graph has no MatMulNBits
// left and no 4-bit initializers, reads the file's external data, and stays as close to float32 as the 4-bit file is;
// the engine serves it and says so; what it cannot read stays 4-bit with a reason, and what it cannot do is refused.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PRESETS, buildModel } from '../../../src/builder/index.js'
import { quantizeQ4 } from '../../../src/builder/quantize.js'
import { prepareDecoderGraph } from '../../../src/engine/model/decoder-graph.js'
import { nbitsAsInt8, nbitsToInt8 } from '../../../src/engine/model/int8-weights.js'
import { DataLocation, DataType, encodeModel, type Node, type Tensor } from '../../../src/engine/model/onnx-proto.js'
import { Engine } from '../../../src/engine/engine.js'
import { createEnginePool } from '../../../src/engine/pool/pool.js'
import { measureQuality } from '../../../src/bench/quality.js'
import { isOnnxdError } from '../../../src/shared/errors.js'
import { runRequest } from '../../helpers/engine-run.js'
import { decodeModel } from '../../builder/helpers.js'

// The gqa graph's linear layers: qkv (one packed MatMul), o, gate, up, down; and the head.
const LINEAR = 5 * PRESETS.tiny.layers + 1
let root: string
let q4: string

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'onnxd-int8w-'))
  q4 = (await buildModel({ preset: 'tiny', outDir: join(root, 'q4'), attention: 'gqa', dtypes: ['q4'] })).dir
})
afterAll(async () => {
  await rm(root, { recursive: true, force: true })
})

describe('nbitsToInt8', () => {
  // A K x N matrix with a few columns far larger than the rest, as real weights have.
  const K = 96
  const N = 40
  const w = Float32Array.from({ length: K * N }, (_, i) => Math.sin(i * 0.731) * (i % N === 3 ? 4 : 0.25))
  const at = (k: number, n: number): number => w[k * N + n]

  for (const [label, bits, block, zeroPoints] of [
    ['4 bits, symmetric', 4, 32, false],
    ['4 bits, zero points', 4, 32, true],
    ['8 bits, blocks of 64 (K not a multiple)', 8, 64, false],
  ] as const) {
    it(`holds every dequantized value to within half an int8 step: ${label}`, () => {
      const q = quantizeQ4(K, N, at, bits, block, zeroPoints)
      const blocks = Math.ceil(K / block)
      const mid = 1 << (bits - 1)
      // The 4-bit file's own values, dequantized the way MatMulNBits does.
      const value = (k: number, n: number): number => {
        const b = Math.floor(k / block)
        const j = k % block
        const base = (n * blocks + b) * ((block * bits) / 8)
        const level = bits === 8 ? q.packed[base + j] : j & 1 ? q.packed[base + (j >> 1)] >> 4 : q.packed[base + (j >> 1)] & 15
        const zb = Math.ceil((blocks * bits) / 8)
        const z = !q.zeros ? mid : bits === 8 ? q.zeros[n * zb + b] : b & 1 ? q.zeros[n * zb + (b >> 1)] >> 4 : q.zeros[n * zb + (b >> 1)] & 15
        return (level - z) * q.scales[n * blocks + b]
      }
      const r = nbitsToInt8(K, N, bits, block, q.packed, q.scales, q.zeros ?? null)
      let amax = 0
      for (let k = 0; k < K; k++) for (let n = 0; n < N; n++) amax = Math.max(amax, Math.abs(value(k, n)))
      expect(r.scale).toBeCloseTo(amax / 127, 6)
      let worst = 0
      let full = 0
      for (let k = 0; k < K; k++) {
        for (let n = 0; n < N; n++) {
          worst = Math.max(worst, Math.abs(r.q[k * N + n] * r.scale - value(k, n)))
          if (Math.abs(r.q[k * N + n]) === 127) full++
        }
      }
      expect(worst).toBeLessThanOrEqual(r.scale / 2 + 1e-6)
      expect(full).toBeGreaterThan(0)
    })
  }
})

describe('the rewritten graph', () => {
  it('has every linear layer and the head in int8 form, and drops the 4-bit initializers', async () => {
    const onnxPath = join(q4, 'model_q4.onnx')
    const exported = await readFile(onnxPath)
    const g = prepareDecoderGraph(exported, { nbitsAsInt8: { dir: q4 } })
    expect(g.int8).toEqual({ converted: LINEAR, kept: [] })
    const m = decodeModel(g.model)
    const ops = (op: string): Node[] => m.graph.node.filter((n) => n.op_type === op)
    expect(ops('MatMulInteger')).toHaveLength(LINEAR)
    expect(ops('MatMulNBits')).toEqual([])
    // One DynamicQuantizeLinear per activation: gate and up share one; qkv, o, down and the head one each.
    expect(ops('DynamicQuantizeLinear')).toHaveLength(4 * PRESETS.tiny.layers + 1)
    expect(decodeModel(exported).graph.node.filter((n) => n.op_type === 'MatMulNBits')).toHaveLength(LINEAR)
    expect(m.graph.initializer.filter((t) => t.name.endsWith('_Q4') || t.name.endsWith('_scales'))).toEqual([])
    const int8 = m.graph.initializer.filter((t) => t.data_type === DataType.INT8 && (t.dims ?? []).length === 2)
    expect(int8).toHaveLength(LINEAR)
    // The head is still found: logits only where a step asks, and its greedy token.
    expect(g.logitsAt).not.toBeNull()
    expect(g.nextToken).not.toBeNull()
    // Without the option nothing changes.
    expect(prepareDecoderGraph(exported).int8).toBeNull()
  })

  it("reads weights from an external data file beside the model; leaves what it cannot read as it is, and says why", async () => {
    const K = 32
    const N = 8
    const w = quantizeQ4(K, N, (k, n) => (k - n) / 7)
    await writeFile(join(root, 'w.data'), Buffer.concat([Buffer.alloc(64), w.packed]))
    const node = (name: string, input: string[]): Node => ({
      name,
      op_type: 'MatMulNBits',
      domain: 'com.microsoft',
      input,
      output: [`${name}_out`],
      attribute: ['K', 'N', 'bits', 'block_size'].map((a, i) => ({ name: a, type: 2, i: [K, N, 4, 32][i] })),
    })
    const external = (name: string, location: string, offset: number): Tensor => ({
      name,
      dims: [N, 1, 16],
      data_type: DataType.UINT8,
      data_location: DataLocation.EXTERNAL,
      external_data: [{ key: 'location', value: location }, { key: 'offset', value: String(offset) }, { key: 'length', value: String(w.packed.length) }],
    })
    const model = encodeModel({
      ir_version: 8,
      opset_import: [{ domain: '', version: 17 }, { domain: 'com.microsoft', version: 1 }],
      producer_name: 'test',
      producer_version: '0',
      graph: {
        name: 'g',
        node: [node('beside', ['x', 'B_beside', 'S']), node('outside', ['x', 'B_out', 'S']), node('grouped', ['x', 'B', 'S', '', 'g_idx'])],
        initializer: [
          { name: 'B', dims: [N, 1, 16], data_type: DataType.UINT8, raw_data: w.packed },
          { name: 'S', dims: [N], data_type: DataType.FLOAT, raw_data: new Uint8Array(w.scales.buffer) },
          external('B_beside', 'w.data', 64),
          external('B_out', '../elsewhere.data', 0),
        ],
        input: [],
        output: [],
      },
    })
    const r = nbitsAsInt8(model, root)!
    expect(r.converted).toBe(1)
    expect(r.kept).toEqual(['outside: external data location "../elsewhere.data" is not a file beside the model', 'grouped: it has a g_idx input'])
    const m = decodeModel(r.model)
    expect(m.graph.node.map((n) => n.op_type)).toEqual(['DynamicQuantizeLinear', 'MatMulInteger', 'Cast', 'Mul', 'Mul', 'MatMulNBits', 'MatMulNBits'])
    // The converted node's B is gone, the others' stay; its int8 weights are the ones the conversion gives.
    expect(m.graph.initializer.map((t) => t.name).filter((n) => !n.startsWith('/onnxd/'))).toEqual(['B', 'S', 'B_out'])
    const q = m.graph.initializer.find((t) => t.name === '/onnxd/int8/B_beside/int8')!
    expect(Int8Array.from(q.raw_data!)).toEqual(nbitsToInt8(K, N, 4, 32, w.packed, w.scales, null).q)
  })
})

describe('served', () => {
  it('keeps the 4-bit file\'s closeness to float32 (and an 8-bit file\'s, and one with zero points)', async () => {
    const opts = { prompts: 4, tokens: 24 }
    const asFile = await measureQuality(q4, { dtype: 'q4', ...opts })
    const asInt8 = await measureQuality(q4, { dtype: 'q4', nbitsAsInt8: true, ...opts })
    expect(asInt8.nbitsAsInt8).toBe(true)
    // The quality test's q4 bounds (test/builder/quantize.int.test.ts), and no further from float32 than the file
    // plus what half an int8 step adds.
    expect(asInt8.agreement).toBeGreaterThanOrEqual(0.8)
    expect(asInt8.meanKl).toBeLessThan(5e-3)
    expect(asInt8.meanKl).toBeLessThan(asFile.meanKl * 1.5 + 1e-4)
    const q8 = (await buildModel({ preset: 'tiny', outDir: join(root, 'nbits8'), attention: 'gqa', dtypes: ['q4'], nbits: { bits: 8 } })).dir
    const zp = (await buildModel({ preset: 'tiny', outDir: join(root, 'nbits-zp'), attention: 'gqa', dtypes: ['q4'], nbits: { zeroPoints: true } })).dir
    const r8 = await measureQuality(q8, { dtype: 'q4', nbitsAsInt8: true, ...opts })
    expect(r8.agreement).toBeGreaterThanOrEqual(0.9)
    expect(r8.meanKl).toBeLessThan(1e-4)
    const rz = await measureQuality(zp, { dtype: 'q4', nbitsAsInt8: true, ...opts })
    expect(rz.agreement).toBeGreaterThanOrEqual(0.8)
    expect(rz.meanKl).toBeLessThan(5e-3)
  })

  it('the engine serves it and says how the weights run', async () => {
    const engine = await Engine.load({ modelDir: q4, dtype: 'q4', nbitsAsInt8: true, intraOpThreads: 1 })
    try {
      expect(engine.model.session.weights).toBe(`${LINEAR} MatMulNBits served as int8`)
      const r = await runRequest(engine, { prompt: 'Once upon a time', max_tokens: 12, temperature: 0, ignore_eos: true })
      expect(r.end.type).toBe('done')
      expect(r.ids).toHaveLength(12)
    } finally {
      await engine.close()
    }
  })

  it("the pool's workers serve it and its health says how (the node's start log line reads it)", async () => {
    const pool = createEnginePool({ modelDir: q4, dtype: 'q4', nbitsAsInt8: true, workers: 1, intraOpThreads: 1 })
    try {
      await pool.ready()
      expect(pool.health()).toMatchObject({ status: 'ready', weights: `${LINEAR} MatMulNBits served as int8` })
    } finally {
      await pool.close()
    }
    const plain = createEnginePool({ modelDir: q4, dtype: 'q4', workers: 1, intraOpThreads: 1 })
    try {
      await plain.ready()
      expect(plain.health().weights).toBeUndefined()
    } finally {
      await plain.close()
    }
  })

  it('is refused for a file with no MatMulNBits and off the CPU', async () => {
    const int8 = (await buildModel({ preset: 'tiny', outDir: join(root, 'int8'), attention: 'gqa', dtypes: ['int8'] })).dir
    const refused = async (p: Promise<unknown>): Promise<string> => {
      const e = await p.then(
        () => null,
        (x: unknown) => x,
      )
      if (!isOnnxdError(e) || e.code !== 'config') throw new Error(`expected a config error, got ${String(e)}`)
      return e.message
    }
    expect(await refused(Engine.load({ modelDir: int8, dtype: 'int8', nbitsAsInt8: true }))).toBe(`--nbits-as-int8: ${join(int8, 'model_int8.onnx')} has no 4-bit (com.microsoft MatMulNBits) weights it can serve as int8`)
    expect(await refused(Engine.load({ modelDir: q4, dtype: 'q4', nbitsAsInt8: true, provider: 'webgpu' }))).toMatch(/^--nbits-as-int8 is for the CPU provider, not webgpu/)
  })
})
