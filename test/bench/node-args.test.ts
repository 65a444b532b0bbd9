// The nodes `onnxd bench` starts: each target's own flags, and the unbatched reference as the baseline target's node
// with at most one sequence running, so that vs_unbatched measures batching and nothing else (it used to serve the
// fp32 weights on the default runtime whatever the baseline was).
import { describe, expect, it } from 'vitest'
import { nodeArgs } from '../../src/bench/run.js'
import type { TargetSpec } from '../../src/bench/options.js'

const int8: TargetSpec = { attention: 'gqa', runtime: 'capi', dtype: 'int8', prefixCaching: false, name: 'onnxd gqa/capi/int8/no-prefix-cache' }
const cfg = { provider: 'cpu' as const, nodeArgs: ['--intra-op-threads=2'] }

describe('onnxd bench: the nodes it starts', () => {
  it('a target serves its runtime, weights and prefix caching', () => {
    expect(nodeArgs(cfg, '/m', 9000, int8, false)).toEqual(['--model', '/m', '--port', '9000', '--host', '127.0.0.1', '--log-level', 'warn', '--runtime', 'capi', '--intra-op-threads=2', '--no-prefix-caching', '--dtype', 'int8'])
  })

  it('q4-as-int8 serves the q4 file with --nbits-as-int8', () => {
    const q4i8: TargetSpec = { ...int8, dtype: 'q4-as-int8', prefixCaching: true }
    expect(nodeArgs(cfg, '/m', 9000, q4i8, false).slice(-3)).toEqual(['--dtype', 'q4', '--nbits-as-int8'])
  })

  it('the unbatched reference is the same node with at most one sequence running', () => {
    const target = nodeArgs(cfg, '/m', 9001, int8, false)
    const unbatched = nodeArgs(cfg, '/m', 9001, int8, true)
    expect(unbatched).toEqual([...target, '--max-running', '1'])
  })

  it('names the provider off the CPU, and leaves fp32 weights and prefix caching at their defaults', () => {
    const fp32: TargetSpec = { ...int8, dtype: 'fp32', prefixCaching: true, runtime: 'js' }
    expect(nodeArgs({ provider: 'webgpu', nodeArgs: [] }, '/m', 1, fp32, true)).toEqual(['--model', '/m', '--port', '1', '--host', '127.0.0.1', '--log-level', 'warn', '--runtime', 'js', '--provider', 'webgpu', '--max-running', '1'])
  })
})
