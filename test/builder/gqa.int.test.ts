// The builder's GroupQueryAttention form (tiny preset) against its plain form: the onnxruntime-genai layout and
// graph, the same weights, the same logits in ONNX Runtime (prompt, then cached decode steps), byte-determinism,
// external data under genai's file name, the CLI flag, and the engine serving it with the plain form's tokens.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import * as ort from 'onnxruntime-node'
import { existsSync } from 'node:fs'
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PRESETS, buildModel, type Preset } from '../../src/builder/index.js'
import { gqaGraph } from '../../src/builder/gqa-graph.js'
import { writeOnnx } from '../../src/builder/write-onnx.js'
import type { Model, Node } from '../../src/engine/model/onnx-proto.js'
import { readBundle } from '../../src/engine/model/bundle.js'
import { Engine } from '../../src/engine/engine.js'
import { BOS_ID, EOS_ID, PAD_ID } from '../../src/builder/tokenizer.js'
import { run } from '../../src/cli/model.js'
import { runRequest } from '../helpers/engine-run.js'
import { fixture, haveFixtures } from '../helpers/fixtures.js'
import { decodeModel, floats, listFiles, readJson } from './helpers.js'

const tiny: Preset = PRESETS.tiny
let root: string
let plainDir: string
let gqaDir: string

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'onnxd-gqa-'))
  plainDir = (await buildModel({ preset: 'tiny', outDir: join(root, 'plain'), seed: 0, attention: 'plain' })).dir
  gqaDir = (await buildModel({ preset: 'tiny', outDir: join(root, 'gqa'), seed: 0, attention: 'gqa' })).dir
})
afterAll(async () => {
  await rm(root, { recursive: true, force: true })
})

/** Bitwise equality of two float arrays (vitest's toEqual walks them element by element, slowly). */
const same = (a: Float32Array, b: Float32Array): boolean => Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength)) === 0

/** The keys of a JSON object, nested ones as dotted paths. */
function keyPaths(v: unknown, prefix = ''): string[] {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return [prefix]
  return Object.entries(v).flatMap(([k, x]) => keyPaths(x, prefix ? `${prefix}.${k}` : k))
}

describe('bundle files', () => {
  it('writes the onnxruntime-genai layout, with the plain build tokenizer files', async () => {
    expect(await listFiles(gqaDir)).toEqual(['genai_config.json', 'model.onnx', 'onnxd_builder.json', 'special_tokens_map.json', 'tokenizer.json', 'tokenizer_config.json'])
    for (const f of ['tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json']) {
      expect(Buffer.compare(await readFile(join(gqaDir, f)), await readFile(join(plainDir, f))), f).toBe(0)
    }
  })

  it('genai_config.json has the format of onnxruntime-genai builder output, with the preset in it', async () => {
    const c = await readJson(join(gqaDir, 'genai_config.json'))
    expect(c).toEqual({
      model: {
        bos_token_id: BOS_ID,
        context_length: tiny.maxPositions,
        decoder: {
          session_options: { log_id: 'onnxruntime-genai', provider_options: [] },
          filename: 'model.onnx',
          head_size: tiny.headDim,
          hidden_size: tiny.hiddenSize,
          inputs: {
            input_ids: 'input_ids',
            attention_mask: 'attention_mask',
            past_key_names: 'past_key_values.%d.key',
            past_value_names: 'past_key_values.%d.value',
          },
          outputs: { logits: 'logits', present_key_names: 'present.%d.key', present_value_names: 'present.%d.value' },
          num_attention_heads: tiny.heads,
          num_hidden_layers: tiny.layers,
          num_key_value_heads: tiny.kvHeads,
        },
        eos_token_id: EOS_ID,
        pad_token_id: PAD_ID,
        type: 'llama',
        vocab_size: tiny.vocabSize,
      },
      search: {
        diversity_penalty: 0,
        do_sample: false,
        early_stopping: true,
        length_penalty: 1,
        max_length: tiny.maxPositions,
        min_length: 0,
        no_repeat_ngram_size: 0,
        num_beams: 1,
        num_return_sequences: 1,
        past_present_share_buffer: true,
        repetition_penalty: 1,
        temperature: 1,
        top_k: 1,
        top_p: 1,
      },
    })
  })

  it.skipIf(!haveFixtures)("has the genai fixture's model keys (less position_ids, which the fixture's graph does not take either)", async () => {
    const ours = keyPaths((await readJson(join(gqaDir, 'genai_config.json'))).model)
    const theirs = keyPaths((await readJson(join(fixture('tiny-random-LlamaForCausalLM-fp32-derived'), 'genai_config.json'))).model)
    expect(ours.sort()).toEqual(theirs.filter((k) => k !== 'decoder.inputs.position_ids').sort())
  })

  it('the engine reads it as a genai bundle with right padding', () => {
    const b = readBundle(gqaDir)
    expect(b).toMatchObject({ layout: 'genai', padding: 'right', contextLength: tiny.maxPositions, eosTokenIds: [EOS_ID] })
    expect(b.onnxPath).toBe(join(gqaDir, 'model.onnx'))
  })
})

describe('graph', () => {
  let m: Model
  let byOutput: Map<string, Node>
  beforeAll(async () => {
    m = decodeModel(await readFile(join(gqaDir, 'model.onnx')))
    byOutput = new Map(m.graph.node.flatMap((n) => n.output.map((o) => [o, n] as [string, Node])))
  })
  const producer = (name: string): Node => byOutput.get(name) ?? expect.fail(`nothing produces ${name}`)

  it('imports com.microsoft version 1 beside the default domain', () => {
    expect(m.opset_import).toEqual([{ domain: '', version: 17 }, { domain: 'com.microsoft', version: 1 }])
  })

  it('has the genai signature: no position_ids; past/present [batch, kv_heads, seq, head_dim]', () => {
    const names = (vs: { name: string }[]): string[] => vs.map((v) => v.name)
    const kv = (prefix: string): string[] => Array.from({ length: tiny.layers }, (_, i) => [`${prefix}.${i}.key`, `${prefix}.${i}.value`]).flat()
    expect(names(m.graph.input)).toEqual(['input_ids', 'attention_mask', ...kv('past_key_values')])
    expect(names(m.graph.output)).toEqual(['logits', ...kv('present')])
    const dims = (name: string): unknown => m.graph.input.find((v) => v.name === name)?.type.tensor_type.shape.dim
    expect(dims('attention_mask')).toEqual([{ dim_param: 'batch_size' }, { dim_param: 'total_sequence_length' }])
    expect(dims('past_key_values.0.key')).toEqual([{ dim_param: 'batch_size' }, { dim_value: tiny.kvHeads }, { dim_param: 'past_sequence_length' }, { dim_value: tiny.headDim }])
    expect(m.graph.input.find((v) => v.name === 'attention_mask')?.type.tensor_type.elem_type).toBe(7) // int64
  })

  it('attends with GroupQueryAttention, rotary fused (rotate-half), lengths from the mask', () => {
    const gqa = m.graph.node.filter((n) => n.op_type === 'GroupQueryAttention')
    expect(gqa).toHaveLength(tiny.layers)
    for (const [i, n] of gqa.entries()) {
      expect(n.domain).toBe('com.microsoft')
      const attr = Object.fromEntries((n.attribute ?? []).map((a) => [a.name, a.i ?? a.f ?? 0]))
      expect(attr).toEqual({ num_heads: tiny.heads, kv_num_heads: tiny.kvHeads, scale: 1 / Math.sqrt(tiny.headDim), softcap: 0, do_rotary: 1, rotary_interleaved: 0 })
      expect(n.input.slice(1, 5)).toEqual(['', '', `past_key_values.${i}.key`, `past_key_values.${i}.value`])
      expect(n.input.slice(7)).toEqual(['cos_cache', 'sin_cache'])
      expect(n.output.slice(1)).toEqual([`present.${i}.key`, `present.${i}.value`])
      expect(producer(n.input[0]).op_type).toBe('MatMul') // packed QKV
      expect(n.input[5]).toBe(gqa[0].input[5])
      expect(n.input[6]).toBe(gqa[0].input[6])
    }
    // seqlens_k = Cast<int32>(ReduceSum(attention_mask, axis 1) - 1)
    const seqlens = producer(gqa[0].input[5])
    expect(seqlens.op_type).toBe('Cast')
    expect(seqlens.attribute).toEqual([{ name: 'to', type: 2, i: 6 }])
    const sub = producer(seqlens.input[0])
    expect(sub.op_type).toBe('Sub')
    const sum = producer(sub.input[0])
    expect([sum.op_type, sum.input[0]]).toEqual(['ReduceSum', 'attention_mask'])
    // total_sequence_length = Cast<int32>(Shape(attention_mask)[1])
    const total = producer(gqa[0].input[6])
    expect([total.op_type, total.attribute?.[0].i]).toEqual(['Cast', 6])
    const gather = producer(total.input[0])
    expect(gather.op_type).toBe('Gather')
    expect([producer(gather.input[0]).op_type, producer(gather.input[0]).input[0]]).toEqual(['Shape', 'attention_mask'])
    const cos = m.graph.initializer.find((t) => t.name === 'cos_cache')
    expect(cos?.dims).toEqual([tiny.maxPositions, tiny.headDim / 2])
  })

  it('carries the plain form weights: q, k and v packed side by side, the rotary tables halved', async () => {
    const p = decodeModel(await readFile(join(plainDir, 'onnx/model.onnx')))
    const c = tiny.hiddenSize
    const qDim = tiny.heads * tiny.headDim
    const kvDim = tiny.kvHeads * tiny.headDim
    for (let i = 0; i < tiny.layers; i++) {
      const qkv = floats(m, `model.layers.${i}.attn.qkv_proj.MatMul.weight`)
      const [q, k, v] = ['q', 'k', 'v'].map((x) => floats(p, `model.layers.${i}.self_attn.${x}_proj.weight_T`))
      const unpacked = new Float32Array(qkv.length)
      for (let r = 0; r < c; r++) {
        const at = r * (qDim + 2 * kvDim)
        unpacked.set(q.subarray(r * qDim, (r + 1) * qDim), at)
        unpacked.set(k.subarray(r * kvDim, (r + 1) * kvDim), at + qDim)
        unpacked.set(v.subarray(r * kvDim, (r + 1) * kvDim), at + qDim + kvDim)
      }
      expect(same(qkv, unpacked), `layer ${i} qkv`).toBe(true)
      expect(same(floats(m, `model.layers.${i}.attn.o_proj.MatMul.weight`), floats(p, `model.layers.${i}.self_attn.o_proj.weight_T`))).toBe(true)
      for (const w of ['gate', 'up', 'down']) {
        expect(same(floats(m, `model.layers.${i}.mlp.${w}_proj.MatMul.weight`), floats(p, `model.layers.${i}.mlp.${w}_proj.weight_T`)), w).toBe(true)
      }
    }
    expect(same(floats(m, 'model.embed_tokens.weight'), floats(p, 'model.embed_tokens.weight'))).toBe(true)
    const half = tiny.headDim / 2
    for (const [ours, theirs] of [['cos_cache', 'model.rotary_emb.cos_cached'], ['sin_cache', 'model.rotary_emb.sin_cached']]) {
      const a = floats(m, ours)
      const b = floats(p, theirs)
      for (const pos of [0, 1, 17, tiny.maxPositions - 1]) expect(a.subarray(pos * half, (pos + 1) * half)).toEqual(b.subarray(pos * tiny.headDim, pos * tiny.headDim + half))
    }
  })
})

// Direct ONNX Runtime runs of both forms, batch 1: the prompt, then greedy decode steps feeding each present back.
const int64 = (values: number[], dims: number[]): ort.Tensor => new ort.Tensor('int64', BigInt64Array.from(values, (v) => BigInt(v)), dims)
const argmax = (a: Float32Array): number => a.reduce((best, v, i) => (v > a[best] ? i : best), 0)

async function greedy(session: ort.InferenceSession, plain: boolean, prompt: number[], steps: number): Promise<{ tokens: number[]; logits: Float32Array[] }> {
  let past: Record<string, ort.Tensor> = {}
  for (let i = 0; i < tiny.layers; i++) {
    for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [1, tiny.kvHeads, 0, tiny.headDim])
  }
  const tokens: number[] = []
  const logits: Float32Array[] = []
  let ids = prompt
  let done = 0
  for (let s = 0; s <= steps; s++) {
    const total = done + ids.length
    const feeds: Record<string, ort.Tensor> = { input_ids: int64(ids, [1, ids.length]), attention_mask: int64(Array(total).fill(1), [1, total]), ...past }
    if (plain) feeds.position_ids = int64(ids.map((_, j) => done + j), [1, ids.length])
    const out = await session.run(feeds)
    const all = out.logits.data as Float32Array
    const last = all.slice((ids.length - 1) * tiny.vocabSize, ids.length * tiny.vocabSize)
    logits.push(last)
    const next = argmax(last)
    tokens.push(next)
    past = {}
    for (let i = 0; i < tiny.layers; i++) {
      for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = out[`present.${i}.${kv}`]
    }
    done = total
    ids = [next]
  }
  return { tokens, logits }
}

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length)
  let d = 0
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]))
  return d
}

describe('numerics in ONNX Runtime', () => {
  let plain: ort.InferenceSession
  let gqa: ort.InferenceSession
  beforeAll(async () => {
    plain = await ort.InferenceSession.create(join(plainDir, 'onnx/model.onnx'))
    gqa = await ort.InferenceSession.create(join(gqaDir, 'model.onnx'))
  })
  afterAll(async () => {
    await plain.release()
    await gqa.release()
  })

  it('gives the plain form logits (<= 1e-4) and greedy tokens, for the prompt and 8 cached decode steps', async () => {
    const prompt = [5, 77, 300, 12, 9, 1024, 2000, 41, 3]
    const a = await greedy(plain, true, prompt, 8)
    const b = await greedy(gqa, false, prompt, 8)
    expect(b.tokens).toEqual(a.tokens)
    for (let s = 0; s < a.logits.length; s++) expect(maxAbsDiff(a.logits[s], b.logits[s])).toBeLessThanOrEqual(1e-4)
  })

  it('a right-padded batch gives each row its own logits', async () => {
    const rows = [[5, 77, 300, 12, 9], [1000, 3]]
    const width = 5
    const ids = rows.flatMap((r) => [...r, ...Array(width - r.length).fill(2)])
    const mask = rows.flatMap((r) => [...Array(r.length).fill(1), ...Array(width - r.length).fill(0)])
    const feeds: Record<string, ort.Tensor> = { input_ids: int64(ids, [2, width]), attention_mask: int64(mask, [2, width]) }
    for (let i = 0; i < tiny.layers; i++) {
      for (const kv of ['key', 'value']) feeds[`past_key_values.${i}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [2, tiny.kvHeads, 0, tiny.headDim])
    }
    const out = (await gqa.run(feeds)).logits.data as Float32Array
    for (const [r, row] of rows.entries()) {
      const alone = (await greedy(plain, true, row, 0)).logits[0]
      const at = (r * width + row.length - 1) * tiny.vocabSize
      expect(maxAbsDiff(out.slice(at, at + tiny.vocabSize), alone)).toBeLessThanOrEqual(1e-4)
    }
  })

  it('external data goes to model.onnx.data, as genai names it, and gives the same logits', async () => {
    const dir = join(root, 'external')
    await mkdir(dir, { recursive: true })
    await writeOnnx(join(dir, 'model.onnx'), gqaGraph(tiny), { seed: 0, externalData: true, producerVersion: 'test', dataFile: 'model.onnx.data' })
    expect(await listFiles(dir)).toEqual(['model.onnx', 'model.onnx.data'])
    const m = decodeModel(await readFile(join(dir, 'model.onnx')))
    const embed = m.graph.initializer.find((t) => t.name === 'model.embed_tokens.weight')
    expect(embed?.external_data?.find((e) => e.key === 'location')?.value).toBe('model.onnx.data')
    const s = await ort.InferenceSession.create(join(dir, 'model.onnx'))
    try {
      const prompt = [7, 8, 9, 10]
      const a = await greedy(gqa, false, prompt, 2)
      const b = await greedy(s, false, prompt, 2)
      expect(b.tokens).toEqual(a.tokens)
      for (let i = 0; i < a.logits.length; i++) expect(b.logits[i]).toEqual(a.logits[i])
    } finally {
      await s.release()
    }
  })
})

describe('determinism', () => {
  it('the same preset and seed give byte-identical files; another seed gives other weights', async () => {
    const again = (await buildModel({ preset: 'tiny', outDir: join(root, 'gqa-again'), seed: 0, attention: 'gqa' })).dir
    const files = await listFiles(gqaDir)
    expect(await listFiles(again)).toEqual(files)
    for (const f of files) expect(Buffer.compare(await readFile(join(again, f)), await readFile(join(gqaDir, f))), f).toBe(0)
    const other = (await buildModel({ preset: 'tiny', outDir: join(root, 'gqa-seed1'), seed: 1, attention: 'gqa' })).dir
    expect(Buffer.compare(await readFile(join(other, 'model.onnx')), await readFile(join(gqaDir, 'model.onnx')))).not.toBe(0)
  })

  it('rebuilding a directory in the other form leaves only that form', async () => {
    const dir = join(root, 'switch')
    await buildModel({ preset: 'tiny', outDir: dir, attention: 'plain' })
    await buildModel({ preset: 'tiny', outDir: dir })
    expect(await listFiles(dir)).toEqual(await listFiles(gqaDir))
    expect(existsSync(join(dir, 'onnx'))).toBe(false)
    expect(readBundle(dir).layout).toBe('genai')
    await buildModel({ preset: 'tiny', outDir: dir, attention: 'plain' })
    expect(await listFiles(dir)).toEqual(await listFiles(plainDir))
    expect(readBundle(dir).layout).toBe('hf')
  })
})

describe('engine', () => {
  let plainEngine: Engine
  let gqaEngine: Engine
  beforeAll(async () => {
    plainEngine = await Engine.load({ modelDir: plainDir })
    gqaEngine = await Engine.load({ modelDir: gqaDir })
  })
  afterAll(async () => {
    await plainEngine.close()
    await gqaEngine.close()
  })

  it('serves the gqa build with the plain build greedy tokens, alone and in a batch of unequal prompts', async () => {
    expect(gqaEngine.model.session.signature.kv.present).toBe('in-place')
    const prompts = ['Hello there, how are you?', 'A', 'The quick brown fox jumps over the lazy dog again and again']
    const req = { max_tokens: 12, temperature: 0, ignore_eos: true }
    const alone = await runRequest(plainEngine, { ...req, prompt: prompts[0] })
    const gqaAlone = await runRequest(gqaEngine, { ...req, prompt: prompts[0] })
    expect(gqaAlone.end.type).toBe('done')
    expect(gqaAlone.ids).toHaveLength(12)
    expect(gqaAlone.ids).toEqual(alone.ids)
    const a = await Promise.all(prompts.map((prompt) => runRequest(plainEngine, { ...req, prompt })))
    const b = await Promise.all(prompts.map((prompt) => runRequest(gqaEngine, { ...req, prompt })))
    expect(b.map((r) => r.ids)).toEqual(a.map((r) => r.ids))
    expect(b[0].ids).toEqual(alone.ids)
  })
})

describe('cli', () => {
  it('`onnxd model build tiny --attention gqa` writes the genai layout and says so', async () => {
    const out = join(root, 'cli-gqa')
    const lines: unknown[] = []
    const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => (lines.push(String(chunk)), true))
    try {
      expect(await run(['build', 'tiny', '--out', out, '--attention', 'gqa'])).toBe(0)
    } finally {
      spy.mockRestore()
    }
    expect(JSON.parse(lines[0] as string)).toMatchObject({ preset: 'tiny', attention: 'gqa', dir: out })
    expect(existsSync(join(out, 'genai_config.json'))).toBe(true)
    expect(Buffer.compare(await readFile(join(out, 'model.onnx')), await readFile(join(gqaDir, 'model.onnx')))).toBe(0)
  })

  it('refuses an unknown attention form with usage status 2', async () => {
    const spy = vi.spyOn(process.stderr, 'write').mockImplementation(() => true)
    try {
      expect(await run(['build', 'tiny', '--attention', 'mha', '--out', join(root, 'never')])).toBe(2)
    } finally {
      spy.mockRestore()
    }
    expect(existsSync(join(root, 'never'))).toBe(false)
  })
})
