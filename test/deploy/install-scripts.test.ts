// `npm install` runs no dependency's install script: every native dependency ships its binaries in its npm package
// (.ci/run installs with --ignore-scripts, and every suite passes on them), and onnxruntime-node's script would
// download the CUDA provider from outside the registry. package.json's allowScripts says so to npm: npm 11.16+ lists
// the install scripts it does not cover after every install, and npm 12 runs only the ones it allows.
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { INSTALL_HINT, ORT_INSTALL_SCRIPT } from '../../src/engine/model/session.js'
import { readDoc, ROOT } from '../helpers/markdown.js'

const json = (file: string): Record<string, unknown> => JSON.parse(readDoc(file)) as Record<string, unknown>

/** The packages of the lockfile that have an install script (npm marks them hasInstallScript), by name. */
function withInstallScripts(): string[] {
  const packages = json('package-lock.json').packages as Record<string, { hasInstallScript?: boolean }>
  const names = Object.entries(packages)
    .filter(([path, p]) => path && p.hasInstallScript)
    .map(([path]) => path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length))
  return [...new Set(names)].sort()
}

describe('install scripts', () => {
  it("package.json's allowScripts denies each dependency's install script, and names no other package", () => {
    const allow = json('package.json').allowScripts as Record<string, unknown>
    // A dependency added with an install script fails here until someone decides whether it needs to run.
    expect(Object.keys(allow).sort()).toEqual(withInstallScripts())
    for (const [name, value] of Object.entries(allow)) expect([name, value]).toEqual([name, false])
  })

  it('the lockfile has the packages this was written against (so the check above reads the right field)', () => {
    expect(withInstallScripts()).toEqual(expect.arrayContaining(['koffi', 'onnxruntime-node', '@photostructure/sqlite']))
  })

  it("a node asked for cuda without its provider says to run onnxruntime-node's install script, by a path that exists", () => {
    expect(existsSync(ORT_INSTALL_SCRIPT)).toBe(true)
    expect(INSTALL_HINT.cuda).toContain(`ONNXRUNTIME_NODE_INSTALL=cuda12 node ${ORT_INSTALL_SCRIPT}`)
    expect(INSTALL_HINT.cuda).not.toContain('npm rebuild')
  })

  it("the docs' command for the CUDA provider runs that script from the project's directory", () => {
    const doc = readDoc('docs/runtimes-and-gpus.md')
    const m = /^ONNXRUNTIME_NODE_INSTALL=cuda12 node (\S+)$/m.exec(doc)
    expect(m).not.toBeNull()
    expect(existsSync(join(ROOT, m![1]))).toBe(true)
    expect(doc).not.toContain('npm rebuild onnxruntime-node')
  })
})
