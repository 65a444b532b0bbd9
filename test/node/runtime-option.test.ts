// The node's `runtime` option: 'js' by default, 'capi' from ONNXD_RUNTIME or --runtime (the flag wins), anything
// else refused naming the variable; toPoolOptions hands it to the pool.
import { describe, expect, it } from 'vitest'
import { isOnnxdError } from '../../src/shared/errors.js'
import { loadNodeOptions, NODE_FLAGS, nodeFlags, toPoolOptions } from '../../src/node/options.js'

const sys = { totalMemBytes: 8 * 1024 ** 3 }

describe('node option runtime', () => {
  it("is 'js' by default, and reaches the pool options", () => {
    const o = loadNodeOptions({}, {}, {}, sys)
    expect(o.runtime).toBe('js')
    expect(toPoolOptions(o).runtime).toBe('js')
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
