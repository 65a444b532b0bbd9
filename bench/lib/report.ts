// Benchmark reporting: the machine a run happened on, a table on stdout, and the JSON report on disk.
import { cpus, totalmem, platform, arch, release } from 'node:os'
import { mkdirSync, writeFileSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const version = (pkg: string): string => {
  try {
    return (JSON.parse(readFileSync(require.resolve(`${pkg}/package.json`), 'utf8')) as { version: string }).version
  } catch {
    return 'unknown'
  }
}

export interface SystemInfo {
  node: string
  os: string
  cpu: string
  cores: number
  memoryGiB: number
  onnxruntime: string
  onnxd: string
}

export function systemInfo(): SystemInfo {
  const c = cpus()
  return {
    node: process.version,
    os: `${platform()} ${release()} ${arch()}`,
    cpu: c[0]?.model ?? 'unknown',
    cores: c.length,
    memoryGiB: Math.round((totalmem() / 1024 ** 3) * 10) / 10,
    onnxruntime: version('onnxruntime-node'),
    onnxd: (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version,
  }
}

export const stamp = (): string => new Date().toISOString().replace(/[:.]/g, '-')

/** Writes `report` to bench/results/<name>-<stamp>.json and returns the path. */
export function writeReport(name: string, report: object, dir = join(import.meta.dirname, '..', 'results')): string {
  mkdirSync(dir, { recursive: true })
  const path = join(dir, `${name}-${stamp()}.json`)
  writeFileSync(path, JSON.stringify(report, null, 2) + '\n')
  return path
}

export const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2
}

export function percentile(xs: number[], p: number): number {
  if (!xs.length) return NaN
  const s = [...xs].sort((a, b) => a - b)
  const i = Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))
  return s[i]
}

export const mean = (xs: number[]): number => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN)

/** Relative standard deviation in percent. */
export function rsd(xs: number[]): number {
  const m = mean(xs)
  const v = mean(xs.map((x) => (x - m) ** 2))
  return (Math.sqrt(v) / m) * 100
}

export function printSystem(s: SystemInfo): void {
  process.stdout.write(`machine: ${s.cpu}, ${s.cores} cores, ${s.memoryGiB} GiB; ${s.os}; node ${s.node}; onnxruntime-node ${s.onnxruntime}; onnxd ${s.onnxd}\n`)
}
