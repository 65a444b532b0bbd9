// WebGPU provider options passed on to ORT (issue #33; model/runtime.ts WEBGPU_OPTIONS, the node's --webgpu-options):
// the C-API runtime appends the WebGPU provider with them, to the step session and its small device graphs, and serves
// the CPU's tokens; where they would not reach ORT (the JS runtime, which passes on only a few, or a C API that cannot
// load), loading is refused, saying why. Lavapipe stands in for a GPU (.ci/lavapipe); skipped, saying why, without
// an adapter.
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { Engine } from '../../src/engine/engine.js'
import { OrtCApi } from '../../src/engine/model/ort-capi.js'
import { tinyGqaModelDir, tinyPlainModelDir } from '../helpers/fixtures.js'
import { runRequest } from '../helpers/engine-run.js'
import { noWebgpu, webgpuTitle } from '../helpers/webgpu.js'

const SLOW = { timeout: 300_000 }
const OPTIONS = { validationMode: 'disabled', storageBufferCacheMode: 'bucket' }

describe.skipIf(noWebgpu !== null)(webgpuTitle('WebGPU provider options (runtime capi)'), () => {
  afterEach(() => {
    vi.restoreAllMocks()
  })

  for (const [form, dir] of [['GroupQueryAttention', tinyGqaModelDir], ['plain', tinyPlainModelDir]] as const) {
    it(`reach ORT with the provider, for the step and its device graphs, and serve the CPU's tokens (${form})`, SLOW, async () => {
      const created = vi.spyOn(OrtCApi.prototype, 'createSession')
      const cpu = await Engine.load({ modelDir: dir() })
      const gpu = await Engine.load({ modelDir: dir(), provider: 'webgpu', webgpuOptions: OPTIONS })
      try {
        const eps = created.mock.calls.map((c) => c[1]?.ep).filter((ep) => ep !== undefined)
        // The step session, the row-copy graph, and on a plain graph the append graph.
        expect(eps.length).toBe(form === 'plain' ? 3 : 2)
        for (const ep of eps) expect(ep).toEqual({ name: 'WebGPU', options: OPTIONS })
        const req = { input_ids: [3, 14, 15, 9, 2, 6], max_tokens: 12, temperature: 0, ignore_eos: true }
        expect((await runRequest(gpu, req)).ids).toEqual((await runRequest(cpu, req)).ids)
      } finally {
        await cpu.close()
        await gpu.close()
      }
    })
  }

  it("stops start-up where ORT's C API cannot load, rather than running the JS API without them", SLOW, async () => {
    await expect(Engine.load({ modelDir: tinyGqaModelDir(), provider: 'webgpu', webgpuOptions: OPTIONS, capiLibraryPath: join(tmpdir(), 'no-libonnxruntime.so') })).rejects.toThrow(
      "--webgpu-options needs ORT's C API, which cannot load here",
    )
  })

  it('is refused, saying why, on the JS runtime, which would not pass them on', SLOW, async () => {
    await expect(Engine.load({ modelDir: tinyGqaModelDir(), provider: 'webgpu', runtime: 'js', webgpuOptions: OPTIONS })).rejects.toThrow(
      /--webgpu-options cannot apply to runtime js: only the C-API runtime/,
    )
  })
})
