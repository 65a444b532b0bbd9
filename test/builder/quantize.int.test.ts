// The builder's quantized weight forms on the tiny preset: the files real exports use, byte-identical across builds;
// their graphs (MatMulNBits 4-bit blocks that dequantize to the float32 weights, quantize_dynamic's MatMulInteger
// form, float16 throughout); served through the normal dtype choice by the engine and the node over the real pool;
// and the quality check: agreement with the float32 model well above what a broken quantizer (nibbles swapped,
// scales doubled) gives, for both graph forms.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import type { FastifyInstance } from 'fastify'
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PRESETS, buildModel } from '../../src/builder/index.js'
import { DataType, encodeModel, type Model, type Tensor } from '../../src/engine/model/onnx-proto.js'
import { prepareDecoderGraph } from '../../src/engine/model/decoder-graph.js'
import { Engine } from '../../src/engine/engine.js'
import { createEnginePool } from '../../src/engine/pool/pool.js'
import type { EngineClient } from '../../src/engine/index.js'
import { buildNode } from '../../src/node/app.js'
import { createMetrics, createRegistry } from '../../src/node/plugins/metrics.js'
import { measureQuality, type QualityReport } from '../../src/bench/quality.js'
import { run } from '../../src/cli/model.js'
import type { Dtype } from '../../src/shared/model.js'
import { runRequest } from '../helpers/engine-run.js'
import { listen, URL_PATH } from '../node/helpers.js'
import { decodeModel, floats, listFiles } from './helpers.js'

const tiny = PRESETS.tiny
const LINEAR_PER_LAYER = 7 // q, k, v, o, gate, up, down
let root: string
let dir: string
let gqaDir: string
const model = async (d: string, file: string): Promise<Model> => decodeModel(await readFile(join(d, file)))

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'onnxd-quant-'))
  dir = (await buildModel({ preset: 'tiny', outDir: join(root, 'plain'), attention: 'plain', dtypes: ['q4', 'int8', 'fp16'] })).dir
  gqaDir = (await buildModel({ preset: 'tiny', outDir: join(root, 'gqa'), attention: 'gqa', dtypes: ['q4', 'int8', 'fp16'] })).dir
})
afterAll(async () => {
  await rm(root, { recursive: true, force: true })
})

const init = (m: Model, name: string): Tensor => {
  const t = m.graph.initializer.find((x) => x.name === name)
  if (!t?.raw_data) throw new Error(`no inline initializer ${name}`)
  return t
}
const bytesOf = (t: Tensor): Uint8Array => Uint8Array.from(t.raw_data!)
const attr = (m: Model, op: string, name: string): number[] =>
  m.graph.node.filter((n) => n.op_type === op).map((n) => Number(n.attribute!.find((a) => a.name === name)!.i))

describe('files', () => {
  it('writes the variants beside model.onnx, the same bytes on every build; model_quantized.onnx is model_int8.onnx', async () => {
    expect(await listFiles(join(dir, 'onnx'))).toEqual(['model.onnx', 'model_fp16.onnx', 'model_int8.onnx', 'model_q4.onnx', 'model_quantized.onnx'])
    const again = (await buildModel({ preset: 'tiny', outDir: join(root, 'again'), attention: 'plain', dtypes: ['fp16', 'q4', 'int8'] })).dir
    for (const f of await listFiles(dir)) expect(Buffer.compare(await readFile(join(dir, f)), await readFile(join(again, f))), f).toBe(0)
    expect(Buffer.compare(await readFile(join(dir, 'onnx/model_int8.onnx')), await readFile(join(dir, 'onnx/model_quantized.onnx')))).toBe(0)
    // The float32 model is the one a build without --dtype writes.
    const plain = (await buildModel({ preset: 'tiny', outDir: join(root, 'fp32only'), attention: 'plain' })).dir
    expect(Buffer.compare(await readFile(join(dir, 'onnx/model.onnx')), await readFile(join(plain, 'onnx/model.onnx')))).toBe(0)
    // ... and a rebuild without them removes the old variants.
    await buildModel({ preset: 'tiny', outDir: again, attention: 'plain' })
    expect(await listFiles(join(again, 'onnx'))).toEqual(['model.onnx'])
  })

  it('genai form: the variants beside its model.onnx, the same bytes on every build', async () => {
    expect((await listFiles(gqaDir)).filter((f) => f.endsWith('.onnx'))).toEqual(['model.onnx', 'model_fp16.onnx', 'model_int8.onnx', 'model_q4.onnx', 'model_quantized.onnx'])
    const again = (await buildModel({ preset: 'tiny', outDir: join(root, 'gqa-again'), attention: 'gqa', dtypes: ['q4', 'int8', 'fp16'] })).dir
    for (const f of await listFiles(gqaDir)) expect(Buffer.compare(await readFile(join(gqaDir, f)), await readFile(join(again, f))), f).toBe(0)
  })
})

describe('q4', () => {
  it('every linear layer and the tied LM head is a 4-bit MatMulNBits whose blocks dequantize to the float32 weights', async () => {
    const m = await model(dir, 'onnx/model_q4.onnx')
    const fp32 = await model(dir, 'onnx/model.onnx')
    const nbits = m.graph.node.filter((n) => n.op_type === 'MatMulNBits')
    expect(nbits).toHaveLength(tiny.layers * LINEAR_PER_LAYER + 1)
    expect(nbits.every((n) => n.domain === 'com.microsoft')).toBe(true)
    expect(m.opset_import).toContainEqual({ domain: 'com.microsoft', version: 1 })
    expect(new Set(attr(m, 'MatMulNBits', 'bits'))).toEqual(new Set([4]))
    expect(new Set(attr(m, 'MatMulNBits', 'block_size'))).toEqual(new Set([32]))
    // No float MatMul reads a weight any more; attention's MatMuls of activations stay.
    const weights = new Set(fp32.graph.initializer.map((t) => t.name))
    expect(m.graph.node.filter((n) => n.op_type === 'MatMul' && weights.has(n.input[1]))).toEqual([])
    // The embedding's Gather still reads float32 values.
    expect(init(m, 'model.embed_tokens.weight').data_type).toBe(DataType.FLOAT)

    // Dequantize: element k of column n is nibble (k & 1) of byte k >> 1 in block k / 32, (q - 8) * scale.
    const check = (K: number, N: number, at: (k: number, n: number) => number, prefix: string): void => {
      const packed = init(m, `${prefix}_Q4`)
      const blocks = Math.ceil(K / 32)
      expect(packed.dims).toEqual([N, blocks, 16])
      expect(packed.data_type).toBe(DataType.UINT8)
      expect(init(m, `${prefix}_scales`).dims).toEqual([N * blocks])
      const q = bytesOf(packed)
      const s = new Float32Array(bytesOf(init(m, `${prefix}_scales`)).buffer)
      let worst = 0
      let sum = 0
      for (let n = 0; n < N; n++) {
        for (let k = 0; k < K; k++) {
          const b = Math.floor(k / 32)
          const byte = q[(n * blocks + b) * 16 + ((k % 32) >> 1)]
          const nib = k & 1 ? byte >> 4 : byte & 15
          const scale = s[n * blocks + b]
          const err = Math.abs((nib - 8) * scale - at(k, n)) / Math.abs(scale)
          worst = Math.max(worst, err)
          sum += err
        }
      }
      // In steps of the block's scale: rounding is off by half a step at most, except at the top of [-8, 7] steps
      // (the block's largest magnitude maps to -8 exactly; values near its opposite clip at 7); on average 1/4.
      expect(worst).toBeLessThanOrEqual(1 + 1e-3)
      expect(sum / (K * N)).toBeLessThan(0.27)
    }
    const c = tiny.hiddenSize
    const down = floats(fp32, 'model.layers.1.mlp.down_proj.weight_T') // [intermediate, hidden]: K = 172, a partial block
    check(tiny.intermediateSize, c, (k, n) => down[k * c + n], 'model.layers.1.mlp.down_proj.weight_T')
    const embed = floats(fp32, 'model.embed_tokens.weight') // [vocab, hidden] is the head's [N, K]
    check(c, tiny.vocabSize, (k, n) => embed[n * c + k], 'model.embed_tokens.weight_head')
    const K = init(m, 'model.embed_tokens.weight_head_Q4')
    expect(K.dims).toEqual([tiny.vocabSize, c / 32, 16])
  })

})

describe('int8 and fp16', () => {
  it('int8: quantize_dynamic form for every weight: linear layers, the embedding Gather and the tied head', async () => {
    const m = await model(dir, 'onnx/model_int8.onnx')
    const mmi = m.graph.node.filter((n) => n.op_type === 'MatMulInteger')
    expect(mmi).toHaveLength(tiny.layers * LINEAR_PER_LAYER + 1)
    // One DynamicQuantizeLinear per activation: attention input, attention output, MLP input, MLP product; the head's.
    expect(m.graph.node.filter((n) => n.op_type === 'DynamicQuantizeLinear')).toHaveLength(tiny.layers * 4 + 1)
    expect(m.graph.initializer.filter((t) => t.data_type === DataType.FLOAT && (t.dims ?? []).length === 2)).toEqual([]) // no float32 weight matrix left
    const w = init(m, 'model.layers.0.self_attn.q_proj.weight_T_quantized')
    expect(w.data_type).toBe(DataType.INT8)
    expect(w.dims).toEqual([tiny.hiddenSize, tiny.heads * tiny.headDim])
    const fp32 = floats(await model(dir, 'onnx/model.onnx'), 'model.layers.0.self_attn.q_proj.weight_T')
    const scale = new Float32Array(bytesOf(init(m, 'model.layers.0.self_attn.q_proj.weight_T_scale')).buffer)[0]
    const q = new Int8Array(bytesOf(w).buffer)
    let worst = 0
    for (let i = 0; i < fp32.length; i++) worst = Math.max(worst, Math.abs(q[i] * scale - fp32[i]))
    expect(worst).toBeLessThanOrEqual(scale / 2 + 1e-9)
    // The embedding: int8 rows gathered, then dequantized; the head transposes the same int8 tensor.
    const gather = m.graph.node.find((n) => n.op_type === 'Gather' && n.input[1] === 'input_ids')!
    expect(gather.input[0]).toBe('model.embed_tokens.weight_quantized')
    expect(m.graph.node.find((n) => n.op_type === 'DequantizeLinear')!.input[0]).toBe(gather.output[0])
    expect(m.graph.node.find((n) => n.op_type === 'Transpose' && n.input[0] === 'model.embed_tokens.weight_quantized')).toBeDefined()
  })

  it('q4 and int8 keep the engine computing the head at the positions a step names only, with the greedy token output', async () => {
    for (const f of ['model_q4.onnx', 'model_int8.onnx']) {
      const g = prepareDecoderGraph(await readFile(join(dir, 'onnx', f)))
      expect(g.logitsAt, f).not.toBeNull()
      expect(g.nextToken, f).not.toBeNull()
    }
  })

  it('fp16: float16 cache, logits and weights', async () => {
    const m = await model(dir, 'onnx/model_fp16.onnx')
    const elem = (v: { type?: { tensor_type?: { elem_type?: number } } }): number | undefined => v.type?.tensor_type?.elem_type
    for (const v of [...m.graph.input, ...m.graph.output]) expect(elem(v), v.name).toBe(v.name.startsWith('past') || v.name.startsWith('present') || v.name === 'logits' ? DataType.FLOAT16 : DataType.INT64)
    expect(m.graph.initializer.filter((t) => t.data_type === DataType.FLOAT)).toEqual([])
  })
})

describe('serving', () => {
  const greedy = { prompt: 'Once upon a time', max_tokens: 12, temperature: 0, ignore_eos: true }
  const ids = new Map<Dtype, number[]>()
  beforeAll(async () => {
    for (const dtype of ['fp32', 'fp16', 'int8', 'q4'] as const) {
      const engine = await Engine.load({ modelDir: dir, dtype, intraOpThreads: 1 })
      try {
        const r = await runRequest(engine, greedy)
        expect(r.end.type, dtype).toBe('done')
        ids.set(dtype, r.ids)
      } finally {
        await engine.close()
      }
    }
  })

  it('every dtype generates greedily through the engine; fp16 gives the float32 tokens', () => {
    for (const [dtype, got] of ids) expect(got, dtype).toHaveLength(12)
    expect(ids.get('fp16')).toEqual(ids.get('fp32'))
  })

  it('a missing variant is refused naming its file', async () => {
    await expect(Engine.load({ modelDir: join(root, 'fp32only'), dtype: 'q4' })).rejects.toThrow(/model_q4\.onnx: file not found \(dtype q4\)/)
  })

  describe('the node over the real pool, --dtype q4', () => {
    let app: FastifyInstance
    let pool: EngineClient
    let base: string
    beforeAll(async () => {
      const metrics = createMetrics(createRegistry(), 'plain', 'cpu')
      pool = createEnginePool({ modelDir: dir, modelId: 'plain', dtype: 'q4', workers: 1, intraOpThreads: 1 }, metrics.observer)
      const { loadNodeOptions } = await import('../../src/node/options.js')
      app = buildNode(loadNodeOptions({}, { logLevel: 'silent', model: dir, modelId: 'plain', dtype: 'q4' }, {}, { totalMemBytes: 8 * 1024 ** 3 }), { engine: pool, metrics })
      base = await listen(app)
      await pool.ready()
    })
    afterAll(async () => {
      await app.close()
      await pool.close()
    })

    it('serves the q4 model: the engine\'s greedy tokens', async () => {
      const res = await fetch(`${base}${URL_PATH}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'plain', ...greedy }) })
      expect(res.status).toBe(200)
      const body = (await res.json()) as { output_ids: number[] }
      expect(body.output_ids).toEqual(ids.get('q4'))
    })
  })
})

describe('quality', () => {
  const opts = { prompts: 4, tokens: 24 }
  // Measured on this preset (4 prompts x 24 tokens): fp16 1.0, int8 1.0, q4 0.97 agreement (KL 4e-9, 1e-5, 4e-4);
  // a q4 file with its nibbles swapped or its scales doubled: 0 (KL 3e-2). The bounds leave room between the two.
  const BOUNDS: Record<'fp16' | 'int8' | 'q4', { agreement: number; kl: number }> = {
    fp16: { agreement: 0.98, kl: 1e-6 },
    int8: { agreement: 0.9, kl: 1e-4 },
    q4: { agreement: 0.8, kl: 5e-3 },
  }
  const within = (r: QualityReport, dtype: keyof typeof BOUNDS): void => {
    expect(r.positions).toBe(opts.prompts * opts.tokens)
    expect(r.agreement, `${dtype} agreement`).toBeGreaterThanOrEqual(BOUNDS[dtype].agreement)
    expect(r.meanKl, `${dtype} KL`).toBeLessThan(BOUNDS[dtype].kl)
  }

  it('each form agrees with the float32 model within its bound, in both graph forms', async () => {
    for (const d of [dir, gqaDir]) for (const dtype of ['fp16', 'int8', 'q4'] as const) within(await measureQuality(d, { dtype, ...opts }), dtype)
  })

  it("the forms kept for comparing ORT's kernels run and stay within their bounds: MatMulNBits at 8 bits, blocks of 64 at accuracy_level 0, zero points; int8 per channel with reduce_range", async () => {
    const q8 = (await buildModel({ preset: 'tiny', outDir: join(root, 'nbits8'), attention: 'gqa', dtypes: ['q4'], nbits: { bits: 8 } })).dir
    const b64 = (await buildModel({ preset: 'tiny', outDir: join(root, 'nbits-b64'), attention: 'plain', dtypes: ['q4'], nbits: { block: 64, accuracyLevel: 0 } })).dir
    const zp = (await buildModel({ preset: 'tiny', outDir: join(root, 'nbits-zp'), attention: 'gqa', dtypes: ['q4'], nbits: { zeroPoints: true } })).dir
    const graph = async (d: string, file: string): Promise<string> => JSON.stringify((await model(d, file)).graph.node.filter((n) => n.op_type === 'MatMulNBits').map((n) => (n.attribute ?? []).map((a) => [a.name, Number(a.i)])))
    expect(await graph(q8, 'model_q4.onnx')).toContain('["bits",8]')
    expect(await graph(b64, 'onnx/model_q4.onnx')).toContain('["block_size",64],["accuracy_level",0]')
    const zpNodes = (await model(zp, 'model_q4.onnx')).graph.node.filter((n) => n.op_type === 'MatMulNBits')
    expect(zpNodes.every((n) => n.input.length === 4 && n.input[3].endsWith('_zero_points'))).toBe(true)
    // 8 bits: at least as close to float32 as int8; the others within their form's bound.
    within(await measureQuality(q8, { dtype: 'q4', ...opts }), 'int8')
    within(await measureQuality(b64, { dtype: 'q4', ...opts }), 'q4')
    within(await measureQuality(zp, { dtype: 'q4', ...opts }), 'q4')
    const pc = (await buildModel({ preset: 'tiny', outDir: join(root, 'int8pc'), attention: 'gqa', dtypes: ['int8'], int8: { perChannel: true, reduceRange: true } })).dir
    const scales = (await model(pc, 'model_int8.onnx')).graph.initializer.filter((t) => t.name.endsWith('_scale'))
    expect(scales.some((t) => (t.dims ?? []).length === 1 && Number(t.dims![0]) > 1)).toBe(true)
    within(await measureQuality(pc, { dtype: 'int8', ...opts }), 'int8')
    await expect(buildModel({ preset: 'tiny', outDir: join(root, 'bad'), dtypes: ['q4'], nbits: { block: 48 } })).rejects.toThrow(/nbits/)
  })

  /** A copy of the plain bundle whose `file` has its initializers ending in `suffix` rewritten by `edit`. */
  async function broken(name: string, file: string, suffix: string, edit: (t: Tensor) => Uint8Array): Promise<string> {
    const out = join(root, name)
    await cp(dir, out, { recursive: true })
    const m = await model(dir, file)
    for (const t of m.graph.initializer) if (t.name.endsWith(suffix)) t.raw_data = edit(t)
    await writeFile(join(out, file), encodeModel(m))
    return out
  }
  const doubled = (t: Tensor): Uint8Array => {
    const f = new Float32Array(bytesOf(t).buffer)
    for (let i = 0; i < f.length; i++) f[i] *= 2
    return new Uint8Array(f.buffer)
  }

  it('a wrong quantizer fails the bounds: nibbles in the other order, scales off by 2x', async () => {
    const swapped = await broken('swapped', 'onnx/model_q4.onnx', '_Q4', (t) => Uint8Array.from(bytesOf(t), (b) => ((b & 15) << 4) | (b >> 4)))
    const q4x2 = await broken('q4x2', 'onnx/model_q4.onnx', '_scales', doubled)
    for (const d of [swapped, q4x2]) {
      const r = await measureQuality(d, { dtype: 'q4', ...opts })
      expect(r.agreement, d).toBeLessThan(BOUNDS.q4.agreement / 2)
      expect(r.meanKl, d).toBeGreaterThan(BOUNDS.q4.kl)
    }
    // This random tiny model's next token follows the current token's embedding through the residual stream, so
    // int8 weights all halved (embedding and head included) keep the argmax: agreement 0.99. KL is what sees it
    // (5e-3 against 1e-5), so that wrong quantizer fails the KL bound.
    const int8Half = await broken('int8half', 'onnx/model_int8.onnx', '_quantized', (t) => Uint8Array.from(bytesOf(t), (b) => (((b << 24) >> 24) >> 1) & 0xff))
    expect((await measureQuality(int8Half, { dtype: 'int8', ...opts })).meanKl).toBeGreaterThan(10 * BOUNDS.int8.kl)
  })
})

describe('CLI', () => {
  it('model build --dtype writes the variants; an unknown dtype is a usage error naming the flag', async () => {
    const lines: string[] = []
    const out = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => (lines.push(String(chunk)), true))
    const err: string[] = []
    const errSpy = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => (err.push(String(chunk)), true))
    try {
      expect(await run(['build', 'tiny', '--out', join(root, 'cli'), '--attention', 'plain', '--dtype', 'q4,fp16'])).toBe(0)
      expect(JSON.parse(lines[0])).toMatchObject({ preset: 'tiny', dtypes: ['fp32', 'q4', 'fp16'] })
      expect(await listFiles(join(root, 'cli', 'onnx'))).toEqual(['model.onnx', 'model_fp16.onnx', 'model_q4.onnx'])
      expect(await run(['build', 'tiny', '--out', join(root, 'never'), '--dtype', 'q4,int3'])).toBe(2)
      expect(err.join('')).toContain('--dtype must be one or more of q4, int8, fp16, comma-separated. Given: q4,int3')
      lines.length = 0
      expect(await run(['quality', join(root, 'cli'), '--dtype', 'q4', '--prompts', '1', '--tokens', '4', '--json'])).toBe(0)
      expect(JSON.parse(lines[0])).toMatchObject({ dtype: 'q4', prompts: 1, tokens: 4, positions: 4 })
      expect(await run(['quality', join(root, 'cli'), '--dtype', 'int8'])).toBe(1)
      expect(err.join('')).toContain('model_int8.onnx: file not found (dtype int8)')
      expect(await run(['quality', join(root, 'cli'), '--dtype', 'q4', '--tokens', '0'])).toBe(2)
      expect(err.join('')).toContain('--tokens must be an integer in [1, 4096]. Given: 0')
    } finally {
      out.mockRestore()
      errSpy.mockRestore()
    }
  })
})
