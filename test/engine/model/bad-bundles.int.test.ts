// A bundle that cannot be served fails at load with a message naming the file and the problem.
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { loadModel } from '../../../src/engine/model/load.js'
import { fixture, haveFixtures } from '../../helpers/fixtures.js'

const STORIES = fixture('stories260K-hf')

/** A writable copy of stories260K-hf in a temp dir, to break one piece at a time. */
function storiesCopy(root: string): string {
  const dir = join(root, 'stories')
  mkdirSync(join(dir, 'onnx'), { recursive: true })
  for (const f of ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(STORIES, f), join(dir, f))
  copyFileSync(join(STORIES, 'onnx/model.onnx'), join(dir, 'onnx/model.onnx'))
  return dir
}

const editJson = (path: string, edit: (j: Record<string, unknown>) => void): void => {
  const j = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>
  edit(j)
  writeFileSync(path, JSON.stringify(j))
}

describe.skipIf(!haveFixtures)('bad bundles', () => {
  let root: string
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'onnxd-bad-'))
  })
  afterEach(() => rmSync(root, { recursive: true, force: true }))

  it('a missing directory', async () => {
    await expect(loadModel(join(root, 'nope'))).rejects.toThrow(/nope: model directory not found/)
  })

  it('an unknown layout', async () => {
    await expect(loadModel(root)).rejects.toThrow(/unknown model layout/)
  })

  it('a missing ONNX file', async () => {
    const dir = storiesCopy(root)
    rmSync(join(dir, 'onnx/model.onnx'))
    await expect(loadModel(dir)).rejects.toThrow(/onnx\/model\.onnx: file not found/)
  })

  it('a dtype whose variant is absent', async () => {
    await expect(loadModel(storiesCopy(root), { dtype: 'fp16' })).rejects.toThrow(/model_fp16\.onnx: file not found \(dtype fp16\)/)
  })

  it('a corrupt ONNX file', async () => {
    const dir = storiesCopy(root)
    writeFileSync(join(dir, 'onnx/model.onnx'), Buffer.from('this is not a protobuf'))
    await expect(loadModel(dir)).rejects.toThrow(/model\.onnx: cannot load ONNX model/)
  })

  it('a truncated ONNX file', async () => {
    const dir = storiesCopy(root)
    const bytes = readFileSync(join(dir, 'onnx/model.onnx'))
    writeFileSync(join(dir, 'onnx/model.onnx'), bytes.subarray(0, bytes.length >> 1))
    await expect(loadModel(dir)).rejects.toThrow(/model\.onnx: cannot load ONNX model/)
  })

  it('invalid JSON in config.json', async () => {
    const dir = storiesCopy(root)
    writeFileSync(join(dir, 'config.json'), '{ "model_type": ')
    await expect(loadModel(dir)).rejects.toThrow(/config\.json: invalid JSON/)
  })

  it('no EOS id anywhere', async () => {
    const dir = storiesCopy(root)
    editJson(join(dir, 'config.json'), (j) => delete j.eos_token_id)
    editJson(join(dir, 'generation_config.json'), (j) => delete j.eos_token_id)
    await expect(loadModel(dir)).rejects.toThrow(/config\.json: no eos_token_id/)
  })

  it('an EOS id outside the vocabulary', async () => {
    const dir = storiesCopy(root)
    editJson(join(dir, 'generation_config.json'), (j) => (j.eos_token_id = 9999))
    await expect(loadModel(dir)).rejects.toThrow(/eos_token_id 9999 is outside the model's vocabulary \(512\)/)
  })

  it('a tokenizer larger than the logits (tiny-random-gpt2-fp32 pairs a 50k GPT-2 tokenizer with 1000 logits)', async () => {
    await expect(loadModel(fixture('tiny-random-gpt2-fp32'))).rejects.toThrow(
      /tokenizer\.json: tokenizer vocabulary \(50295 ids\) is larger than the model's logits \(1000\)/,
    )
  })

  it('a graph that is not a decoder', async () => {
    const dir = storiesCopy(root)
    // A valid ONNX model with a single Identity node: loads, but has no input_ids.
    const { identityModel } = await import('../../helpers/onnx-identity.js')
    writeFileSync(join(dir, 'onnx/model.onnx'), identityModel())
    await expect(loadModel(dir)).rejects.toThrow(/not a decoder: no input_ids input/)
  })
})
