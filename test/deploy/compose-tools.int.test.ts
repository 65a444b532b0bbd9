// The deployment files through the real tools an operator runs (issue #35): compose.yaml rendered by Debian
// bookworm's docker-compose (1.29, the oldest Compose it is meant for), and compose.yaml plus deploy/ through
// yamllint with the repository's .yamllint.yaml. Each suite reports as skipped, with its reason, where its tool is
// absent; .ci/run installs both (Debian's docker-compose and yamllint packages).
import { spawnSync } from 'node:child_process'
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { parse } from 'yaml'

const REPO = join(import.meta.dirname, '../..')

/** The tool's version line, or why it cannot run here. */
function tool(cmd: string, args: string[]): { version: string | null; reason: string } {
  const r = spawnSync(cmd, args, { encoding: 'utf8' })
  if (r.error || r.status !== 0) return { version: null, reason: `${cmd} is not installed (Debian: apt-get install ${cmd})` }
  return { version: (r.stdout || r.stderr).trim().split('\n')[0]!, reason: '' }
}

/** Runs `cmd` in `cwd` with only PATH (and `env`) in its environment, so the developer's variables do not leak in. */
function runIn(cwd: string, cmd: string, args: string[], env: Record<string, string> = {}) {
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: cwd, ...env } })
  return { code: r.status, stdout: r.stdout, stderr: r.stderr }
}

const compose = tool('docker-compose', ['version', '--short'])
const yamllint = tool('yamllint', ['--version'])

/** compose.yaml alone in a fresh folder (no .env of the developer's beside it), optionally edited. */
function composeCopy(edit?: (text: string) => string): string {
  const dir = mkdtempSync(join(tmpdir(), 'onnxd-compose-'))
  const text = readFileSync(join(REPO, 'compose.yaml'), 'utf8')
  writeFileSync(join(dir, 'compose.yaml'), edit ? edit(text) : text)
  return dir
}

describe.skipIf(compose.version === null)(`compose.yaml through docker-compose ${compose.version ?? `(skipped: ${compose.reason})`}`, () => {
  const SECRET = 'k7Vq2yq0bqkM7d3oQn0wXh2pQ4rj0cA1g6mR9bZt3sE5uW8yL1fH2dK4nP6xV0aJ'

  it('renders it, with every onnxd service, the health checks, and the secret from the environment', () => {
    const dir = composeCopy()
    const r = runIn(dir, 'docker-compose', ['-p', 'onnxd', '-f', 'compose.yaml', 'config'], { ONNXD_JWT_SECRET: SECRET })
    expect(r.stderr).toBe('')
    expect(r.code).toBe(0)
    const rendered = parse(r.stdout) as { services: Record<string, { environment?: Record<string, string>; healthcheck?: { test: string[] }; command?: string[] }> }
    expect(Object.keys(rendered.services).sort()).toEqual(['facade-1', 'facade-2', 'node-1', 'node-2', 'postgres', 'redis'])
    for (const f of ['facade-1', 'facade-2']) {
      expect(rendered.services[f]!.environment).toMatchObject({ NODE_ENV: 'production', ONNXD_JWT_SECRET: SECRET })
      expect(rendered.services[f]!.command).toEqual(['node', 'bin/onnxd.js', 'facade'])
    }
    // The folded healthcheck script reaches the container as one argument of `node -e`.
    const test = rendered.services['node-1']!.healthcheck!.test
    expect(test.slice(0, 3)).toEqual(['CMD', 'node', '-e'])
    expect(test[3]).toBe("fetch('http://127.0.0.1:8081/health') .then((r) => process.exit(r.status === 200 ? 0 : 1), () => process.exit(1))")
  })

  it('stops without ONNXD_JWT_SECRET, naming it', () => {
    const r = runIn(composeCopy(), 'docker-compose', ['-f', 'compose.yaml', 'config', '-q'])
    expect(r.code).not.toBe(0)
    expect(r.stderr).toContain('set ONNXD_JWT_SECRET (openssl rand -base64 48 makes one)')
  })

  it('is as strict as the release it checks: a top-level name: is refused', () => {
    const r = runIn(composeCopy((t) => `name: onnxd\n${t}`), 'docker-compose', ['-f', 'compose.yaml', 'config', '-q'], { ONNXD_JWT_SECRET: SECRET })
    expect(r.code).not.toBe(0)
    expect(r.stderr).toMatch(/'name' does not match any of the regexes/)
  })
})

describe.skipIf(yamllint.version === null)(`YAML through ${yamllint.version ?? `yamllint (skipped: ${yamllint.reason})`}`, () => {
  it('passes --strict (warnings fail too) on compose.yaml and deploy/ with the repository configuration', () => {
    const r = runIn(REPO, 'yamllint', ['--strict', '-c', '.yamllint.yaml', '-f', 'parsable', 'compose.yaml', 'deploy/'])
    expect(r.stdout).toBe('')
    expect(r.code).toBe(0)
  })

  it('fails on a comment indented unlike its content and a long line', () => {
    const dir = mkdtempSync(join(tmpdir(), 'onnxd-yamllint-'))
    copyFileSync(join(REPO, '.yamllint.yaml'), join(dir, '.yamllint.yaml'))
    writeFileSync(join(dir, 'bad.yaml'), `env:\n  - name: A\n    value: "1"\n      # a stray comment\nports: [8080]\nnote: ${'word '.repeat(30).trim()}\n`)
    const r = runIn(dir, 'yamllint', ['--strict', '-c', '.yamllint.yaml', '-f', 'parsable', 'bad.yaml'])
    expect(r.code).not.toBe(0)
    expect(r.stdout).toContain('(comments-indentation)')
    expect(r.stdout).toContain('(line-length)')
  })
})
