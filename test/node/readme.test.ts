// The README's node section cannot drift: every registered metric and every option (flag and variable) is in it.
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { NODE_ENV, NODE_FLAGS } from '../../src/node/options.js'
import { createMetrics, createRegistry } from '../../src/node/plugins/metrics.js'

const md = readFileSync(new URL('../../README.md', import.meta.url), 'utf8')

describe('README.md (node section)', () => {
  it('documents every metric the node registers, with its type', () => {
    const registry = createRegistry()
    createMetrics(registry, 'm', 'cpu')
    const metrics = registry.getMetricsAsArray()
    expect(metrics.length).toBeGreaterThan(20)
    for (const m of metrics) expect(md, m.name).toMatch(new RegExp(`\\| \`${m.name}\` \\| ${m.type} \\|`))
  })

  it('documents every option with its flag and environment variable', () => {
    for (const [field, env] of Object.entries(NODE_ENV)) {
      expect(md, field).toMatch(new RegExp(`\\| \`--${NODE_FLAGS[field as keyof typeof NODE_FLAGS]}[ \`].*\\| \`${env}\` \\|`))
    }
  })
})
