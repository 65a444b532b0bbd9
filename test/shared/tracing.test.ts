// Issue #15: tracing is configured by the standard OpenTelemetry variables, off by default, and costs nothing off
// (the SDK is not even loaded).
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { tracingConfig } from '../../src/shared/tracing.js'

const REPO = join(import.meta.dirname, '../..')

describe('tracingConfig', () => {
  it('is off without an OTLP endpoint, with OTEL_SDK_DISABLED=true and with OTEL_TRACES_EXPORTER=none', () => {
    expect(tracingConfig({}, 'onnxd-node')).toBeNull()
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: '' }, 'onnxd-node')).toBeNull()
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' }, 'onnxd-node')).toBeNull()
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' }, 'onnxd-node')).toBeNull()
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'false' }, 'onnxd-node')).not.toBeNull()
  })

  it('adds /v1/traces to the general endpoint and takes the traces endpoint as given', () => {
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }, 'x')!.url).toBe('http://c:4318/v1/traces')
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'https://c/otlp/' }, 'x')!.url).toBe('https://c/otlp/v1/traces')
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://b:9/custom' }, 'x')!.url).toBe('http://b:9/custom')
  })

  it('names the service by OTEL_SERVICE_NAME, else service.name in OTEL_RESOURCE_ATTRIBUTES, else the default', () => {
    const base = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }
    expect(tracingConfig(base, 'onnxd-facade')!.serviceName).toBe('onnxd-facade')
    const withAttrs = tracingConfig({ ...base, OTEL_RESOURCE_ATTRIBUTES: 'service.name=gw,deployment.environment=prod%20eu' }, 'onnxd-facade')!
    expect(withAttrs.serviceName).toBe('gw')
    expect(withAttrs.resource).toEqual({ 'deployment.environment': 'prod eu' })
    expect(tracingConfig({ ...base, OTEL_SERVICE_NAME: 'edge', OTEL_RESOURCE_ATTRIBUTES: 'service.name=gw' }, 'onnxd-facade')!.serviceName).toBe('edge')
  })

  it('takes headers, the sampler and the batch settings', () => {
    const c = tracingConfig(
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318',
        OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer%20x,x-a=1',
        OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'x-a=2',
        OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
        OTEL_TRACES_SAMPLER_ARG: '0.25',
        OTEL_BSP_SCHEDULE_DELAY: '200',
      },
      'x',
    )!
    expect(c.headers).toEqual({ authorization: 'Bearer x', 'x-a': '2' })
    expect(c.sampler).toEqual({ kind: 'traceidratio', parentBased: true, ratio: 0.25 })
    expect(c.batch.scheduledDelayMillis).toBe(200)
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }, 'x')!.sampler).toEqual({ kind: 'always_on', parentBased: true, ratio: 1 })
  })

  it('refuses what it cannot honour, naming the variable', () => {
    const base = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }
    expect(() => tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'c:4318' }, 'x')).toThrow(/OTEL_EXPORTER_OTLP_ENDPOINT must be an http/)
    expect(() => tracingConfig({ ...base, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, 'x')).toThrow(/OTEL_EXPORTER_OTLP_PROTOCOL must be 'http\/json'/)
    expect(() => tracingConfig({ ...base, OTEL_TRACES_EXPORTER: 'zipkin' }, 'x')).toThrow(/OTEL_TRACES_EXPORTER/)
    expect(() => tracingConfig({ ...base, OTEL_TRACES_SAMPLER: 'sometimes' }, 'x')).toThrow(/OTEL_TRACES_SAMPLER must be one of/)
    expect(() => tracingConfig({ ...base, OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '2' }, 'x')).toThrow(/OTEL_TRACES_SAMPLER_ARG/)
    expect(() => tracingConfig({ ...base, OTEL_EXPORTER_OTLP_HEADERS: 'novalue' }, 'x')).toThrow(/OTEL_EXPORTER_OTLP_HEADERS/)
    expect(() => tracingConfig({ ...base, OTEL_BSP_SCHEDULE_DELAY: '-1' }, 'x')).toThrow(/OTEL_BSP_SCHEDULE_DELAY/)
    // The signal's own protocol wins over the general one.
    expect(tracingConfig({ ...base, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, 'x')).not.toBeNull()
  })
})

describe('openTracing', () => {
  /** In a fresh process: whether tracing came on, and how many SDK modules (anything of OpenTelemetry but the API) loaded. */
  const probe = (env: Record<string, string>): { on: boolean; loaded: number } => {
    const code = `
      import { createRequire } from 'node:module'
      const { openTracing } = await import('./src/shared/tracing.ts')
      const t = await openTracing(JSON.parse(process.argv[1]), 'x')
      const loaded = Object.keys(createRequire(process.cwd() + '/x.js').cache).filter((k) => k.includes('@opentelemetry') && !k.includes('@opentelemetry/api/'))
      console.log(JSON.stringify({ on: t !== null, loaded: loaded.length }))
      await t?.shutdown()`
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code, JSON.stringify(env)], { cwd: REPO, encoding: 'utf8', timeout: 60_000 })
    expect(r.status, r.stderr).toBe(0)
    return JSON.parse(r.stdout.trim()) as { on: boolean; loaded: number }
  }

  it('off, loads no part of the SDK; on, loads it (the probe can see it)', () => {
    expect(probe({})).toEqual({ on: false, loaded: 0 })
    const on = probe({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' })
    expect(on.on).toBe(true)
    expect(on.loaded).toBeGreaterThan(0)
  })
})
