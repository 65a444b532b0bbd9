#!/usr/bin/env node
// The `onnxd` command: runs the compiled CLI in dist/ (built at install by the prepare script, or `npm run build`).
// Where src/ sits beside it (a checkout, not an installed package or the Docker image), a dist/ that is missing or
// older than src/ stops it with one line saying so, instead of a stack trace or yesterday's code.
import { existsSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

const root = join(import.meta.dirname, '..')
const cli = join(root, 'dist', 'cli.js')
const src = join(root, 'src')

/** The newest .ts file under src/, or null. */
function newestSource() {
  let newest = null
  for (const name of readdirSync(src, { recursive: true })) {
    if (!String(name).endsWith('.ts')) continue
    const mtimeMs = statSync(join(src, String(name))).mtimeMs
    if (newest === null || mtimeMs > newest.mtimeMs) newest = { name: String(name), mtimeMs }
  }
  return newest
}

let problem = null
if (!existsSync(cli)) {
  problem = 'dist/ is not built'
} else if (existsSync(src)) {
  const newest = newestSource()
  if (newest !== null && newest.mtimeMs > statSync(cli).mtimeMs) problem = `dist/ is older than src/ (src/${newest.name} changed)`
}
if (problem !== null) {
  process.stderr.write(`onnxd: ${problem}: run \`npm run build\` in ${root}\n`)
  process.exit(1)
}
import(pathToFileURL(cli).href).then((m) => m.main(process.argv.slice(2)))
