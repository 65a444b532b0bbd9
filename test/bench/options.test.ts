import { describe, expect, it } from 'vitest'
import { DEFAULT_TARGETS, benchConfig, describeConfig, redactArgv, requestsFor } from '../../src/bench/options.js'

describe('benchConfig', () => {
  it("defaults to the issue's standard run", () => {
    const c = benchConfig([])
    expect(c.target).toEqual({ kind: 'spawn', model: null, preset: '135m' })
    expect(c.concurrency).toEqual([1, 4, 16, 64])
    expect(c.requestRate).toBe(Infinity)
    expect(c).toMatchObject({ promptLen: { kind: 'fixed', value: 128 }, outputLen: { kind: 'fixed', value: 128 }, ignoreEos: true, temperature: 0, seed: 0 })
    expect(c.references).toEqual({ ceiling: true, matmul: true, unbatched: true, peer: true })
    expect([1, 4, 16, 64].map((n) => requestsFor(c, n))).toEqual([4, 8, 32, 128])
    expect(Object.isFrozen(c)).toBe(true)
  })

  it('makes --smoke a small run on the tiny preset', () => {
    const c = benchConfig(['--smoke'])
    expect(c.target).toMatchObject({ kind: 'spawn', preset: 'tiny' })
    expect(c.concurrency).toEqual([1, 4, 16])
    expect(c.refDurationS).toBeLessThan(10)
  })

  it('reads loads, lengths and targets', () => {
    const c = benchConfig(['--url', 'http://n:1/', '--model', 'm', '--concurrency', '2,8', '--request-rate', '3.5', '--num-requests', '10', '--prompt-len', '10:20', '--no-peer'])
    expect(c.target).toMatchObject({ kind: 'node', url: 'http://n:1' })
    expect(c).toMatchObject({ concurrency: [2, 8], requestRate: 3.5, promptLen: { kind: 'uniform', min: 10, max: 20 } })
    expect(requestsFor(c, 8)).toBe(10)
    // Only a node the bench starts itself can be restarted unbatched.
    expect(c.references).toMatchObject({ unbatched: false, peer: false })
  })

  it('lists every bad option at once, naming the flag', () => {
    expect(() => benchConfig(['--concurrency', '0,x', '--request-rate=-1', '--facade', 'http://f'])).toThrow(
      /--facade needs --api-key[\s\S]*--concurrency must be .*Given: 0,x[\s\S]*--request-rate must be a positive number or inf/,
    )
    expect(() => benchConfig(['--bogus'])).toThrow(/Unknown option '--bogus'/)
  })

  it('never writes the API key into the report', () => {
    const argv = ['--facade', 'http://f', '--api-key', 'sk-svc-secret']
    const d = describeConfig(benchConfig(argv))
    expect(JSON.stringify(d)).not.toContain('sk-svc-secret')
    expect(redactArgv(['--api-key=sk-1', '-q'])).toEqual(['--api-key=[redacted]', '-q'])
  })

  it('starts one target by default, the DEFAULT_TARGETS constant, and a target per form x runtime when asked', () => {
    const c = benchConfig([])
    expect(c.targets.map((t) => t.name)).toEqual(DEFAULT_TARGETS.standard.attention.flatMap((a) => DEFAULT_TARGETS.standard.runtime.map((r) => `onnxd ${a}/${r}`)))
    expect(c.baseline).toBeNull()
    const m = benchConfig(['--attention', 'plain,gqa', '--runtime', 'js,capi'])
    expect(m.targets.map((t) => t.name)).toEqual(['onnxd plain/js', 'onnxd plain/capi', 'onnxd gqa/js', 'onnxd gqa/capi'])
    // The standard target and baseline are the production default: the builder's default form (GroupQueryAttention)
    // on the node's runtime on CPU.
    expect(DEFAULT_TARGETS.standard).toMatchObject({ attention: ['gqa'], runtime: ['capi'], baseline: 'gqa/capi' })
    expect(c.targets.map((t) => t.name)).toEqual(['onnxd gqa/capi'])
    expect(m.baseline).toBe('onnxd gqa/capi')
    expect(benchConfig(['--attention', 'gqa', '--runtime', 'js,capi', '--baseline', 'gqa/js']).baseline).toBe('onnxd gqa/js')
    // A default baseline that is not among the targets: the first target.
    expect(benchConfig(['--attention', 'plain', '--runtime', 'capi,js']).baseline).toBe('onnxd plain/capi')
  })

  it('makes --scenario long the long-prompt run: one wave per level, capped, gqa js vs capi, no one-at-a-time references', () => {
    const c = benchConfig(['--scenario', 'long'])
    expect(c).toMatchObject({ scenario: 'long', promptLen: { kind: 'fixed', value: 1024 }, outputLen: { kind: 'fixed', value: 256 }, concurrency: [1, 16, 64], durationS: 240, wave: true })
    expect(c.targets.map((t) => t.name)).toEqual(['onnxd gqa/js', 'onnxd gqa/capi'])
    expect(c.baseline).toBe('onnxd gqa/js')
    expect([1, 16, 64].map((n) => requestsFor(c, n))).toEqual([1, 16, 64])
    expect(c.references).toEqual({ ceiling: true, matmul: false, unbatched: false, peer: false })
    expect(describeConfig(c)).toMatchObject({ scenario: 'long', targets: ['onnxd gqa/js', 'onnxd gqa/capi'], num_requests: 'concurrency (one wave)' })
    expect(benchConfig(['--scenario', 'long', '--duration', '60', '--attention', 'plain,gqa', '--runtime', 'js']).durationS).toBe(60)
  })

  it('makes --scenario chat the shared-system-prompt run: the same 1000 tokens before each prompt, prefix caching on against off', () => {
    const c = benchConfig(['--scenario', 'chat'])
    expect(c).toMatchObject({ scenario: 'chat', sharedPrefixLen: 1000, promptLen: { kind: 'fixed', value: 50 }, outputLen: { kind: 'fixed', value: 128 }, concurrency: [1, 16, 64] })
    expect(c.targets.map((t) => t.name)).toEqual(['onnxd gqa/capi', 'onnxd gqa/capi/no-prefix-cache'])
    expect(c.targets.map((t) => t.prefixCaching)).toEqual([true, false])
    expect(c.baseline).toBe('onnxd gqa/capi/no-prefix-cache')
    expect(c.references).toEqual({ ceiling: false, matmul: false, unbatched: false, peer: false })
    expect(describeConfig(c)).toMatchObject({ shared_prefix_len: 1000 })
    const g = benchConfig(['--scenario', 'chat', '--attention', 'plain', '--prefix-caching', 'off,on', '--baseline', 'plain/capi', '--shared-prefix-len', '300'])
    expect(g.targets.map((t) => t.name)).toEqual(['onnxd plain/capi/no-prefix-cache', 'onnxd plain/capi'])
    expect(g).toMatchObject({ baseline: 'onnxd plain/capi', sharedPrefixLen: 300 })
    // Elsewhere one target per form x runtime, with the node's default (on).
    expect(benchConfig([]).targets.map((t) => t.prefixCaching)).toEqual([true])
    expect(() => benchConfig(['--prefix-caching', 'maybe'])).toThrow(/--prefix-caching must be a comma-separated list of on, off\. Given: maybe/)
  })

  it('--dtype adds a target per weight form; llama.cpp runs on the paired GGUF types unless told otherwise', () => {
    const c = benchConfig(['--runtime', 'capi', '--dtype', 'fp32,q4,int8,fp16'])
    expect(c.targets.map((t) => t.name)).toEqual(['onnxd gqa/capi', 'onnxd gqa/capi/q4', 'onnxd gqa/capi/int8', 'onnxd gqa/capi/fp16'])
    expect(c.targets.map((t) => t.dtype)).toEqual(['fp32', 'q4', 'int8', 'fp16'])
    expect(c.llamaCpp.map((l) => l.name)).toEqual(['llama.cpp f32 t1', 'llama.cpp q4_0 t1', 'llama.cpp q8_0 t1', 'llama.cpp f16 t1'])
    expect(benchConfig(['--dtype', 'q4', '--runtime', 'capi', '--baseline', 'gqa/capi/q4']).baseline).toBeNull()
    // The q4 file served with --nbits-as-int8 is a form of its own, held against Q4_0 as the q4 file is (one server).
    const i8 = benchConfig(['--runtime', 'capi', '--dtype', 'q4,q4-as-int8'])
    expect(i8.targets.map((x) => x.name)).toEqual(['onnxd gqa/capi/q4', 'onnxd gqa/capi/q4-as-int8'])
    expect(i8.llamaCpp.map((l) => l.name)).toEqual(['llama.cpp q4_0 t1'])
    expect(benchConfig(['--dtype', 'fp32,q4', '--runtime', 'capi', '--baseline', 'gqa/capi/q4']).baseline).toBe('onnxd gqa/capi/q4')
    const t = benchConfig(['--llama-cpp', 'q4_0', '--llama-threads', '1,2'])
    expect(t.llamaCpp).toEqual([
      { type: 'q4_0', threads: 1, gpu: 'none', promptCache: true, name: 'llama.cpp q4_0 t1' },
      { type: 'q4_0', threads: 2, gpu: 'none', promptCache: true, name: 'llama.cpp q4_0 t2' },
    ])
    expect(describeConfig(t)).toMatchObject({ llama_cpp: ['llama.cpp q4_0 t1', 'llama.cpp q4_0 t2'] })
    // The chat scenario runs llama.cpp on the paired types as the standard one does, with its prompt cache (and
    // without it, as a second server, when asked).
    expect(benchConfig(['--scenario', 'chat']).llamaCpp.map((l) => [l.name, l.promptCache])).toEqual([['llama.cpp f32 t1', true]])
    expect(benchConfig(['--scenario', 'chat', '--llama-cpp', 'q8_0', '--llama-threads', '1,2']).llamaCpp.map((l) => l.name)).toEqual(['llama.cpp q8_0 t1', 'llama.cpp q8_0 t2'])
    expect(benchConfig(['--scenario', 'chat', '--llama-prompt-cache', 'on,off']).llamaCpp.map((l) => [l.name, l.promptCache])).toEqual([
      ['llama.cpp f32 t1', true],
      ['llama.cpp f32 t1 no-prompt-cache', false],
    ])
    expect(() => benchConfig(['--llama-prompt-cache', 'maybe'])).toThrow(/--llama-prompt-cache must be a comma-separated list of on, off\. Given: maybe/)
    expect(() => benchConfig(['--no-llama-cpp', '--llama-prompt-cache', 'off'])).toThrow(/exclusive/)
    // Off, each with its reason: asked, the long scenario (unless asked for), no local weights.
    expect(benchConfig(['--no-llama-cpp'])).toMatchObject({ llamaCpp: [], llamaCppOff: 'disabled by --no-llama-cpp' })
    expect(benchConfig(['--scenario', 'long']).llamaCppOff).toMatch(/not part of --scenario long/)
    expect(benchConfig(['--scenario', 'long', '--llama-cpp', 'f32']).llamaCpp.map((l) => l.name)).toEqual(['llama.cpp f32 t1'])
    expect(benchConfig(['--url', 'http://n:1']).llamaCppOff).toMatch(/pass --model DIR/)
    expect(() => benchConfig(['--dtype', 'q3', '--llama-cpp', 'q5_k', '--llama-threads', '0'])).toThrow(
      /--dtype must be a comma-separated list of fp32, q4, int8, fp16, q4-as-int8\. Given: q3[\s\S]*--llama-cpp must be a comma-separated list of f32, f16, q8_0, q4_0\. Given: q5_k[\s\S]*--llama-threads must be a comma-separated list of positive integers/,
    )
    expect(() => benchConfig(['--no-llama-cpp', '--llama-cpp', 'f32'])).toThrow(/exclusive/)
    expect(() => benchConfig(['--model', 'm', '--dtype', 'q4'])).toThrow(/--dtype builds the preset[\s\S]*not with --model/)
  })

  it('--provider puts the nodes and the ORT ceiling on one provider, capi on webgpu, js on cuda; --llama-gpu picks llama.cpp\'s build', () => {
    expect(benchConfig([]).provider).toBe('cpu')
    const g = benchConfig(['--provider', 'webgpu', '--attention', 'gqa', '--dtype', 'fp16,q4', '--llama-gpu', 'vulkan'])
    expect(g.provider).toBe('webgpu')
    expect(g.targets.map((t) => t.name)).toEqual(['onnxd gqa/capi/fp16', 'onnxd gqa/capi/q4'])
    expect(g.baseline).toBe('onnxd gqa/capi/fp16')
    // The CPU's matmul peak says nothing about a GPU run.
    expect(g.references).toMatchObject({ ceiling: true, matmul: false })
    expect(g.llamaCpp).toEqual([
      { type: 'f16', threads: 1, gpu: 'vulkan', promptCache: true, name: 'llama.cpp f16 t1 vulkan' },
      { type: 'q4_0', threads: 1, gpu: 'vulkan', promptCache: true, name: 'llama.cpp q4_0 t1 vulkan' },
    ])
    expect(describeConfig(g)).toMatchObject({ provider: 'webgpu', targets: ['onnxd gqa/capi/fp16', 'onnxd gqa/capi/q4'] })
    expect(benchConfig(['--provider', 'webgpu', '--attention', 'plain,gqa']).baseline).toBe('onnxd gqa/capi')
    // Both runtimes on webgpu (the JS API's cache crosses every step: the comparison the device cache is for).
    expect(benchConfig(['--provider', 'webgpu', '--attention', 'gqa', '--runtime', 'js,capi']).targets.map((t) => t.name)).toEqual(['onnxd gqa/js', 'onnxd gqa/capi'])
    expect(benchConfig(['--provider', 'cuda']).targets.map((t) => t.runtime)).toEqual(['js'])
    // On the js runtime a GroupQueryAttention cache crosses every step: the plain form by default there.
    expect(benchConfig(['--provider', 'cuda']).targets.map((t) => t.name)).toEqual(['onnxd plain/js'])
    expect(benchConfig(['--provider', 'tensorrt', '--dtype', 'fp32,q4']).baseline).toBe('onnxd plain/js')
    expect(benchConfig(['--provider', 'cuda', '--attention', 'gqa']).targets.map((t) => t.name)).toEqual(['onnxd gqa/js'])
    expect(() => benchConfig(['--provider', 'metal', '--llama-gpu', 'opencl'])).toThrow(/--provider must be one of cpu, webgpu, cuda, tensorrt\. Given: metal[\s\S]*--llama-gpu must be one of none, vulkan, cuda\. Given: opencl/)
    expect(() => benchConfig(['--provider', 'cuda', '--runtime', 'js,capi'])).toThrow(/--runtime capi runs on the cpu and webgpu providers only; --provider cuda runs js/)
    expect(() => benchConfig(['--no-llama-cpp', '--llama-gpu', 'vulkan'])).toThrow(/--no-llama-cpp and --llama-gpu are exclusive/)
  })

  it('refuses target flags it cannot honour, naming each', () => {
    expect(() => benchConfig(['--attention', 'plain,mha', '--runtime', 'cuda', '--scenario', 'short'])).toThrow(
      /--scenario must be one of standard, long, chat[\s\S]*--attention must be a comma-separated list of plain, gqa\. Given: plain,mha[\s\S]*--runtime must be a comma-separated list of js, capi/,
    )
    expect(() => benchConfig(['--attention', 'gqa', '--runtime', 'js,capi', '--baseline', 'plain/js'])).toThrow(/--baseline must be one of the targets \(gqa\/js, gqa\/capi\)\. Given: plain\/js/)
    expect(() => benchConfig(['--url', 'http://n:1', '--runtime', 'capi'])).toThrow(/not with --url or --facade/)
    expect(() => benchConfig(['--model', 'm', '--attention', 'gqa'])).toThrow(/not with --model/)
  })
})
