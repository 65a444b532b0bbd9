// A production facade refuses a JWT secret that is a placeholder (the ones this repository ships or marks) or
// guessable, at start, with one line naming ONNXD_JWT_SECRET and how to make a good one (issue #35).
import { randomBytes } from 'node:crypto'
import { existsSync, mkdtempSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { main } from '../../src/cli.js'
import { checkProductionSecret, MAKE_SECRET, secretWeakness, SHIPPED_PLACEHOLDERS } from '../../src/facade/auth/secret-strength.js'

const REPO = join(import.meta.dirname, '../..')

/** The files an operator copies secrets from: deployment files, compose, Dockerfile, README, docs, .env examples. */
function shippedFiles(): string[] {
  const out: string[] = []
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir)) {
      const p = join(dir, name)
      if (statSync(p).isDirectory()) walk(p)
      else out.push(p)
    }
  }
  for (const d of ['deploy', 'docs']) if (existsSync(join(REPO, d))) walk(join(REPO, d))
  for (const f of readdirSync(REPO)) if (/^(compose\.ya?ml|docker-compose\.ya?ml|Dockerfile|README\.md|\.env.*|onnxd\.config.*\.json)$/.test(f)) out.push(join(REPO, f))
  return out
}

/**
 * Every literal value these files give ONNXD_JWT_SECRET (YAML `KEY: value`, `KEY=value`, compose's `${KEY:-value}`,
 * a config file's "jwtSecret"), without the ones that are a command or a reference (`$(openssl ...)`, `...`).
 */
function shippedSecretValues(): { where: string; value: string }[] {
  const out: { where: string; value: string }[] = []
  for (const file of shippedFiles()) {
    const text = readFileSync(file, 'utf8')
    const found = [
      ...text.matchAll(/ONNXD_JWT_SECRET(?:\s*[:=]\s*|:-)["']?([^\s"'`}]+)/g),
      ...text.matchAll(/"jwtSecret"\s*:\s*"([^"]+)"/g),
    ]
    for (const m of found) {
      const value = m[1]!
      if (value.startsWith('$') || value.startsWith('...')) continue
      out.push({ where: relative(REPO, file), value })
    }
  }
  return out
}

describe('JWT secret in production (issue #35)', () => {
  afterEach(() => {
    vi.unstubAllEnvs()
    vi.restoreAllMocks()
  })

  it('refuses every secret value the repository ships, and the placeholders it names', async () => {
    const shipped = shippedSecretValues()
    // The Kubernetes Secret's placeholder is one of them (compose no longer has a default: it requires the variable).
    expect(shipped.map((s) => s.value)).toContain('REPLACE-ME-with-openssl-rand-base64-48')
    for (const { where, value } of shipped) expect(await secretWeakness(value), `${where}: ${value}`).toBe('is a placeholder')
    for (const p of SHIPPED_PLACEHOLDERS) expect(await secretWeakness(p), p).toBe('is a placeholder')
    // Marked as placeholders whatever surrounds the mark, at any length.
    for (const p of ['change_me_please_this_is_a_long_enough_value', 'our-insecure-secret-0123456789-0123456789', 'x'.repeat(30) + 'REPLACE_ME']) {
      expect(await secretWeakness(p), p).toBe('is a placeholder')
    }
  })

  it('refuses guessable secrets however long, and accepts random ones', async () => {
    for (const weak of ['x'.repeat(64), 'abcdefghijklmnopqrstuvwxyz0123456789', 'passwordpasswordpasswordpassword12', 'correct horse battery staple extra words here', 'qwertyuiopasdfghjklzxcvbnm1234567890qwertyuiop']) {
      expect(await secretWeakness(weak), weak).toMatch(/^is too weak \(about 10\^\d+ guesses by zxcvbn's estimate, at least 10\^40 needed\)$/)
    }
    // What the docs tell operators to run (48 random bytes, 64 characters: about 10^62 by the estimate, so far above
    // the bar that a fresh one never fails), and 32 random bytes as hex. 32 random bytes in base64 (43 characters)
    // land near 10^42-10^43, too close to the bar for a random draw in a test: fixed ones stand for them.
    for (const strong of [randomBytes(48).toString('base64'), randomBytes(48).toString('base64url'), randomBytes(32).toString('hex'), 'VuU5N3Gqzj0Kk7tD8t2H1Ry9bq6oX4mWcLfEa0sPZiM', 'q5Jw0y-xL3dV8nR2cK7hT1bF9mZ4sA6gE0uQ_iP3oWk']) {
      expect(await secretWeakness(strong), strong).toBeNull()
    }
    // 24 random bytes (32 characters) do not reach it: the estimate counts about 10 guesses a character.
    expect(await secretWeakness('5S5nx2FJgMDsqIUD2qKU81zUkXbQ4YbC')).toMatch(/^is too weak/)
  })

  it('checks only in production, and only a configured secret', async () => {
    await expect(checkProductionSecret('x'.repeat(40), {})).resolves.toBeUndefined()
    await expect(checkProductionSecret('x'.repeat(40), { NODE_ENV: 'development' })).resolves.toBeUndefined()
    await expect(checkProductionSecret(undefined, { NODE_ENV: 'production' })).resolves.toBeUndefined()
    await expect(checkProductionSecret(randomBytes(48).toString('base64'), { NODE_ENV: 'production' })).resolves.toBeUndefined()
    await expect(checkProductionSecret('x'.repeat(40), { NODE_ENV: 'production' })).rejects.toMatchObject({ code: 'config', message: expect.stringMatching(/^ONNXD_JWT_SECRET is too weak/) })
  })

  for (const command of ['facade', 'serve']) {
    it(`onnxd ${command} does not start with a placeholder: one line naming the variable and how to make one`, async () => {
      const dir = mkdtempSync(join(tmpdir(), 'onnxd-secret-'))
      vi.stubEnv('NODE_ENV', 'production')
      vi.stubEnv('ONNXD_JWT_SECRET', 'REPLACE-ME-with-openssl-rand-base64-48')
      vi.stubEnv('ONNXD_DATA_DIR', dir)
      vi.stubEnv('ONNXD_NODES', 'http://127.0.0.1:9')
      // Ports that would be taken if it started; it must refuse before listening or building a model.
      vi.stubEnv('ONNXD_PORT', '0')
      vi.stubEnv('ONNXD_NODE_PORT', '0')
      vi.stubEnv('ONNXD_MODEL', join(dir, 'no-such-model'))
      let stderr = ''
      vi.spyOn(process.stderr, 'write').mockImplementation((s: string | Uint8Array) => ((stderr += String(s)), true))
      const before = process.exitCode
      try {
        await main([command])
        expect(process.exitCode).toBe(1)
      } finally {
        process.exitCode = before
      }
      expect(stderr).toBe(`onnxd ${command}: ONNXD_JWT_SECRET is a placeholder: NODE_ENV=production needs a random secret, e.g. \`${MAKE_SECRET}\`\n`)
      // Nothing was built or written: the refusal came first.
      expect(readdirSync(dir)).toEqual([])
    })
  }
})
