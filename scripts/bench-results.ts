// Regenerates what docs/benchmarks.md shows of the kept benchmark results (bench/results/<date>-<name>.json): the
// index and tables between its "results" markers, and each serving run's chart (bench/results/<date>-<name>.svg).
// Run it after adding a result: `npx tsx scripts/bench-results.ts`. test/docs/docs.test.ts fails while the page and
// the data differ. Needs the dev dependencies (vega, vega-lite) for the charts.
import { readFileSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { chartRenderer } from '../src/bench/chart.js'
import { chartFile, kindOf, readResults, replaceResults, resultChartSpec, resultsMarkdown } from '../src/bench/results.js'

const root = resolve(import.meta.dirname, '..')
const dir = join(root, 'bench/results')
const page = join(root, 'docs/benchmarks.md')
const results = readResults(dir)
const render = await chartRenderer()
for (const k of results) {
  if (kindOf(k.json) !== 'serving') continue
  writeFileSync(join(dir, chartFile(k.file)), await render(resultChartSpec(k)))
}
writeFileSync(page, replaceResults(readFileSync(page, 'utf8'), resultsMarkdown(results)))
process.stdout.write(`${results.length} results: docs/benchmarks.md and ${results.filter((k) => kindOf(k.json) === 'serving').length} charts written\n`)
