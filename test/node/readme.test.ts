// The node's docs cannot drift: every registered metric is in docs/metrics.md, every option (flag and variable) in
// docs/configuration.md.
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { NODE_ENV, NODE_FLAGS } from '../../src/node/options.js'
import { createMetrics, createRegistry } from '../../src/node/plugins/metrics.js'

const metricsMd = readFileSync(new URL('../../docs/metrics.md', import.meta.url), 'utf8')
const configMd = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8')

describe('docs pages (node)', () => {
  it('documents every metric the node registers, with its type', () => {
    const registry = createRegistry()
    createMetrics(registry, 'm', 'cpu')
    const metrics = registry.getMetricsAsArray()
    expect(metrics.length).toBeGreaterThan(20)
    for (const m of metrics) expect(metricsMd, m.name).toMatch(new RegExp(`\\| \`${m.name}\` \\| ${m.type} \\|`))
  })

  it('documents every option with its flag and environment variable', () => {
    for (const [field, env] of Object.entries(NODE_ENV)) {
      expect(configMd, field).toMatch(new RegExp(`\\| \`--${NODE_FLAGS[field as keyof typeof NODE_FLAGS]}[ \`].*\\| \`${env}\` \\|`))
    }
  })
})
