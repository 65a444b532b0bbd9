// An install without the dev dependencies (vega, vega-lite, cli-progress hidden from module resolution, as
// `npm install --omit=dev` leaves them out): `onnxd serve` and `onnxd node` load and answer --help, and `onnxd bench`
// stops at its start with one line saying how to install them, before it builds or measures anything.
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { runToEnd } from '../helpers/servers.js'

const ENTRY = join(import.meta.dirname, '../helpers/onnxd-src.ts')
const HIDE = join(import.meta.dirname, '../helpers/hide-packages.mjs')
const BENCH_PACKAGES = 'vega,vega-lite,cli-progress'

function onnxd(argv: string[]): ReturnType<typeof runToEnd> {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ONNXD_')))
  return runToEnd([process.execPath, '--import', 'tsx', '--import', HIDE, ENTRY, ...argv], { env: { ...env, ONNXD_TEST_HIDE_PACKAGES: BENCH_PACKAGES } })
}

describe('without the dev dependencies', () => {
  it('the hook hides vega too, not only cli-progress (which bar mode loads first)', async () => {
    const r = await onnxd(['bench', '--smoke', '--no-progress'])
    expect(r.stderr).toMatch(/needs vega(-lite)?, which is not installed/)
  })

  it.each([['serve'], ['node']])('onnxd %s loads and answers --help', async (command) => {
    const r = await onnxd([command, '--help'])
    expect(r.stderr).toBe('')
    expect(r.code).toBe(0)
    expect(r.stdout).toContain('usage')
  })

  it('onnxd bench says in one line to install them, and exits 1', async () => {
    const r = await onnxd(['bench', '--smoke'])
    expect(r.code).toBe(1)
    expect(r.stdout).toBe('')
    expect(r.stderr).toMatch(/^onnxd bench: the benchmark needs (vega|vega-lite|cli-progress), which is not installed: install the dev dependencies \(`npm install --include=dev` in the onnxd folder\)\n$/)
  })
})
