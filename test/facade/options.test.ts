import { describe, expect, it } from 'vitest'
import { FACADE_ENV, FACADE_FLAGS, loadFacadeOptions } from '../../src/facade/options.js'

describe('loadFacadeOptions', () => {
  it('has defaults for everything but the secrets', () => {
    expect(loadFacadeOptions({})).toEqual({
      port: 8080,
      host: '127.0.0.1',
      nodes: ['http://127.0.0.1:8081'],
      dataDir: 'data',
      databasePoolSize: 4,
      keyRpm: 600,
      fleetRpm: 60_000,
      keyMaxSequences: 64,
      prices: {},
      defaultPrice: { prompt: 0.5, completion: 1.5 },
      billingFlushMs: 1000,
      billingFlushTokens: 16,
      jwtMaxTtlS: 86_400,
      healthIntervalMs: 2000,
      dnsIntervalMs: 10_000,
      affinityPrefixChars: 1024,
      nodeTimeoutMs: 600_000,
      bodyLimit: 1_048_576,
      logLevel: 'info',
    })
  })

  it('converts environment strings; flags win over the environment, which wins over the file', () => {
    const o = loadFacadeOptions(
      { ONNXD_PORT: '9000', ONNXD_NODES: 'http://a:1/, http://b:2', ONNXD_KEY_RPM: '5', ONNXD_PRICES: '{"m":{"prompt":0.5,"completion":1}}', ONNXD_DATA_DIR: '/env' },
      { keyRpm: '7', dataDir: undefined },
      { fleetRpm: 11, dataDir: '/file', port: 1 },
    )
    expect(o).toMatchObject({ port: 9000, nodes: ['http://a:1', 'http://b:2'], keyRpm: 7, fleetRpm: 11, dataDir: '/env', prices: { m: { prompt: 0.5, completion: 1 } } })
    expect(loadFacadeOptions({ ONNXD_DEFAULT_PRICE: '{"prompt":0,"completion":0}' }).defaultPrice).toEqual({ prompt: 0, completion: 0 })
    expect(() => loadFacadeOptions({ ONNXD_DEFAULT_PRICE: '{"prompt":-1,"completion":0}' })).toThrow(/defaultPrice \(ONNXD_DEFAULT_PRICE, --default-price\)/)
    expect(Object.isFrozen(o) && Object.isFrozen(o.nodes) && Object.isFrozen(o.prices)).toBe(true)
  })

  it('lists every problem in one config error, naming field, variable and flag', () => {
    let err: unknown
    try {
      loadFacadeOptions({ ONNXD_PORT: 'eighty', ONNXD_FLEET_RPM: '-1', ONNXD_NODES: 'ftp://x', ONNXD_PRICES: '{nope' }, { logLevel: 'loud' }, { colour: 'blue' })
    } catch (e) {
      err = e
    }
    expect(err).toMatchObject({ name: 'OnnxdError', code: 'config' })
    const msg = (err as Error).message
    expect(msg).toContain('port (ONNXD_PORT, --port): must be an integer. Given: "eighty"')
    expect(msg).toContain('fleetRpm (ONNXD_FLEET_RPM, --fleet-rpm): must be >= 0. Given: -1')
    expect(msg).toContain('nodes (ONNXD_NODES, --nodes) at /nodes/0: must be an http(s) URL, or dns+http(s)://name:port. Given: "ftp://x"')
    expect(msg).toMatch(/prices \(ONNXD_PRICES\): must be JSON/)
    expect(msg).toMatch(/logLevel .* must be one of fatal, error, warn, info, debug, trace, silent/)
    expect(msg).toMatch(/colour: unknown option/)
    expect((err as { details: { problems: string[] } }).details.problems).toHaveLength(6)
  })

  it('checks cross-field rules: one JWKS source, a secret in production', () => {
    expect(() => loadFacadeOptions({ NODE_ENV: 'production' })).toThrow(/ONNXD_JWT_SECRET\) is required when NODE_ENV=production/)
    expect(loadFacadeOptions({ NODE_ENV: 'production', ONNXD_JWT_SECRET: 's'.repeat(32) }).jwtSecret).toBe('s'.repeat(32))
    expect(() => loadFacadeOptions({ ONNXD_JWKS_URL: 'https://idp/jwks', ONNXD_JWKS_FILE: '/x' })).toThrow(
      'jwksUrl (ONNXD_JWKS_URL, --jwks-url) and jwksFile (ONNXD_JWKS_FILE, --jwks-file) are exclusive',
    )
    expect(() => loadFacadeOptions({ ONNXD_DATABASE_URL: 'mysql://u:pw@db/x' })).toThrow('databaseUrl (ONNXD_DATABASE_URL, --database-url): must be a postgres:// URL')
  })

  it('names the JWT secret without a flag (it has none) and never quotes it', () => {
    let msg = ''
    try {
      loadFacadeOptions({ ONNXD_JWT_SECRET: 'hunter2-short' })
    } catch (e) {
      msg = (e as Error).message
    }
    expect(msg).toContain('jwtSecret (ONNXD_JWT_SECRET): must be at least 32 characters. Given: (a secret: not shown)')
    expect(msg).not.toContain('hunter2')
    expect(msg).not.toContain('--jwt-secret')
    expect(() => loadFacadeOptions({ NODE_ENV: 'production' })).toThrow(/^(?![\s\S]*--jwt-secret)[\s\S]*jwtSecret \(ONNXD_JWT_SECRET\) is required/)
  })

  it('converts strings strictly, as the node does: "1.5" is not an integer, a file\'s "1" is not a number', () => {
    expect(() => loadFacadeOptions({ ONNXD_KEY_RPM: '1.5' })).toThrow('keyRpm (ONNXD_KEY_RPM, --key-rpm): must be an integer. Given: "1.5"')
    expect(() => loadFacadeOptions({}, {}, { prices: { m: { prompt: '1', completion: 2 } } })).toThrow(
      'prices (ONNXD_PRICES, --prices) at /prices/m/prompt: must be a number. Given: "1"',
    )
  })

  it('takes DNS names for nodes beside URLs', () => {
    expect(loadFacadeOptions({ ONNXD_NODES: 'dns+http://onnxd-node.default.svc:8081/, http://10.0.0.9:8081' }).nodes).toEqual([
      'dns+http://onnxd-node.default.svc:8081',
      'http://10.0.0.9:8081',
    ])
    expect(() => loadFacadeOptions({ ONNXD_NODES: 'dns+ftp://x' })).toThrow(/nodes \(ONNXD_NODES, --nodes\) at \/nodes\/0/)
  })

  it('never changes the objects it is given', () => {
    const file = { prices: { m: { prompt: 1, completion: 2 } }, nodes: ['http://a:1/'] }
    expect(loadFacadeOptions({}, {}, file).nodes).toEqual(['http://a:1'])
    expect(file).toEqual({ prices: { m: { prompt: 1, completion: 2 } }, nodes: ['http://a:1/'] })
    expect(Object.isFrozen(file) || Object.isFrozen(file.prices) || Object.isFrozen(file.nodes)).toBe(false)
  })

  it('has an ONNXD_* variable and a flag for every option', () => {
    for (const [k, v] of Object.entries(FACADE_ENV)) {
      expect(v).toMatch(/^ONNXD_[A-Z_]+$/)
      expect(FACADE_FLAGS[k as keyof typeof FACADE_FLAGS]).toMatch(/^[a-z-]+$/)
    }
    expect(FACADE_FLAGS.healthIntervalMs).toBe('health-interval-ms')
  })
})
