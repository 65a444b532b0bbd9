// The node's options: env strings converted strictly, defaults filled, every problem listed by field, frozen,
// and mapped onto the engine's PoolOptions.
import { totalmem } from 'node:os'
import { describe, expect, it, vi } from 'vitest'
import { isOnnxdError, type OnnxdError } from '../../src/shared/errors.js'
import { DEFAULT_MODEL_DIR, defaultKvBudgetMb, loadNodeOptions, memoryLimitBytes, NODE_ENV, NODE_FLAGS, nodeFlags, servedModelId, toPoolOptions } from '../../src/node/options.js'

const GiB = 1024 ** 3
const sys = { totalMemBytes: 8 * GiB }

function configError(fn: () => unknown): OnnxdError {
  try {
    fn()
  } catch (e) {
    if (isOnnxdError(e) && e.code === 'config') return e
    throw e
  }
  throw new Error('expected a config error')
}

describe('loadNodeOptions', () => {
  it('fills the documented defaults', () => {
    expect(loadNodeOptions({}, {}, {}, sys)).toEqual({
      port: 8081,
      host: '127.0.0.1',
      model: 'models/onnxd-tiny-gqa',
      provider: 'cpu',
      deviceId: 0,
      allowCpuFallback: false,
      runtime: 'auto',
      graphCapture: false,
      nbitsAsInt8: false,
      workers: 1,
      intraOpThreads: 0,
      maxRunning: 64,
      maxWaiting: 256,
      maxBatchedTokens: 512,
      kvBudgetMb: 2048,
      noPrefixCaching: false,
      speculativeTokens: 0,
      speculativeMaxRows: 4,
      heartbeatTimeoutMs: 5000,
      stallTimeoutMs: 30_000,
      grammarCompileMs: 10_000,
      grammarMemoryMb: 512,
      tokenizerThreads: 1,
      drainTimeoutMs: 30_000,
      bodyLimit: 4 * 1024 * 1024,
      logLevel: 'info',
    })
  })

  it('defaults the KV budget to a quarter of memory, at most 4096 MiB', () => {
    expect(defaultKvBudgetMb({ totalMemBytes: 4 * GiB })).toBe(1024)
    expect(defaultKvBudgetMb({ totalMemBytes: 64 * GiB })).toBe(4096)
  })

  it("sizes the default KV budget by a container's memory limit when it is below the host's memory", () => {
    const spy = vi.spyOn(process, 'constrainedMemory')
    try {
      spy.mockReturnValue(2 * GiB)
      expect(memoryLimitBytes()).toBe(Math.min(2 * GiB, totalmem()))
      expect(loadNodeOptions({}, { model: DEFAULT_MODEL_DIR }).kvBudgetMb).toBe(Math.floor(Math.min(2 * GiB, totalmem()) / 4 / 1024 ** 2))
      // No limit (0), or one above the host's memory: the host's memory.
      spy.mockReturnValue(0)
      expect(memoryLimitBytes()).toBe(totalmem())
      spy.mockReturnValue(totalmem() * 4)
      expect(memoryLimitBytes()).toBe(totalmem())
    } finally {
      spy.mockRestore()
    }
  })

  it('reads every ONNXD_* variable, converting strings', () => {
    const o = loadNodeOptions(
      {
        ONNXD_NODE_PORT: '9000',
        ONNXD_NODE_HOST: '0.0.0.0',
        ONNXD_MODEL: '/models/SmolLM2-135M',
        ONNXD_MODEL_ID: 'smollm2',
        ONNXD_DTYPE: 'fp16',
        ONNXD_PROVIDER: 'cuda',
        ONNXD_DEVICE_ID: '1',
        ONNXD_ALLOW_CPU_FALLBACK: 'true',
        ONNXD_WORKERS: '2',
        ONNXD_INTRA_OP_THREADS: '4',
        ONNXD_MAX_RUNNING: '32',
        ONNXD_MAX_WAITING: '100',
        ONNXD_MAX_BATCHED_TOKENS: '1024',
        ONNXD_KV_BUDGET_MB: '512',
        ONNXD_HEARTBEAT_TIMEOUT_MS: '10000',
        ONNXD_DRAIN_TIMEOUT_MS: '5000',
        ONNXD_NODE_BODY_LIMIT: '65536',
        ONNXD_LOG_LEVEL: 'debug',
      },
      {},
      {},
      sys,
    )
    expect(o).toMatchObject({ port: 9000, host: '0.0.0.0', model: '/models/SmolLM2-135M', modelId: 'smollm2', dtype: 'fp16', provider: 'cuda', deviceId: 1, allowCpuFallback: true })
    expect(o).toMatchObject({ workers: 2, intraOpThreads: 4, maxRunning: 32, maxWaiting: 100, maxBatchedTokens: 1024, kvBudgetMb: 512 })
    expect(o).toMatchObject({ heartbeatTimeoutMs: 10000, drainTimeoutMs: 5000, bodyLimit: 65536, logLevel: 'debug' })
  })

  it('lets flags win over the environment, and the environment over the file', () => {
    const o = loadNodeOptions({ ONNXD_NODE_PORT: '9000', ONNXD_WORKERS: '3' }, nodeFlags({ port: '9100', 'allow-cpu-fallback': true }), { port: 1, workers: 2, maxRunning: 8 }, sys)
    expect(o).toMatchObject({ port: 9100, workers: 3, maxRunning: 8, allowCpuFallback: true })
  })

  it('lists every problem in one config error, naming field, variable, flag and value', () => {
    const e = configError(() =>
      loadNodeOptions({ ONNXD_NODE_PORT: '80a', ONNXD_WORKERS: '1.5', ONNXD_PROVIDER: 'rocm', ONNXD_ALLOW_CPU_FALLBACK: 'maybe', ONNXD_LOG_LEVEL: 'loud' }, {}, {}, sys),
    )
    const problems = (e.details as { problems: string[] }).problems
    expect(problems).toHaveLength(5)
    expect(e.message).toContain('port (ONNXD_NODE_PORT, --port): must be an integer. Given: "80a"')
    expect(e.message).toContain('workers (ONNXD_WORKERS, --workers): must be an integer. Given: "1.5"')
    expect(e.message).toContain('provider (ONNXD_PROVIDER, --provider): must be one of cpu, webgpu, cuda, tensorrt. Given: "rocm"')
    expect(e.message).toContain('allowCpuFallback (ONNXD_ALLOW_CPU_FALLBACK, --allow-cpu-fallback)')
    expect(e.message).toContain('logLevel (ONNXD_LOG_LEVEL, --log-level): must be one of fatal, error, warn, info, debug, trace, silent')
  })

  it('rejects out-of-range values, unknown file options, and max_batched_tokens below max_running', () => {
    expect(configError(() => loadNodeOptions({ ONNXD_WORKERS: '0' }, {}, {}, sys)).message).toContain('workers (ONNXD_WORKERS, --workers): must be >= 1')
    expect(configError(() => loadNodeOptions({}, {}, { gpu: true }, sys)).message).toContain('gpu: unknown option')
    expect(configError(() => loadNodeOptions({ ONNXD_MAX_RUNNING: '64', ONNXD_MAX_BATCHED_TOKENS: '32' }, {}, {}, sys)).message).toContain(
      'maxBatchedTokens (ONNXD_MAX_BATCHED_TOKENS, --max-batched-tokens) must be >= maxRunning (ONNXD_MAX_RUNNING). Given: 32 and 64',
    )
  })

  it('freezes the result', () => {
    const o = loadNodeOptions({}, {}, {}, sys)
    expect(Object.isFrozen(o)).toBe(true)
    expect(() => {
      ;(o as { port: number }).port = 1
    }).toThrow(TypeError)
  })

  it('has an env variable and a flag for every option', () => {
    for (const [field, env] of Object.entries(NODE_ENV)) {
      expect(env, field).toMatch(/^ONNXD_[A-Z][A-Z0-9_]*$/)
      expect(NODE_FLAGS[field as keyof typeof NODE_FLAGS], field).toMatch(/^[a-z][a-z0-9-]*$/)
    }
  })
})

describe('toPoolOptions', () => {
  it('maps node options onto the pool, the KV budget in bytes and the model id from the folder name', () => {
    const o = loadNodeOptions({ ONNXD_MODEL: '/srv/models/SmolLM2-135M/', ONNXD_KV_BUDGET_MB: '256', ONNXD_PROVIDER: 'tensorrt' }, {}, {}, sys)
    expect(servedModelId(o)).toBe('SmolLM2-135M')
    expect(toPoolOptions(o)).toEqual({
      modelDir: '/srv/models/SmolLM2-135M/',
      modelId: 'SmolLM2-135M',
      provider: 'tensorrt',
      deviceId: 0,
      allowCpuFallback: false,
      runtime: 'auto',
      graphCapture: false,
      nbitsAsInt8: false,
      workers: 1,
      intraOpThreads: 0,
      maxRunning: 64,
      maxWaiting: 256,
      maxBatchedTokens: 512,
      kvBudgetBytes: 256 * 1024 * 1024,
      prefixCaching: true,
      speculativeTokens: 0,
      speculativeMaxRows: 4,
      heartbeatTimeoutMs: 5000,
      stallTimeoutMs: 30_000,
      tokenizerThreads: 1,
      grammar: { compileMs: 10_000, heapBytes: 512 * 1024 * 1024 },
    })
    expect(toPoolOptions(loadNodeOptions({ ONNXD_DTYPE: 'q4', ONNXD_MODEL_ID: 'x' }, {}, {}, sys))).toMatchObject({ dtype: 'q4', modelId: 'x' })
    expect(toPoolOptions(loadNodeOptions({ ONNXD_NO_PREFIX_CACHING: '1' }, {}, {}, sys)).prefixCaching).toBe(false)
    expect(toPoolOptions(loadNodeOptions({}, nodeFlags({ 'max-model-len': '512', 'graph-capture': true }), {}, sys))).toMatchObject({ maxModelLen: 512, graphCapture: true })
    expect(toPoolOptions(loadNodeOptions({}, nodeFlags({ 'no-prefix-caching': true }), {}, sys)).prefixCaching).toBe(false)
    expect(toPoolOptions(loadNodeOptions({ ONNXD_DTYPE: 'q4', ONNXD_NBITS_AS_INT8: '1' }, {}, {}, sys))).toMatchObject({ dtype: 'q4', nbitsAsInt8: true })
    expect(toPoolOptions(loadNodeOptions({}, nodeFlags({ 'nbits-as-int8': true }), {}, sys)).nbitsAsInt8).toBe(true)
    // WebGPU provider options, key=value comma-separated, as ORT's keys and values.
    expect(toPoolOptions(loadNodeOptions({ ONNXD_PROVIDER: 'webgpu', ONNXD_WEBGPU_OPTIONS: 'validationMode=disabled, powerPreference=high-performance' }, {}, {}, sys)).webgpuOptions).toEqual({
      validationMode: 'disabled',
      powerPreference: 'high-performance',
    })
    expect(toPoolOptions(loadNodeOptions({}, {}, {}, sys)).webgpuOptions).toBeUndefined()
    // The budget is the node's; the pool gives kvBudgetBytes to each worker.
    expect(toPoolOptions(loadNodeOptions({ ONNXD_WORKERS: '4', ONNXD_KV_BUDGET_MB: '1024' }, {}, {}, sys)).kvBudgetBytes).toBe(256 * 1024 * 1024)
  })
})

describe('--webgpu-options', () => {
  const sys = { totalMemBytes: 16 * 1024 ** 3 }
  const problems = (env: Record<string, string>): string => {
    try {
      loadNodeOptions(env, {}, {}, sys)
    } catch (e) {
      return (e as Error).message
    }
    return ''
  }

  it('refuses a key onnxd does not pass on, a value ORT does not take, a key given twice, and another provider', () => {
    // ORT ignores a key it does not know: onnxd names the keys it passes on.
    expect(problems({ ONNXD_PROVIDER: 'webgpu', ONNXD_WEBGPU_OPTIONS: 'enableGraphCapture=1' })).toMatch(/'enableGraphCapture' is not a WebGPU option onnxd passes on \(validationMode, /)
    expect(problems({ ONNXD_PROVIDER: 'webgpu', ONNXD_WEBGPU_OPTIONS: 'validationMode=none' })).toMatch(/validationMode takes disabled, wgpuOnly, basic, full; given 'none'/)
    expect(problems({ ONNXD_PROVIDER: 'webgpu', ONNXD_WEBGPU_OPTIONS: 'storageBufferCacheMode' })).toMatch(/storageBufferCacheMode takes disabled, lazyRelease, simple, bucket; given ''/)
    expect(problems({ ONNXD_PROVIDER: 'webgpu', ONNXD_WEBGPU_OPTIONS: 'validationMode=basic,validationMode=full' })).toMatch(/validationMode is given twice/)
    expect(problems({ ONNXD_WEBGPU_OPTIONS: 'validationMode=basic' })).toMatch(/applies to --provider webgpu \(ONNXD_PROVIDER\); given provider cpu/)
    expect(problems({ ONNXD_PROVIDER: 'webgpu', ONNXD_WEBGPU_OPTIONS: 'validationMode=basic' })).toBe('')
  })
})
