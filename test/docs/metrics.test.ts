// docs/metrics.md beyond the two servers' tables (test/docs/docs.test.ts holds those): the buckets of every histogram
// both servers register, the process metrics each /metrics ends with, and the deprecated names, each table held to
// the code both ways.
import type { Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import { createFacadeMetrics } from '../../src/facade/metrics.js'
import { createMetrics, createRegistry, DEPRECATED_METRICS } from '../../src/node/plugins/metrics.js'
import { DROPPED_PROCESS_METRICS, processMetrics } from '../../src/shared/metrics.js'
import { readDoc, section, tableRows, unquote } from '../helpers/markdown.js'

const md = readDoc('docs/metrics.md')

function registries(): Registry[] {
  const node = createRegistry()
  createMetrics(node, 'm', 'cpu')
  return [node, createFacadeMetrics({ router: { snapshot: () => [] }, rateLimitFailures: () => undefined }).registry]
}

describe('docs/metrics.md', () => {
  it('lists the buckets of every histogram either server registers, and nothing else', () => {
    const code = new Map(
      registries()
        .flatMap((r) => r.getMetricsAsArray())
        .filter((m) => String(m.type) === 'histogram')
        .map((m) => [m.name, (m as unknown as { upperBounds: number[] }).upperBounds]),
    )
    expect(code.size).toBeGreaterThan(10)
    const doc = new Map(tableRows(section(md, 'Histogram buckets')).map((r) => [unquote(r[0]!), r[1]!.split(',').map((b) => Number(b.trim()))]))
    expect(doc).toEqual(code)
  })

  it("lists the process's metrics every /metrics ends with, with their types and labels, and nothing else", () => {
    const code = new Map(
      processMetrics()
        .getMetricsAsArray()
        .map((m) => [m.name, { type: String(m.type), labels: ((m as unknown as { labelNames?: string[] }).labelNames ?? []).slice().sort() }]),
    )
    const doc = new Map(
      tableRows(section(md, 'Process metrics')).map((r) => [
        unquote(r[0]!),
        { type: r[1]!, labels: r[2]!.split(',').map((l) => unquote(l.trim())).filter(Boolean).sort() },
      ]),
    )
    expect(doc).toEqual(code)
    expect(code.has('process_cpu_seconds_total')).toBe(true)
    for (const name of DROPPED_PROCESS_METRICS) {
      expect(code.has(name), name).toBe(false)
      expect(section(md, 'Process metrics'), name).toContain(`\`${name}\``)
    }
  })

  it('lists each deprecated name with its replacement and the release that removes it; the node table marks it', () => {
    const doc = tableRows(section(md, 'Deprecated names')).map((r) => ({ name: unquote(r[0]!), replacement: unquote(r[1]!), removedIn: r[2]! }))
    expect(doc).toEqual(DEPRECATED_METRICS)
    const node = section(md, "The node's metrics")
    for (const d of DEPRECATED_METRICS) {
      expect(node).toContain(`| \`${d.name}\` |`)
      expect(node).toMatch(new RegExp(`\\| \`${d.name}\` \\|[^\\n]*Deprecated: \`${d.replacement}\` under its old name, removed in ${d.removedIn.replace(/\./g, '\\.')}`))
    }
  })
})
