// The benchmark's own packages are devDependencies loaded with import() when a run starts (src/bench/dev-deps.ts):
// one that is not installed stops `onnxd bench` with one line saying how to install them; any other failure is
// left as it is. test/architecture.test.ts holds that no command imports them statically.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { devDependency, INSTALL_DEV } from '../../src/bench/dev-deps.js'
import { isOnnxdError } from '../../src/shared/errors.js'
import { Progress } from '../../src/bench/progress.js'

describe('the benchmark\'s dev dependencies', () => {
  it('a package that is not installed is one line naming it and how to install the dev dependencies', async () => {
    let err: unknown
    try {
      await devDependency('onnxd-no-such-package', () => import('onnxd-no-such-package' as string))
    } catch (e) {
      err = e
    }
    expect(isOnnxdError(err) && err.code === 'config').toBe(true)
    const message = (err as Error).message
    expect(message).toBe(`the benchmark needs onnxd-no-such-package, which is not installed: ${INSTALL_DEV}`)
    expect(message).not.toContain('\n')
    expect(message).toContain('npm install --include=dev')
  })

  it('any other failure is thrown as it is', async () => {
    const boom = new Error("Cannot find package 'something-else' imported from vega")
    Object.assign(boom, { code: 'ERR_MODULE_NOT_FOUND' })
    await expect(devDependency('vega', () => Promise.reject(boom))).rejects.toBe(boom)
  })

  it('are devDependencies, not the runtime dependencies the product installs', () => {
    const pkg = JSON.parse(readFileSync(join(import.meta.dirname, '../../package.json'), 'utf8')) as Record<string, Record<string, string>>
    for (const name of ['vega', 'vega-lite', 'cli-progress', '@types/cli-progress']) {
      expect(pkg.dependencies).not.toHaveProperty(name)
      expect(pkg.devDependencies).toHaveProperty(name)
    }
  })

  it('opens a silent progress, and a bar-mode one with cli-progress loaded', async () => {
    const silent = await Progress.open('silent')
    expect(silent).toBeInstanceOf(Progress)
    const bar = await Progress.open('bar', { isTTY: false, write: () => true } as unknown as NodeJS.WriteStream)
    bar.level('x', 1, null).done('ok')
  })
})
