// The embedded default model builder (tiny preset) in its plain form: bundle files, the BPE tokenizer, and the decoder
// graph's numerics in ONNX Runtime (cache equivalence, left padding, agreement with a real export), determinism, and the CLI.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import * as ort from 'onnxruntime-node'
import { Tokenizer } from '@huggingface/tokenizers'
import { Template } from '@huggingface/jinja'
import { existsSync } from 'node:fs'
import { mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { BUILDER_VERSION, PRESETS, buildModel, ensureDefaultModel, parameterCount, type Preset } from '../../src/builder/index.js'
import { llamaGraph } from '../../src/builder/graph.js'
import { writeOnnx } from '../../src/builder/write-onnx.js'
import { CORPUS } from '../../src/builder/corpus.js'
import { tokenizerConfig, tokenizerJsonText, trainByteLevelBpe } from '../../src/builder/tokenizer.js'
import { run } from '../../src/cli/model.js'
import { fixture, haveFixtures } from '../helpers/fixtures.js'
import { decodeModel, floats, listFiles, readJson } from './helpers.js'

const tiny: Preset = PRESETS.tiny
let root: string
let dir: string

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'onnxd-builder-'))
  dir = (await buildModel({ preset: 'tiny', outDir: join(root, 'tiny-0'), seed: 0, attention: 'plain' })).dir
})
afterAll(async () => {
  await rm(root, { recursive: true, force: true })
})

describe('bundle files', () => {
  it('writes the Hugging Face ONNX export layout with weights inline for tiny', async () => {
    expect(await listFiles(dir)).toEqual([
      'config.json',
      'generation_config.json',
      'onnx/model.onnx',
      'special_tokens_map.json',
      'tokenizer.json',
      'tokenizer_config.json',
    ])
  })

  it('config.json describes a LlamaForCausalLM of the preset', async () => {
    const c = await readJson(join(dir, 'config.json'))
    expect(c).toMatchObject({
      architectures: ['LlamaForCausalLM'],
      model_type: 'llama',
      hidden_size: tiny.hiddenSize,
      intermediate_size: tiny.intermediateSize,
      num_hidden_layers: tiny.layers,
      num_attention_heads: tiny.heads,
      num_key_value_heads: tiny.kvHeads,
      head_dim: tiny.headDim,
      vocab_size: tiny.vocabSize,
      max_position_embeddings: tiny.maxPositions,
      rms_norm_eps: tiny.rmsNormEps,
      rope_theta: tiny.ropeTheta,
      tie_word_embeddings: true,
      bos_token_id: 0,
      eos_token_id: 2,
      torch_dtype: 'float32',
    })
    expect(await readJson(join(dir, 'generation_config.json'))).toMatchObject({ bos_token_id: 0, eos_token_id: 2 })
  })

  it('counts parameters as the ONNX initializers hold them', async () => {
    const m = decodeModel(await readFile(join(dir, 'onnx/model.onnx')))
    const params = m.graph.initializer
      .filter((t) => /^(model\.|lm_head)/.test(t.name) && !t.name.startsWith('model.rotary_emb'))
      .reduce((n, t) => n + t.dims.reduce((a, b) => a * b, 1), 0)
    expect(params).toBe(parameterCount(tiny))
    for (const preset of Object.values(PRESETS)) {
      const specs = llamaGraph(preset).weights.filter((w) => w.parameter)
      expect(specs.reduce((n, w) => n + w.dims.reduce((a, b) => a * b, 1), 0)).toBe(parameterCount(preset))
    }
    // SmolLM2-135M's count, and the ~25M small preset.
    expect(parameterCount(PRESETS['135m'])).toBe(134_515_008)
    expect(parameterCount(PRESETS.small)).toBe(25_172_352)
  })

  it('uses opset 17 of the default domain only', async () => {
    const m = decodeModel(await readFile(join(dir, 'onnx/model.onnx')))
    expect(m.ir_version).toBe(8)
    expect(m.opset_import).toEqual([{ domain: '', version: 17 }])
    const domains = new Set(m.graph.node.map((n) => (n as { domain?: string }).domain ?? ''))
    expect([...domains]).toEqual([''])
  })
})

describe('tokenizer', () => {
  let tok: Tokenizer
  let config: Record<string, unknown>
  beforeAll(async () => {
    config = await readJson(join(dir, 'tokenizer_config.json'))
    tok = new Tokenizer(await readJson(join(dir, 'tokenizer.json')), config)
  })

  it('has exactly vocab_size ids: specials, 256 bytes and one token per merge', async () => {
    const json = (await readJson(join(dir, 'tokenizer.json'))) as { model: { vocab: Record<string, number>; merges: unknown[] } }
    const vocab = tok.get_vocab(true)
    expect(vocab.size).toBe(tiny.vocabSize)
    expect(new Set(vocab.values())).toEqual(new Set(Array.from({ length: tiny.vocabSize }, (_, i) => i)))
    expect(3 + 256 + json.model.merges.length).toBe(tiny.vocabSize)
    expect(Object.keys(json.model.vocab)).toHaveLength(tiny.vocabSize)
  })

  it('round-trips arbitrary text, multi-byte UTF-8 included', () => {
    const texts = [
      'Hello, world!',
      '  leading and trailing spaces  ',
      'tabs\tand\nnew lines\r\n\n',
      'Café déjà vu, naïve façade, Ångström, Łódź',
      '日本語のテキスト、中文文本와 한국어',
      'emoji 🙂👍🏽 and a family 👨‍👩‍👧 ✨',
      "it's, we're, they'll; 3.14159 $4.99 100% #tag @user {x: [1, 2]}",
      '\u0000\u0001 control \u007f bytes \uFFFD',
      CORPUS.slice(0, 2000),
    ]
    for (const text of texts) {
      const { ids } = tok.encode(text)
      expect(ids.every((id: number) => id >= 0 && id < tiny.vocabSize)).toBe(true)
      expect(tok.decode(ids)).toBe(text)
    }
  })

  it('merges English into word tokens', () => {
    expect(tok.tokenize('The morning was cold and clear.')).toEqual(['The', 'Ġmorning', 'Ġwas', 'Ġcold', 'Ġand', 'Ġclear', '.'])
  })

  it('encodes special tokens to their ids', () => {
    expect(tok.encode('<|endoftext|>').ids).toEqual([0])
    const ids = tok.encode('<|im_start|>user\nhi<|im_end|>').ids
    expect(ids[0]).toBe(1)
    expect(ids[ids.length - 1]).toBe(2)
    expect(tok.token_to_id('<|im_end|>')).toBe(2)
    expect(config).toMatchObject({ bos_token: '<|endoftext|>', eos_token: '<|im_end|>', pad_token: '<|endoftext|>', model_max_length: tiny.maxPositions })
  })

  it('fills a vocabulary larger than the corpus supports with synthetic merges, each a new token', () => {
    const bpe = trainByteLevelBpe(6000)
    expect(bpe.learned).toBeGreaterThan(1000)
    expect(bpe.merges.length - bpe.learned).toBeGreaterThan(1000)
    expect(new Set(bpe.tokens).size).toBe(6000)
    expect(3 + 256 + bpe.merges.length).toBe(6000)
    const big = new Tokenizer(JSON.parse(tokenizerJsonText(bpe)) as object, tokenizerConfig(6000, 2048))
    expect(big.get_vocab(true).size).toBe(6000)
    for (const text of ['aardvarks quaff zesty kiwis 🙂', CORPUS.slice(3000, 4000), 'Ünïcödé façade naïve 中文']) {
      expect(big.decode(big.encode(text).ids)).toBe(text)
    }
  })

  it('renders the ChatML chat template', () => {
    const template = new Template(config.chat_template as string)
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi!' },
    ]
    const prompt = template.render({ messages, add_generation_prompt: true })
    expect(prompt).toBe('<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n')
    expect(template.render({ messages, add_generation_prompt: false })).toBe('<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n')
    expect(tok.decode(tok.encode(prompt).ids)).toBe(prompt)
  })
})

/** Runs the decoder: `ids` and `positions` [rows][seq], `mask` [rows][past + seq], `past` from an earlier call. */
async function forward(
  s: ort.InferenceSession,
  p: Preset,
  ids: number[][],
  mask: number[][],
  positions: number[][],
  past?: Record<string, ort.Tensor>,
): Promise<{ logits: Float32Array; present: Record<string, ort.Tensor> }> {
  const rows = ids.length
  const seq = (ids[0] as number[]).length
  const int64 = (m: number[][]): ort.Tensor =>
    new ort.Tensor('int64', BigInt64Array.from(m.flat(), (v) => BigInt(v)), [m.length, (m[0] as number[]).length])
  const feeds: Record<string, ort.Tensor> = { input_ids: int64(ids), attention_mask: int64(mask), position_ids: int64(positions) }
  for (let i = 0; i < p.layers; i++) {
    for (const kv of ['key', 'value']) {
      feeds[`past_key_values.${i}.${kv}`] = past?.[`present.${i}.${kv}`] ?? new ort.Tensor('float32', new Float32Array(0), [rows, p.kvHeads, 0, p.headDim])
    }
  }
  const out = await s.run(feeds)
  const present: Record<string, ort.Tensor> = {}
  for (const [name, t] of Object.entries(out)) if (name.startsWith('present.')) present[name] = t
  expect(out.logits?.dims).toEqual([rows, seq, p.vocabSize])
  return { logits: out.logits?.data as Float32Array, present }
}

/** Logits of row `row`, position `pos` out of a [rows, seq, vocab] block. */
const at = (logits: Float32Array, V: number, seq: number, row: number, pos: number): Float32Array =>
  logits.subarray((row * seq + pos) * V, (row * seq + pos + 1) * V)

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length)
  let d = 0
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs((a[i] as number) - (b[i] as number)))
  return d
}

const ones = (n: number): number[] => new Array<number>(n).fill(1)
const range = (a: number, b: number): number[] => Array.from({ length: b - a }, (_, i) => a + i)

describe('decoder graph in ONNX Runtime', () => {
  let s: ort.InferenceSession
  const V = tiny.vocabSize
  const prompt = [1, 520, 33, 1400, 7, 90, 2000, 64, 300, 12]
  beforeAll(async () => {
    s = await ort.InferenceSession.create(join(dir, 'onnx/model.onnx'))
  })
  afterAll(async () => {
    await s?.release()
  })

  it('has the signature of optimum / transformers.js exports', () => {
    const meta = (names: readonly ort.InferenceSession.ValueMetadata[]): [string, unknown][] =>
      names.map((m) => [m.name, m.isTensor ? m.shape : null])
    const kv = (prefix: string, len: string): [string, unknown][] =>
      range(0, tiny.layers).flatMap((i) => ['key', 'value'].map((k): [string, unknown] => [`${prefix}.${i}.${k}`, ['batch_size', tiny.kvHeads, len, tiny.headDim]]))
    expect(meta(s.inputMetadata)).toEqual([
      ['input_ids', ['batch_size', 'sequence_length']],
      ['attention_mask', ['batch_size', 'total_sequence_length']],
      ['position_ids', ['batch_size', 'sequence_length']],
      ...kv('past_key_values', 'past_sequence_length'),
    ])
    expect(meta(s.outputMetadata)).toEqual([['logits', ['batch_size', 'sequence_length', V]], ...kv('present', 'total_sequence_length')])
  })

  it('decoding step by step through the KV cache gives the logits of one full forward pass', async () => {
    const n = prompt.length
    const full = await forward(s, tiny, [prompt], [ones(n)], [range(0, n)])
    expect(full.present['present.0.key']?.dims).toEqual([1, tiny.kvHeads, n, tiny.headDim])
    let past: Record<string, ort.Tensor> | undefined
    let worst = 0
    for (let t = 0; t < n; t++) {
      const step = await forward(s, tiny, [[prompt[t] as number]], [ones(t + 1)], [[t]], past)
      past = step.present
      worst = Math.max(worst, maxAbsDiff(step.logits, at(full.logits, V, n, 0, t)))
    }
    expect(worst).toBeLessThanOrEqual(1e-4)
    // A multi-token chunk on top of a cache (chunked prefill) is causal within the chunk too.
    const head = await forward(s, tiny, [prompt.slice(0, 4)], [ones(4)], [range(0, 4)])
    const tail = await forward(s, tiny, [prompt.slice(4)], [ones(n)], [range(4, n)], head.present)
    for (let t = 4; t < n; t++) expect(maxAbsDiff(at(tail.logits, V, n - 4, 0, t - 4), at(full.logits, V, n, 0, t))).toBeLessThanOrEqual(1e-4)
  })

  it('a left-padded batch gives each row the logits it gets alone, in prefill and decode', async () => {
    const a = prompt.slice(0, 7)
    const b = [5, 800, 41, 1999]
    const pad = a.length - b.length
    const aloneA = await forward(s, tiny, [a], [ones(a.length)], [range(0, a.length)])
    const aloneB = await forward(s, tiny, [b], [ones(b.length)], [range(0, b.length)])
    // Padded slots: pad token 0, mask 0, position 1 (HF: cumsum(mask) - 1, masked_fill(mask == 0, 1)).
    const maskB = [...new Array<number>(pad).fill(0), ...ones(b.length)]
    const batch = await forward(
      s,
      tiny,
      [a, [...new Array<number>(pad).fill(0), ...b]],
      [ones(a.length), maskB],
      [range(0, a.length), [...new Array<number>(pad).fill(1), ...range(0, b.length)]],
    )
    const last = a.length - 1
    expect(maxAbsDiff(at(batch.logits, V, a.length, 0, last), at(aloneA.logits, V, a.length, 0, last))).toBeLessThanOrEqual(1e-4)
    expect(maxAbsDiff(at(batch.logits, V, a.length, 1, last), at(aloneB.logits, V, b.length, 0, b.length - 1))).toBeLessThanOrEqual(1e-4)

    // One decode step for both rows on the batched cache.
    const next = [77, 1234]
    const stepBatch = await forward(s, tiny, [[next[0] as number], [next[1] as number]], [ones(a.length + 1), [...maskB, 1]], [[a.length], [b.length]], batch.present)
    const stepA = await forward(s, tiny, [[next[0] as number]], [ones(a.length + 1)], [[a.length]], aloneA.present)
    const stepB = await forward(s, tiny, [[next[1] as number]], [ones(b.length + 1)], [[b.length]], aloneB.present)
    expect(maxAbsDiff(at(stepBatch.logits, V, 1, 0, 0), stepA.logits)).toBeLessThanOrEqual(1e-4)
    expect(maxAbsDiff(at(stepBatch.logits, V, 1, 1, 0), stepB.logits)).toBeLessThanOrEqual(1e-4)

    // Control: attending to the pad slots changes row B well beyond the tolerance, so the checks above have teeth.
    const unmasked = await forward(s, tiny, [[...new Array<number>(pad).fill(0), ...b]], [ones(a.length)], [range(0, a.length)])
    expect(maxAbsDiff(at(unmasked.logits, V, a.length, 0, last), at(aloneB.logits, V, b.length, 0, b.length - 1))).toBeGreaterThan(1e-3)
  })

  it.skipIf(!haveFixtures)('computes what a real Llama export computes (stories260K weights in the builder graph)', async () => {
    const refPath = join(fixture('stories260K-hf'), 'onnx/model.onnx')
    const ref = decodeModel(await readFile(refPath))
    const shape: Preset = {
      ...tiny,
      hiddenSize: 64,
      intermediateSize: 172,
      layers: 5,
      heads: 8,
      kvHeads: 4,
      headDim: 8,
      vocabSize: 512,
      maxPositions: 512,
      ropeTheta: 10000,
      tieEmbeddings: true,
    }
    const graph = llamaGraph(shape)
    graph.weights = graph.weights.map((w) =>
      w.name.startsWith('model.rotary_emb') ? w : { ...w, init: { kind: 'values', make: () => floats(ref, w.name) } },
    )
    const path = join(root, 'stories260K-rebuilt.onnx')
    await writeOnnx(path, graph, { seed: 0, externalData: false, producerVersion: 'test' })
    const [mine, theirs] = await Promise.all([ort.InferenceSession.create(path), ort.InferenceSession.create(refPath)])
    try {
      const ids = [1, 403, 407, 261, 378, 395, 289, 263, 346, 435, 500, 3]
      const a = await forward(mine, shape, [ids], [ones(ids.length)], [range(0, ids.length)])
      const b = await forward(theirs, shape, [ids], [ones(ids.length)], [range(0, ids.length)])
      expect(maxAbsDiff(a.logits, b.logits)).toBeLessThanOrEqual(1e-4)
      expect(maxAbsDiff(a.present['present.4.key']?.data as Float32Array, b.present['present.4.key']?.data as Float32Array)).toBeLessThanOrEqual(1e-4)
    } finally {
      await Promise.all([mine.release(), theirs.release()])
    }
  })
})

describe('determinism', () => {
  it('the same preset and seed give byte-identical files; another seed gives other weights', async () => {
    const again = (await buildModel({ preset: 'tiny', outDir: join(root, 'tiny-0-again'), seed: 0, attention: 'plain' })).dir
    const files = await listFiles(dir)
    expect(await listFiles(again)).toEqual(files)
    for (const f of files) expect(Buffer.compare(await readFile(join(dir, f)), await readFile(join(again, f))), f).toBe(0)

    const other = (await buildModel({ preset: 'tiny', outDir: join(root, 'tiny-1'), seed: 1, attention: 'plain' })).dir
    expect(await readFile(join(other, 'tokenizer.json'), 'utf8')).toBe(await readFile(join(dir, 'tokenizer.json'), 'utf8'))
    const m0 = decodeModel(await readFile(join(dir, 'onnx/model.onnx')))
    const m1 = decodeModel(await readFile(join(other, 'onnx/model.onnx')))
    for (const name of ['model.embed_tokens.weight', 'model.layers.0.self_attn.q_proj.weight_T', 'model.layers.3.mlp.down_proj.weight_T']) {
      expect(maxAbsDiff(floats(m0, name), floats(m1, name)), name).toBeGreaterThan(0.01)
    }
    // Norms start at one and the RoPE tables are not random.
    expect(floats(m1, 'model.norm.weight')).toEqual(floats(m0, 'model.norm.weight'))
    expect(floats(m1, 'model.rotary_emb.cos_cached')).toEqual(floats(m0, 'model.rotary_emb.cos_cached'))
  })

  it('weights look like a normal init with std initializer_range', async () => {
    const w = floats(decodeModel(await readFile(join(dir, 'onnx/model.onnx'))), 'model.embed_tokens.weight')
    let sum = 0
    let sq = 0
    for (const v of w) {
      sum += v
      sq += v * v
    }
    expect(Math.abs(sum / w.length)).toBeLessThan(1e-3)
    expect(Math.sqrt(sq / w.length)).toBeCloseTo(tiny.initStd, 3)
  })
})

describe('ensureDefaultModel', () => {
  it('builds the GroupQueryAttention form once, atomically, and leaves an existing bundle alone', async () => {
    const parent = join(root, 'models')
    const target = join(parent, 'onnxd-tiny-gqa')
    const [a, b] = await Promise.all([ensureDefaultModel(target), ensureDefaultModel(target)])
    expect(a).toBe(target)
    expect(b).toBe(target)
    // The genai layout, with the record of which builder made it beside genai_config.json.
    expect(existsSync(join(target, 'genai_config.json'))).toBe(true)
    expect(existsSync(join(target, 'config.json'))).toBe(false)
    expect(await readJson(join(target, 'onnxd_builder.json'))).toEqual({ version: BUILDER_VERSION, preset: 'tiny', seed: 0, attention: 'gqa' })
    expect(await readdir(parent)).toEqual(['onnxd-tiny-gqa']) // no temporary directories left behind
    const before = (await stat(join(target, 'model.onnx'))).mtimeMs
    expect(await ensureDefaultModel(target)).toBe(target)
    expect((await stat(join(target, 'model.onnx'))).mtimeMs).toBe(before)
  })

  it('builds the plain form when asked, and never takes a bundle of one form for the other', async () => {
    const target = join(root, 'models-forms', 'onnxd-tiny')
    expect(await ensureDefaultModel(target, 'tiny', 'plain')).toBe(target)
    expect(existsSync(join(target, 'onnx/model.onnx'))).toBe(true)
    expect(existsSync(join(target, 'genai_config.json'))).toBe(false)
    const plainBefore = (await stat(join(target, 'onnx/model.onnx'))).mtimeMs
    expect(await ensureDefaultModel(target, 'tiny', 'plain')).toBe(target)
    expect((await stat(join(target, 'onnx/model.onnx'))).mtimeMs).toBe(plainBefore)
    // A plain bundle this builder made (the default before) is not the GroupQueryAttention default: rebuilt in it.
    expect(await ensureDefaultModel(target)).toBe(target)
    expect(existsSync(join(target, 'genai_config.json'))).toBe(true)
    expect(existsSync(join(target, 'onnx'))).toBe(false)
    expect(await ensureDefaultModel(target, 'tiny', 'plain')).toBe(target)
    expect(existsSync(join(target, 'config.json'))).toBe(true)
    expect(existsSync(join(target, 'genai_config.json'))).toBe(false)
  })

  it('serves a bundle it did not build as it is, in either layout', async () => {
    const theirs = join(root, 'their-genai')
    await mkdir(theirs)
    await writeFile(join(theirs, 'genai_config.json'), '{}')
    expect(await ensureDefaultModel(theirs)).toBe(theirs)
    expect(await readdir(theirs)).toEqual(['genai_config.json'])
    const export_ = join(root, 'their-export')
    await mkdir(export_)
    await writeFile(join(export_, 'config.json'), '{"model_type": "llama"}')
    expect(await ensureDefaultModel(export_)).toBe(export_)
    expect(await readdir(export_)).toEqual(['config.json'])
  })

  it('never builds over a directory that holds something else', async () => {
    const other = join(root, 'not-a-bundle')
    await mkdir(other)
    await writeFile(join(other, 'notes.txt'), 'mine')
    await expect(ensureDefaultModel(other)).rejects.toMatchObject({ code: 'bad_bundle' })
    expect(await readdir(other)).toEqual(['notes.txt'])
  })

  it('refuses an unknown preset', async () => {
    await expect(ensureDefaultModel(join(root, 'nope'), 'huge')).rejects.toMatchObject({ code: 'config' })
    expect(existsSync(join(root, 'nope'))).toBe(false)
  })
})

describe('onnxd model build', () => {
  it('builds a preset in the GroupQueryAttention form unless told otherwise, and prints a one-line JSON summary', async () => {
    const out = join(root, 'cli-tiny')
    const lines: string[] = []
    const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
      lines.push(String(chunk))
      return true
    })
    try {
      expect(await run(['build', 'tiny', '--out', out, '--seed', '7'])).toBe(0)
    } finally {
      spy.mockRestore()
    }
    expect(lines).toHaveLength(1)
    const summary = JSON.parse(lines[0] as string) as Record<string, unknown>
    expect(summary).toMatchObject({ preset: 'tiny', attention: 'gqa', dir: out, parameters: parameterCount(tiny) })
    expect(existsSync(join(out, 'genai_config.json'))).toBe(true)
    const files = await listFiles(out)
    let bytes = 0
    for (const f of files) bytes += (await stat(join(out, f))).size
    expect(summary.bytes).toBe(bytes)
    expect(typeof summary.seconds).toBe('number')
  })

  it('rejects bad usage with exit code 2', async () => {
    const spy = vi.spyOn(process.stderr, 'write').mockImplementation(() => true)
    try {
      expect(await run([])).toBe(2)
      expect(await run(['build'])).toBe(2)
      expect(await run(['build', 'tiny', '--seed', '-1'])).toBe(2)
      expect(await run(['build', 'tiny', '--bogus'])).toBe(2)
    } finally {
      spy.mockRestore()
    }
  })
})
