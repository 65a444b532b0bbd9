// bin/onnxd.js runs the compiled CLI in dist/; in a checkout whose dist/ is missing or older than src/ it says so in
// one line (run `npm run build`) instead of a stack trace or yesterday's code. Without src/ (an installed package,
// the Docker image) it only needs dist/.
import { spawnSync } from 'node:child_process'
import { cpSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'

const BIN = join(import.meta.dirname, '../../bin/onnxd.js')

let root = ''
afterEach(() => rmSync(root, { recursive: true, force: true }))

/** A package with bin/onnxd.js and, as asked, a dist/cli.js whose main() prints its arguments, and src/ files. */
function pkg(o: { dist: boolean; src?: Record<string, Date> }): string {
  root = mkdtempSync(join(tmpdir(), 'onnxd-bin-'))
  writeFileSync(join(root, 'package.json'), JSON.stringify({ type: 'module' }))
  mkdirSync(join(root, 'bin'))
  cpSync(BIN, join(root, 'bin', 'onnxd.js'))
  const built = new Date('2026-01-02T00:00:00Z')
  if (o.dist) {
    mkdirSync(join(root, 'dist'))
    writeFileSync(join(root, 'dist', 'cli.js'), 'export function main(argv) { process.stdout.write(`main ${argv.join(" ")}\\n`) }\n')
    utimesSync(join(root, 'dist', 'cli.js'), built, built)
  }
  for (const [file, mtime] of Object.entries(o.src ?? {})) {
    mkdirSync(join(root, 'src', file, '..'), { recursive: true })
    writeFileSync(join(root, 'src', file), '')
    utimesSync(join(root, 'src', file), mtime, mtime)
  }
  return join(root, 'bin', 'onnxd.js')
}

const run = (bin: string) => spawnSync(process.execPath, [bin, 'serve', '--port', '1'], { encoding: 'utf8' })
const older = new Date('2026-01-01T00:00:00Z')
const newer = new Date('2026-01-03T00:00:00Z')

describe('bin/onnxd.js', () => {
  it('runs dist/cli.js with the arguments when dist/ is newer than every source', () => {
    const r = run(pkg({ dist: true, src: { 'cli.ts': older, 'node/app.ts': older } }))
    expect(r).toMatchObject({ status: 0, stdout: 'main serve --port 1\n', stderr: '' })
  })

  it('runs dist/ alone where there is no src/ (installed package, Docker image)', () => {
    expect(run(pkg({ dist: true }))).toMatchObject({ status: 0, stdout: 'main serve --port 1\n' })
  })

  it('names a source newer than the build, in one line, exit 1', () => {
    const r = run(pkg({ dist: true, src: { 'cli.ts': older, 'node/app.ts': newer } }))
    expect(r.status).toBe(1)
    expect(r.stdout).toBe('')
    expect(r.stderr).toMatch(/^onnxd: dist\/ is older than src\/ \(src\/node\/app\.ts changed\): run `npm run build` in \S+\n$/)
  })

  it('says dist/ is not built, in one line, exit 1', () => {
    const r = run(pkg({ dist: false, src: { 'cli.ts': older } }))
    expect(r.status).toBe(1)
    expect(r.stderr).toMatch(/^onnxd: dist\/ is not built: run `npm run build` in \S+\n$/)
  })
})
