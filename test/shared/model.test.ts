// How models are named (src/shared/model.ts): the served id's default and the one unknown-model check.
import { describe, expect, it } from 'vitest'
import { resolve } from 'node:path'
import { checkModel, DEFAULT_MODEL_DIR, modelIdFor } from '../../src/shared/model.js'

describe('model naming', () => {
  it('serves a bundle under its configured id, else its folder name', () => {
    expect(modelIdFor('/srv/models/SmolLM2-135M/')).toBe('SmolLM2-135M')
    expect(modelIdFor('/srv/models/SmolLM2-135M', 'smollm2')).toBe('smollm2')
    expect(modelIdFor('.')).toBe(modelIdFor(process.cwd()))
  })

  it('serves the embedded default under its model name, whichever graph form its folder holds', () => {
    expect(DEFAULT_MODEL_DIR).toBe('models/onnxd-tiny-gqa')
    expect(modelIdFor(DEFAULT_MODEL_DIR)).toBe('onnxd-tiny')
    expect(modelIdFor(resolve(DEFAULT_MODEL_DIR))).toBe('onnxd-tiny')
    expect(modelIdFor(DEFAULT_MODEL_DIR, 'mine')).toBe('mine')
    // A bundle elsewhere is named by its folder, even one of the same name.
    expect(modelIdFor('/srv/models/onnxd-tiny-gqa')).toBe('onnxd-tiny-gqa')
  })

  it('refuses a request for another model with a bounded 422', () => {
    expect(() => checkModel('onnxd-tiny', 'onnxd-tiny')).not.toThrow()
    expect(() => checkModel('gpt-4', 'onnxd-tiny')).toThrow(expect.objectContaining({ code: 'invalid_value', message: "The model 'gpt-4' does not exist on this node. Available: onnxd-tiny" }))
    expect(() => checkModel('m'.repeat(10_000), 'onnxd-tiny')).toThrow(expect.objectContaining({ message: expect.stringMatching(/^.{0,120}$/) }))
  })
})
