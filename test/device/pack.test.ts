// The device archive's file list (scripts/device/pack.ts), checked without packing or compressing anything: Node's
// bits come from npm at pack time, everything else from this checkout. The list holds what the run loads on a Linux
// x64 machine (dist/, onnxruntime-node's Linux x64 library and binding, koffi's and SQLite's Linux x64 binaries, every
// package a module of dist/ imports, llama.cpp's Vulkan build) and leaves out other platforms' binaries and build
// sources.
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { builtinModules } from 'node:module'
import { join, resolve } from 'node:path'
import { describe, expect, it } from 'vitest'
import { BENCH_PACKAGES, LLAMA_PACKAGES, packPlan, type PackPlan } from '../../scripts/device/pack.js'

const root = resolve(import.meta.dirname, '../..')
const built = existsSync(join(root, 'dist', 'cli.js'))

/** Package names a compiled module imports by bare specifier (static and dynamic), builtins aside. */
function bareImports(dir: string): Set<string> {
  const names = new Set<string>()
  for (const f of readdirSync(dir, { recursive: true }).map(String)) {
    if (!f.endsWith('.js')) continue
    const text = readFileSync(join(dir, f), 'utf8')
    for (const m of text.matchAll(/^\s*(?:import|export)\b[^;'"]*?\bfrom\s+['"]([^'"]+)['"]|\bimport\(\s*['"]([^'"]+)['"]\s*\)|^\s*import\s+['"]([^'"]+)['"]/gm)) {
      const spec = m[1] ?? m[2] ?? m[3]
      if (spec.startsWith('.') || spec.startsWith('node:') || builtinModules.includes(spec)) continue
      names.add(spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0])
    }
  }
  return names
}

describe.skipIf(!built)(`device archive file list${built ? '' : ' [skipped: dist/ is not built (npm run build)]'}`, () => {
  const plan: PackPlan = built ? packPlan(root) : (null as unknown as PackPlan)
  const paths = built ? new Set(plan.files.map((f) => f.to)) : new Set<string>()
  const has = (p: string): boolean => paths.has(p)

  it('holds the app, ORT, koffi and SQLite for Linux x64, and llama.cpp\'s Vulkan build', () => {
    for (const p of [
      'app/package.json',
      'app/bin/onnxd.js',
      'app/dist/cli.js',
      'app/dist/bench/run.js',
      'app/dist/bench/targets/node-main.js',
      'app/dist/bench/peer/llama-cpp.js',
      'app/node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime.so.1',
      'app/node_modules/onnxruntime-node/bin/napi-v6/linux/x64/onnxruntime_binding.node',
      'app/node_modules/@koromix/koffi-linux-x64/linux_x64/koffi.node',
      'app/node_modules/@photostructure/sqlite/prebuilds/linux-x64/@photostructure+sqlite.glibc.node',
      'app/node_modules/node-llama-cpp/package.json',
      'app/node_modules/@node-llama-cpp/linux-x64-vulkan/bins/linux-x64-vulkan/libggml-vulkan.so',
      'app/node_modules/@node-llama-cpp/linux-x64-vulkan/bins/linux-x64-vulkan/llama-addon.node',
    ])
      expect(has(p), p).toBe(true)
    for (const name of [...BENCH_PACKAGES, ...LLAMA_PACKAGES]) expect(plan.packages.has(name), name).toBe(true)
  })

  it('has every package a module of dist/ imports', () => {
    const missing = [...bareImports(join(root, 'dist'))].filter((n) => !plan.packages.has(n)).sort()
    // The benchmark's transformers.js peer is left out (the device run passes --no-peer), and tsx, which only a
    // module running from src/ loads (grammar.ts's worker under tsx); nothing else is.
    expect(missing).toEqual(['@huggingface/transformers', 'tsx'])
  })

  it("leaves out other platforms' binaries, build sources, declarations and maps", () => {
    const bad = [...paths].filter((p) =>
      /onnxruntime-node\/bin\/napi-v\d+\/(darwin|win32|linux\/arm64)\/|@node-llama-cpp\/(?!linux-x64-vulkan\/)|@koromix\/koffi-(?!linux-x64\/)|gitRelease\.bundle|@photostructure\/sqlite\/(src\/|prebuilds\/(?!linux-x64\/)|.*\.musl\.node$)|\.d\.ts$|\.map$/.test(p),
    )
    expect(bad).toEqual([])
    expect(plan.leftOut.map((l) => l.why)).toContain('onnxruntime-node for macOS and Windows')
    // Uncompressed, without Node: well under what a careless list would take (node_modules is over 1 GB here).
    expect(plan.bytes).toBeLessThan(300 * 1024 ** 2)
  })

  it('--no-llama-cpp leaves node-llama-cpp and its Vulkan build out', () => {
    const p = packPlan(root, { llamaCpp: false })
    expect(p.packages.has('node-llama-cpp')).toBe(false)
    expect(p.files.some((f) => f.to.includes('@node-llama-cpp/'))).toBe(false)
    expect(p.bytes).toBeLessThan(plan.bytes)
  })
})
