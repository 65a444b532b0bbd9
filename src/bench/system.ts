// What a benchmark ran on: the machine (CPU model, cores, memory, OS, execution provider) and the versions of
// everything measured. Shared by `onnxd bench` and the scripts under bench/. Imports: node only.
import { arch, cpus, platform, release, totalmem } from 'node:os'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)

/** A package's installed version, or null when it is not installed (optional ones, such as transformers.js). */
export function packageVersion(pkg: string): string | null {
  try {
    return (JSON.parse(readFileSync(require.resolve(`${pkg}/package.json`), 'utf8')) as { version: string }).version
  } catch {
    // Packages whose "exports" hide package.json: walk up from the entry point.
    try {
      const entry = require.resolve(pkg)
      const at = entry.lastIndexOf(`/node_modules/${pkg}/`)
      if (at < 0) return null
      const dir = entry.slice(0, at + `/node_modules/${pkg}/`.length)
      return (JSON.parse(readFileSync(`${dir}package.json`, 'utf8')) as { version: string }).version
    } catch {
      return null
    }
  }
}

export interface SystemInfo {
  node: string
  os: string
  cpu: string
  cores: number
  memoryGiB: number
  /** SIMD extensions ORT's CPU kernels use, from /proc/cpuinfo (empty where unknown). */
  cpuFlags: string[]
  onnxruntime: string
  onnxd: string
}

const SIMD = ['avx', 'avx2', 'fma', 'avx512f', 'avx512_vnni', 'avx512_bf16', 'amx_tile', 'neon', 'asimd']

function cpuFlags(): string[] {
  try {
    const info = readFileSync('/proc/cpuinfo', 'utf8')
    const line = info.split('\n').find((l) => /^(flags|Features)\s*:/.test(l)) ?? ''
    const have = new Set(line.split(':')[1]?.trim().split(/\s+/) ?? [])
    return SIMD.filter((f) => have.has(f))
  } catch {
    return []
  }
}

/** onnxd's own version, from the package.json two levels up (src/bench or dist/bench). */
export function onnxdVersion(): string {
  return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version
}

export function systemInfo(): SystemInfo {
  const c = cpus()
  return {
    node: process.version,
    os: `${platform()} ${release()} ${arch()}`,
    cpu: c[0]?.model ?? 'unknown',
    cores: c.length,
    memoryGiB: Math.round((totalmem() / 1024 ** 3) * 10) / 10,
    cpuFlags: cpuFlags(),
    onnxruntime: packageVersion('onnxruntime-node') ?? 'unknown',
    onnxd: onnxdVersion(),
  }
}

/** One line naming the machine, for the top of every benchmark's output. */
export function systemLine(s: SystemInfo): string {
  const flags = s.cpuFlags.length ? ` (${s.cpuFlags.join(' ')})` : ''
  return `machine: ${s.cpu}${flags}, ${s.cores} cores, ${s.memoryGiB} GiB; ${s.os}; node ${s.node}; onnxruntime-node ${s.onnxruntime}; onnxd ${s.onnxd}`
}

/** A file-name-safe timestamp. */
export const stamp = (d = new Date()): string => d.toISOString().replace(/[:.]/g, '-')
