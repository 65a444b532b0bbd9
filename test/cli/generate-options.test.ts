// `onnxd generate`'s --webgpu-options: the node's WebGPU provider options (model/runtime.ts WEBGPU_OPTIONS), refused
// in one line before any model loads when a key or value is not one onnxd passes on, or the provider is not webgpu.
import { describe, expect, it } from 'vitest'
import { run as generate } from '../../src/cli/generate.js'

describe('onnxd generate --webgpu-options', () => {
  it('refuses another provider, and a key or value onnxd does not pass on, naming it', async () => {
    await expect(generate(['--webgpu-options', 'validationMode=disabled', 'hi'])).rejects.toThrow('--webgpu-options applies to --provider webgpu; given provider cpu')
    await expect(generate(['--provider', 'webgpu', '--webgpu-options', 'validationMode=off,enableGraphCapture=1', 'hi'])).rejects.toThrow(
      "--webgpu-options: validationMode takes disabled, wgpuOnly, basic, full; given 'off'; 'enableGraphCapture' is not a WebGPU option onnxd passes on",
    )
  })
})
