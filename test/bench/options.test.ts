import { describe, expect, it } from 'vitest'
import { benchConfig, describeConfig, redactArgv, requestsFor } from '../../src/bench/options.js'

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
})
