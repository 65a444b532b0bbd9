// The node's `runtime` option: 'auto' by default (defaultRuntime: capi on CPU, js on GPU providers), 'js' or 'capi' from ONNXD_RUNTIME or --runtime (the flag wins), anything
// else refused naming the variable; toPoolOptions hands it to the pool.
import { describe, expect, it } from 'vitest'
import { isOnnxdError } from '../../src/shared/errors.js'
import { defaultRuntime, intendedRuntime } from '../../src/engine/model/runtime.js'
import { loadNodeOptions, NODE_FLAGS, nodeFlags, toPoolOptions } from '../../src/node/options.js'

const sys = { totalMemBytes: 8 * 1024 ** 3 }

describe('node option runtime', () => {
  it("is 'auto' by default, and reaches the pool options", () => {
    const o = loadNodeOptions({}, {}, {}, sys)
    expect(o.runtime).toBe('auto')
    expect(toPoolOptions(o).runtime).toBe('auto')
  })

  it("'auto' means the C API on cpu and webgpu and the JS API on cuda and tensorrt", () => {
    expect(intendedRuntime('auto', 'cpu')).toBe('capi')
    expect(intendedRuntime('auto', 'cuda')).toBe('js')
    expect(intendedRuntime('capi', 'tensorrt')).toBe('js')
    expect(intendedRuntime('js', 'cpu')).toBe('js')
    // No choice is 'auto': the pool, Engine.load and a session without a runtime run the production default.
    expect(intendedRuntime(undefined, 'cpu')).toBe('capi')
    expect(intendedRuntime(undefined, 'cuda')).toBe('js')
    expect(defaultRuntime('cpu')).toBe('capi')
    expect(defaultRuntime('webgpu')).toBe('capi')
    expect(intendedRuntime('capi', 'webgpu')).toBe('capi')
    expect(intendedRuntime('js', 'webgpu')).toBe('js')
  })

  it("takes 'capi' from ONNXD_RUNTIME, the --runtime flag winning", () => {
    expect(NODE_FLAGS.runtime).toBe('runtime')
    expect(toPoolOptions(loadNodeOptions({ ONNXD_RUNTIME: 'capi' }, {}, {}, sys)).runtime).toBe('capi')
    expect(loadNodeOptions({ ONNXD_RUNTIME: 'capi' }, nodeFlags({ runtime: 'js' }), {}, sys).runtime).toBe('js')
    expect(loadNodeOptions({}, {}, { runtime: 'capi' }, sys).runtime).toBe('capi')
  })

  it('refuses another value, naming the variable', () => {
    let err: unknown
    try {
      loadNodeOptions({ ONNXD_RUNTIME: 'wasm' }, {}, {}, sys)
    } catch (e) {
      err = e
    }
    expect(isOnnxdError(err) && err.code === 'config').toBe(true)
    expect((err as Error).message).toContain('ONNXD_RUNTIME')
  })
})
