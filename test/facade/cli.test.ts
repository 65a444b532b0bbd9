import { existsSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { usage } from '../../src/cli.js'
import { run as account } from '../../src/cli/account.js'
import { run as facadeCmd } from '../../src/cli/facade.js'
import { run as key } from '../../src/cli/key.js'
import { run as token } from '../../src/cli/token.js'
import { buildFacade } from '../../src/facade/app.js'
import { JWT_SECRET_FILE } from '../../src/facade/auth/secret.js'
import { loadFacadeOptions } from '../../src/facade/options.js'
import { startFacade } from '../../src/facade/server.js'
import { startFakeNode } from '../helpers/fake-node.js'
import { bearer } from '../helpers/facade.js'

/** Runs a command with stdout and stderr captured. */
async function cli(cmd: (argv: string[], env: NodeJS.ProcessEnv) => Promise<number>, argv: string[], env: NodeJS.ProcessEnv = {}) {
  let stdout = ''
  let stderr = ''
  const o = vi.spyOn(process.stdout, 'write').mockImplementation((s: string | Uint8Array) => ((stdout += String(s)), true))
  const e = vi.spyOn(process.stderr, 'write').mockImplementation((s: string | Uint8Array) => ((stderr += String(s)), true))
  try {
    const code = await cmd(argv, env)
    return { code, stdout, stderr }
  } finally {
    o.mockRestore()
    e.mockRestore()
  }
}

afterEach(() => vi.restoreAllMocks())
const tmp = (): string => mkdtempSync(join(tmpdir(), 'onnxd-cli-'))

describe('operator CLI', () => {
  it('is in the command table', () => {
    for (const c of ['account', 'key', 'token', 'facade']) expect(usage()).toMatch(new RegExp(`^  ${c} `, 'm'))
  })

  it('account create / credit / subscription / show / list print the account as JSON', async () => {
    const dir = tmp()
    const created = await cli(account, ['create', 'Ada Lovelace', '--credits', '12.5', '--email', 'ada@example.com', '--data-dir', dir])
    expect(created.code).toBe(0)
    const a = JSON.parse(created.stdout)
    expect(a).toMatchObject({ id: expect.stringMatching(/^acct_/), object: 'account', name: 'Ada Lovelace', email: 'ada@example.com', balance_micros: 12_500_000, balance: '12.500000', subscription: 'active' })
    expect(existsSync(join(dir, 'onnxd.sqlite'))).toBe(true)

    expect(JSON.parse((await cli(account, ['credit', a.id, '-2.25'], { ONNXD_DATA_DIR: dir })).stdout).balance_micros).toBe(10_250_000)
    expect(JSON.parse((await cli(account, ['subscription', a.id, 'inactive', '--data-dir', dir])).stdout).subscription).toBe('inactive')
    expect(JSON.parse((await cli(account, ['show', a.id, '--data-dir', dir])).stdout).id).toBe(a.id)
    expect(JSON.parse((await cli(account, ['list', '--data-dir', dir])).stdout)).toHaveLength(1)
  })

  it('reports usage mistakes with exit code 2 and unknown accounts as errors', async () => {
    const dir = tmp()
    const bad = await cli(account, ['subscription', 'acct_x', 'maybe', '--data-dir', dir])
    expect(bad.code).toBe(2)
    expect(bad.stderr).toMatch(/usage:/)
    await expect(cli(account, ['credit', 'acct_missing', '5', '--data-dir', dir])).rejects.toMatchObject({ code: 'not_found' })
    await expect(cli(account, ['credit', 'acct_missing', 'five', '--data-dir', dir])).rejects.toThrow(/decimal number/)
    await expect(cli(key, ['create', 'acct_missing', '--data-dir', dir])).rejects.toMatchObject({ code: 'not_found' })
    await expect(cli(token, ['acct_missing', '--data-dir', dir])).rejects.toMatchObject({ code: 'not_found' })
    await expect(cli(token, ['acct_x', '--ttl', '0', '--data-dir', dir])).rejects.toThrow(/--ttl/)
    // Never a token the facade would refuse: at most jwtMaxTtlS (24 h by default).
    await expect(cli(token, ['acct_x', '--ttl', '86401', '--data-dir', dir])).rejects.toThrow(/--ttl must be <= 86400 s.*ONNXD_JWT_MAX_TTL_S/)
    await expect(cli(token, ['acct_x', '--ttl', '120', '--data-dir', dir], { ONNXD_JWT_MAX_TTL_S: '60' })).rejects.toThrow(/--ttl must be <= 60 s/)
    expect((await cli(token, ['--data-dir', dir])).code).toBe(2)
  })

  it('token and key create give credentials the facade accepts (the generated secret is shared through the data dir)', async () => {
    const dir = tmp()
    const a = JSON.parse((await cli(account, ['create', 'ops', '--credits', '1', '--data-dir', dir])).stdout)
    const t = await cli(token, [a.id, '--ttl', '120', '--data-dir', dir])
    expect(t.stdout).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+\n$/)
    expect(statSync(join(dir, JWT_SECRET_FILE)).mode & 0o777).toBe(0o600)
    const k = JSON.parse((await cli(key, ['create', a.id, '--name', 'ci', '--rpm', '30', '--data-dir', dir])).stdout)
    expect(k).toMatchObject({ object: 'api_key', account_id: a.id, name: 'ci', rpm_limit: 30, key: expect.stringMatching(/^sk-svc-/) })
    expect(JSON.parse((await cli(key, ['list', a.id, '--data-dir', dir])).stdout)[0]).not.toHaveProperty('key')

    const node = await startFakeNode()
    const app = await buildFacade(loadFacadeOptions({}, { dataDir: dir, nodes: [node.url], logLevel: 'silent' }), { pollHealth: false })
    try {
      const profile = await app.inject({ method: 'GET', url: '/v1/account/profile', headers: bearer(t.stdout.trim()) })
      expect(profile.statusCode).toBe(200)
      expect(profile.json().id).toBe(a.id)
      expect((await app.inject({ method: 'GET', url: '/v1/models', headers: bearer(k.key) })).statusCode).toBe(200)

      expect(JSON.parse((await cli(key, ['revoke', k.id, '--data-dir', dir])).stdout).status).toBe('revoked')
      expect((await app.inject({ method: 'GET', url: '/v1/models', headers: bearer(k.key) })).statusCode).toBe(401)
    } finally {
      await app.close()
      await node.close()
    }
    expect(readFileSync(join(dir, JWT_SECRET_FILE), 'utf8').trim().length).toBeGreaterThanOrEqual(64)
  })

  it('refuses a truncated secret file rather than signing with it', async () => {
    const dir = tmp()
    const a = JSON.parse((await cli(account, ['create', 'x', '--data-dir', dir])).stdout)
    writeFileSync(join(dir, JWT_SECRET_FILE), 'short\n')
    await expect(cli(token, [a.id, '--data-dir', dir])).rejects.toThrow(/shorter than 32 characters/)
  })

  it('token refuses to mint when only a JWKS is configured', async () => {
    const dir = tmp()
    const a = JSON.parse((await cli(account, ['create', 'x', '--data-dir', dir])).stdout)
    await expect(cli(token, [a.id, '--data-dir', dir], { ONNXD_JWKS_URL: 'https://idp.example/jwks' })).rejects.toThrow(/identity provider/)
  })

  it('facade: --help, and a bad option stops start-up naming the field', async () => {
    expect((await cli(facadeCmd, ['--help'])).stdout).toMatch(/usage: onnxd facade/)
    await expect(cli(facadeCmd, ['--port', 'eighty', '--data-dir', tmp()])).rejects.toThrow(/port \(ONNXD_PORT, --port\)/)
    // Every option docs/configuration.md lists with a flag is a flag of the command (not an "unknown option" from parseArgs).
    await expect(cli(facadeCmd, ['--database-url', 'mysql://x', '--data-dir', tmp()])).rejects.toThrow(/databaseUrl \(ONNXD_DATABASE_URL, --database-url\): must be a postgres/)
    await expect(cli(facadeCmd, ['--redis-url', 'http://x', '--data-dir', tmp()])).rejects.toThrow(/redisUrl \(ONNXD_REDIS_URL, --redis-url\)/)
    await expect(cli(facadeCmd, ['--affinity-prefix-chars=-1', '--dns-interval-ms', '5', '--data-dir', tmp()])).rejects.toThrow(
      /affinityPrefixChars .*dnsIntervalMs|dnsIntervalMs[\s\S]*affinityPrefixChars|affinityPrefixChars[\s\S]*dnsIntervalMs/,
    )
    await expect(cli(facadeCmd, ['--jwt-secret', 'x'.repeat(40)])).rejects.toThrow(/jwt-secret/)
  })

  it('startFacade listens and closes', async () => {
    const node = await startFakeNode()
    const running = await startFacade(loadFacadeOptions({}, { port: 0, nodes: [node.url], dataDir: tmp(), logLevel: 'silent' }))
    try {
      const res = await fetch(`${running.url}/health`)
      expect(res.status).toBe(200)
    } finally {
      await running.close()
      await node.close()
    }
  })
})
