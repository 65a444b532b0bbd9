// The docs pages cannot drift from the code: every option of the node and the facade is in configuration.md with
// its variable, flag and default (and no row names an option that does not exist), every metric each server
// registers is in metrics.md with its type and labels (and nothing else is), every error code is in errors.md with
// its status and type, every field of the node's /health and completion request in node-api.md, every
// chat field in api.md, benchmarks.md shows the kept results (bench/results) as
// generated and the bench's --help, every ONNXD_* variable the code names is documented, every relative link of the
// README and the docs resolves to a file and a heading.
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import { FACADE_ARG_FLAGS } from '../../src/cli/operator.js'
import { CONTEXT_USAGE } from '../../src/bench/context.js'
import { USAGE } from '../../src/bench/options.js'
import { chartFile, generatedResults, kindOf, readResults, resultsMarkdown } from '../../src/bench/results.js'
import { CompletionRequest } from '../../src/contract/completions.js'
import { HealthBody } from '../../src/contract/health.js'
import { createFacadeMetrics } from '../../src/facade/metrics.js'
import { ChatParams } from '../../src/facade/routes/chat-completions/schema.js'
import { FacadeOptions, FACADE_ENV, FACADE_FLAGS } from '../../src/facade/options.js'
import { ERROR_CODES, errorStatus, errorType } from '../../src/shared/errors.js'
import { NodeOptions, NODE_ENV, NODE_FLAGS } from '../../src/node/options.js'
import { createMetrics, createRegistry } from '../../src/node/plugins/metrics.js'
import { linkProblem, readDoc, ROOT, relativeLinks, section, tableRows, unquote } from '../helpers/markdown.js'

/** How a default reads in a table: `8081`, `127.0.0.1`, `http://127.0.0.1:8081` (a list, comma-separated), `{}`. */
const shown = (v: unknown): string => `\`${Array.isArray(v) ? v.join(',') : typeof v === 'object' ? JSON.stringify(v) : String(v)}\``
const defaultOf = (schema: { properties: Record<string, { default?: unknown }> }, field: string): unknown => schema.properties[field]?.default

describe('docs/configuration.md', () => {
  const md = readDoc('docs/configuration.md')

  it('the node table has one row per option: its flag, variable and default', () => {
    const rows = tableRows(section(md, 'Worker node (`onnxd node`)'))
    const byEnv = new Map(rows.map((r) => [unquote(r[1]!), r]))
    expect(rows.length).toBe(Object.keys(NODE_ENV).length)
    for (const [field, env] of Object.entries(NODE_ENV) as [keyof typeof NODE_ENV, string][]) {
      const row = byEnv.get(env)
      expect(row, env).toBeDefined()
      expect(row![0], env).toMatch(new RegExp(`^\`--${NODE_FLAGS[field]}[ \`]`))
      const d = defaultOf(NodeOptions, field)
      if (d !== undefined) expect(row![2], env).toBe(shown(d))
    }
  })

  it('the facade table has one row per option: its name, variable, flag (none for the JWT secret) and default', () => {
    const rows = tableRows(section(md, 'Facade (`onnxd facade`)')).filter((r) => r.length === 5)
    const byField = new Map(rows.map((r) => [r[0]!, r]))
    expect(rows.length).toBe(Object.keys(FACADE_ENV).length)
    for (const [field, env] of Object.entries(FACADE_ENV) as [keyof typeof FACADE_ENV, string][]) {
      const row = byField.get(field)
      expect(row, field).toBeDefined()
      expect(row![1], field).toBe(`\`${env}\``)
      expect(row![2], field).toBe(FACADE_ARG_FLAGS.includes(FACADE_FLAGS[field]) ? `\`--${FACADE_FLAGS[field]}\`` : '')
      const d = defaultOf(FacadeOptions, field)
      if (d !== undefined) expect(row![3], field).toBe(shown(d))
    }
  })
})

/** The rows of a metrics table: name, type, and the labels as a sorted list. */
const metricRows = (md: string): Map<string, { type: string; labels: string[] }> =>
  new Map(
    tableRows(md).map((r) => [
      unquote(r[0]!),
      { type: r[1]!, labels: r[2]!.split(',').map((l) => unquote(l.trim())).filter(Boolean).sort() },
    ]),
  )

/** What a registry registers: name, type and sorted label names of each metric. */
const registered = (registry: Registry): Map<string, { type: string; labels: string[] }> =>
  new Map(
    registry.getMetricsAsArray().map((m) => {
      const labels = ((m as unknown as { labelNames?: string[] }).labelNames ?? []).slice().sort()
      return [m.name, { type: String(m.type), labels }]
    }),
  )

describe('docs/metrics.md', () => {
  const md = readDoc('docs/metrics.md')

  it("the node's table is every metric the node registers, with its type and labels, and nothing else", () => {
    const registry = createRegistry()
    createMetrics(registry, 'm', 'cpu')
    const code = registered(registry)
    expect(code.size).toBeGreaterThan(20)
    expect(metricRows(section(md, "The node's metrics"))).toEqual(code)
  })

  it("the facade's table is every metric the facade registers, with its type and labels, and nothing else", () => {
    const { registry } = createFacadeMetrics({ router: { snapshot: () => [] }, rateLimitFailures: () => undefined })
    const code = registered(registry)
    expect(code.size).toBeGreaterThan(5)
    expect(metricRows(section(md, "The facade's metrics"))).toEqual(code)
  })
})

describe('docs/errors.md', () => {
  it('the code table is every error code with its status and type, and nothing else', () => {
    const rows = tableRows(section(readDoc('docs/errors.md'), 'Error codes'))
    const doc = Object.fromEntries(rows.map((r) => [unquote(r[0]!), [Number(r[1]), unquote(r[2]!)]]))
    expect(doc).toEqual(Object.fromEntries(ERROR_CODES.map((c) => [c, [errorStatus(c), errorType(c)]])))
  })
})

describe('docs/node-api.md', () => {
  it("the /health table names every field of the node's health body, and nothing else", () => {
    const rows = tableRows(section(readDoc('docs/node-api.md'), 'GET /health'))
    const documented = rows.flatMap((r) => r[0]!.split(',').map((c) => unquote(c.trim())))
    expect(documented.sort()).toEqual(Object.keys(HealthBody.properties).sort())
  })
})

describe('docs/benchmarks.md', () => {
  const md = readDoc('docs/benchmarks.md')
  it('shows every kept result in bench/results as scripts/bench-results.ts generates it, each serving run with its chart', () => {
    const results = readResults(join(ROOT, 'bench/results'))
    expect(results.length).toBeGreaterThan(0)
    expect(generatedResults(md)).toBe(resultsMarkdown(results))
    for (const k of results) if (kindOf(k.json) === 'serving') expect(existsSync(join(ROOT, 'bench/results', chartFile(k.file))), k.file).toBe(true)
  })
  it("prints the serving benchmark's and the context sweep's options as --help does", () => {
    expect(md).toContain('```\n' + USAGE + '```')
    expect(md).toContain('```\n' + CONTEXT_USAGE + '```')
  })
})

describe('request fields', () => {
  it("node-api.md names every field of the node's completion request", () => {
    const text = section(readDoc('docs/node-api.md'), 'Request')
    expect(Object.keys(CompletionRequest.properties).filter((k) => !text.includes(`\`${k}\``))).toEqual([])
  })
  it('api.md names every field a chat completion honours', () => {
    const text = section(readDoc('docs/api.md'), 'Chat completions')
    expect(Object.keys(ChatParams.properties).filter((k) => !text.includes(`\`${k}\``))).toEqual([])
  })
})

describe('environment variables', () => {
  /** Every file under `dir`, recursively. */
  const files = (dir: string): string[] => readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : [join(dir, e.name)]))
  it('every ONNXD_* name the code uses is documented in docs/ (warning codes aside)', () => {
    const code = files(join(ROOT, 'src')).filter((f) => f.endsWith('.ts')).map((f) => readFileSync(f, 'utf8'))
    const warnings = new Set(code.flatMap((t) => [...t.matchAll(/code: '(ONNXD_[A-Z0-9_]+)'/g)].map((m) => m[1]!)))
    const names = new Set(code.flatMap((t) => [...t.matchAll(/\bONNXD_[A-Z0-9_]+/g)].map((m) => m[0])))
    const docs = readdirSync(join(ROOT, 'docs')).map((f) => readDoc(`docs/${f}`)).join('\n')
    expect(names.size).toBeGreaterThan(40)
    expect([...names].filter((n) => !warnings.has(n) && !docs.includes(n))).toEqual([])
  })
})

describe('links', () => {
  const pages = ['README.md', 'bench/README.md', ...readdirSync(new URL('../../docs', import.meta.url)).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)]
  it.each(pages)('%s: every relative link resolves to a file and a heading', (page) => {
    const problems = relativeLinks(readDoc(page))
      .map((l) => linkProblem(page, l))
      .filter((p) => p !== null)
    expect(problems).toEqual([])
  })
})
