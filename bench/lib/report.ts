// Benchmark reporting for the scripts under bench/: the machine a run happened on, statistics, and the JSON report
// on disk. The implementations live in src/bench (the `onnxd bench` command ships them); this file re-exports
// them so there is one copy.
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { stamp, systemInfo, systemLine, type SystemInfo } from '../../src/bench/system.js'

export { mean, median, percentile, rsd } from '../../src/bench/stats.js'
export { stamp, systemInfo, type SystemInfo }

/** Writes `report` to bench/results/<name>-<stamp>.json and returns the path. */
export function writeReport(name: string, report: object, dir = join(import.meta.dirname, '..', 'results')): string {
  mkdirSync(dir, { recursive: true })
  const path = join(dir, `${name}-${stamp()}.json`)
  writeFileSync(path, JSON.stringify(report, null, 2) + '\n')
  return path
}

export function printSystem(s: SystemInfo): void {
  process.stdout.write(`${systemLine(s)}\n`)
}
