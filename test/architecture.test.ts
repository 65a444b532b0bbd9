// The layer rules of DESIGN.md ("Shape") and STYLE.md, held over every import in src/ (and, for the engine surface
// the benchmarks use, in the scripts of bench/): static `import` and `import type`, `export ... from`, dynamic
// `import('...')` with a literal, and `import('...')` types. Sources are
// read with the TypeScript parser, so imports in comments and strings do not count. The rules are data (LAYERS,
// EXCEPTIONS, PACKAGE_OWNERS below); the last cases plant violations to show that each rule can fail.
import { readdirSync, readFileSync } from 'node:fs'
import { builtinModules } from 'node:module'
import { join, posix, relative } from 'node:path'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const REPO = join(import.meta.dirname, '..')

type Layer = 'entry' | 'cli' | 'bench' | 'node' | 'facade' | 'engine' | 'builder' | 'store' | 'contract' | 'shared'

/** Which other layers each layer may import, and why. A layer always imports itself. */
const LAYERS: Record<Layer, { may: Layer[]; why: string }> = {
  shared: { may: [], why: 'the base every layer stands on: errors, config file, HTTP server helpers, signals' },
  contract: { may: ['shared'], why: "the node's HTTP contract: plain schemas, neither the engine's types nor the facade's" },
  engine: { may: ['shared'], why: 'no HTTP and no contract: its request and event types are its own plain data, cloned into worker threads' },
  store: { may: ['shared'], why: 'accounts, keys, usage behind one interface that a PostgreSQL or Redis backend can replace' },
  builder: { may: ['shared'], why: "the embedded model's builder writes bundles; it is a tool, not part of the runtime" },
  node: { may: ['shared', 'contract', 'engine', 'builder'], why: 'serves the contract over the engine pool; builds the embedded default model on first start' },
  facade: { may: ['shared', 'contract', 'store'], why: 'reaches nodes only through the HTTP contract, even when co-located, so it can front one node or many' },
  bench: { may: ['shared', 'contract', 'engine', 'builder', 'node', 'facade', 'store'], why: 'measures every layer, but starts nodes as the product does, never through the CLI' },
  cli: { may: ['shared', 'contract', 'engine', 'builder', 'node', 'facade', 'store', 'bench'], why: 'the commands compose the layers' },
  entry: { may: ['cli', 'shared'], why: 'src/cli.ts, the `onnxd` command: the table of subcommands; nothing else imports src/cli/' },
}

/** The one engine module through which each of these layers reaches the engine (besides the exceptions below), and why. */
const ENGINE_SURFACES: Partial<Record<Layer, { module: string; why: string }>> = {
  node: { module: 'src/engine/index.ts', why: "the engine's entry: EngineClient, createEnginePool and the plain data they speak" },
  cli: { module: 'src/engine/index.ts', why: "the engine's entry (`onnxd generate` runs one Engine in its process)" },
  bench: {
    module: 'src/engine/bench-surface.ts',
    why: 'what the benchmarks measure below the pool (an in-process engine, the KV cache, the graph as the engine runs it, the C API), chosen and documented in one place; the scripts in bench/ too',
  },
}
/** Folders of scripts outside src/ held to one rule only: they reach the engine through their layer's surface. */
const SCRIPTS: { folder: string; layer: Layer }[] = [{ folder: 'bench/', layer: 'bench' }]

/** Imports the layer table forbids, allowed one by one, each with its reason. `from` ending in '/' is a folder. */
const EXCEPTIONS: { from: string; to: string; why: string }[] = [
  {
    from: 'src/builder/',
    to: 'src/engine/model/onnx-proto.ts',
    why: "the ONNX protobuf codec (pure data, no ORT) is the one definition of the file format the engine's loader reads and the builder writes",
  },
  {
    from: 'src/builder/quantize.ts',
    to: 'src/engine/model/int8-weights.ts',
    why: "quantize_dynamic's int8 MatMul form (no ORT): the builder writes it for model_int8, and the loader rewrites 4-bit weights into it (--nbits-as-int8); defined once",
  },
]

/** Packages that one named module (or folder, ending in '/') owns, with any exception and its reason. */
const PACKAGE_OWNERS: { pkg: string; owners: string[]; exceptions?: { file: string; why: string }[] }[] = [
  {
    pkg: 'onnxruntime-node',
    owners: ['src/engine/model/session.ts'],
    exceptions: [
      {
        file: 'src/bench/refs/ort.ts',
        why: "the benchmark's decode ceiling must be ORT without onnxd's wrapper, or it would measure onnxd against itself",
      },
    ],
  },
  { pkg: 'koffi', owners: ['src/engine/model/ort-capi.ts'] },
  { pkg: 'node-llama-cpp', owners: ['src/bench/peer/llama-cpp.ts'] },
  // The benchmark's own packages (devDependencies): one importer each, which loads them with import() (dev-lazy).
  { pkg: 'vega', owners: ['src/bench/chart.ts'] },
  { pkg: 'vega-lite', owners: ['src/bench/chart.ts'] },
  { pkg: 'cli-progress', owners: ['src/bench/progress.ts'] },
  { pkg: '@mlc-ai/web-xgrammar', owners: ['src/engine/generation/grammar-thread.ts'] },
  { pkg: '@photostructure/sqlite', owners: ['src/store/sqlite.ts'] },
  { pkg: 'pg', owners: ['src/store/postgres.ts'] },
  { pkg: 'redis', owners: ['src/store/redis-rate-limit.ts'] },
  { pkg: 'piscina', owners: ['src/engine/pool/pool.ts'] },
  { pkg: 'prom-client', owners: ['src/node/', 'src/facade/metrics.ts', 'src/shared/metrics.ts'] },
  // The hub protocol (models by hub id) and the secret-strength estimator: one module each, loaded only when used.
  { pkg: '@huggingface/hub', owners: ['src/node/hub-model.ts'] },
  { pkg: '@zxcvbn-ts/core', owners: ['src/facade/auth/secret-strength.ts'] },
  { pkg: '@zxcvbn-ts/language-common', owners: ['src/facade/auth/secret-strength.ts'] },
  // Tracing's SDK is loaded (dynamically, only when tracing is on) by one module; spans are made with @opentelemetry/api.
  { pkg: '@opentelemetry/sdk-trace', owners: ['src/shared/tracing.ts'] },
  { pkg: '@opentelemetry/exporter-trace-otlp-http', owners: ['src/shared/tracing.ts'] },
  { pkg: '@opentelemetry/resources', owners: ['src/shared/tracing.ts'] },
  { pkg: '@opentelemetry/core', owners: ['src/shared/tracing.ts'] },
]

/** The engine has no HTTP (DESIGN "Shape"). */
const ENGINE_FORBIDDEN = ['fastify', 'undici', 'node:http', 'node:https', 'node:net', 'node:http2']

/** The rules the checker holds, by id: what `architecture(...)` reports and the cases below list. */
const RULES = {
  layers: 'each layer imports only the layers DESIGN allows it (LAYERS), bar the listed EXCEPTIONS',
  'no-cli': 'nothing imports src/cli/ except the entry src/cli.ts',
  'engine-entry': `each layer that uses the engine reaches it through one module (ENGINE_SURFACES): ${Object.entries(ENGINE_SURFACES).map(([l, s]) => `${l} through ${s.module}`).join(', ')}`,
  owners: 'one named module per native or runtime-owning package (PACKAGE_OWNERS), with any exception listed',
  'engine-no-http': `the engine imports no HTTP package (${ENGINE_FORBIDDEN.join(', ')})`,
  declared: "every package imported is a Node built-in or in package.json's dependencies; devDependencies only from src/bench/",
  'dev-lazy': 'no onnxd command imports a devDependency statically (type-only imports are erased): the benchmark loads its own packages with import() where it uses them, so an install without dev dependencies serves',
  cycles: 'no import cycle between layers',
  'file-cycles': 'no import cycle between files in src/ (type-only and dynamic imports count): each definition lives in the module it belongs to',
  resolved: 'every relative import resolves to a module in src/ (so none reaches test code)',
  'dynamic-literal': 'every dynamic import() names its module with a string literal (so this test can see it)',
  'known-layer': 'every file in src/ belongs to a known layer',
} as const
type Rule = keyof typeof RULES

export interface Violation {
  rule: Rule
  file: string
  line: number
  /** The import's specifier as written. */
  import: string
  message: string
}

interface Import {
  spec: string | null
  line: number
  /** `static`: loaded with the importing module; `type`: erased from the JavaScript; `dynamic`: import(). */
  kind: 'static' | 'type' | 'dynamic'
}

/** Every import of a TypeScript source; `spec` is null for a dynamic import whose module is not a literal. */
export function importsOf(file: string, text: string): Import[] {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS)
  const out: Import[] = []
  const add = (spec: string | null, node: ts.Node, kind: Import['kind'] = 'static'): void => {
    out.push({ spec, line: sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1, kind })
  }
  /** Only type names: `import type`, `export type`, or braces whose every name is marked `type` (TypeScript drops those). */
  const typeOnly = (node: ts.ImportDeclaration | ts.ExportDeclaration): boolean => {
    if (ts.isExportDeclaration(node)) {
      const c = node.exportClause
      return node.isTypeOnly || (c !== undefined && ts.isNamedExports(c) && c.elements.length > 0 && c.elements.every((e) => e.isTypeOnly))
    }
    const c = node.importClause
    if (!c) return false
    const named = c.namedBindings
    return c.isTypeOnly || (!c.name && named !== undefined && ts.isNamedImports(named) && named.elements.length > 0 && named.elements.every((e) => e.isTypeOnly))
  }
  const literal = (e: ts.Expression | undefined): string | null => {
    while (e && (ts.isAsExpression(e) || ts.isParenthesizedExpression(e) || ts.isSatisfiesExpression(e))) e = e.expression
    return e && (ts.isStringLiteral(e) || ts.isNoSubstitutionTemplateLiteral(e)) ? e.text : null
  }
  const visit = (node: ts.Node): void => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier) {
      add(literal(node.moduleSpecifier), node, typeOnly(node) ? 'type' : 'static')
    } else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) {
      add(literal(node.moduleReference.expression), node, node.isTypeOnly ? 'type' : 'static')
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      add(literal(node.arguments[0]), node, 'dynamic')
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      add(literal(node.argument.literal as ts.Expression), node, 'type')
    }
    ts.forEachChild(node, visit)
  }
  visit(sf)
  return out
}

function layerOf(file: string): Layer | null {
  if (file === 'src/cli.ts') return 'entry'
  const m = /^src\/([^/]+)\//.exec(file)
  return m && m[1] in LAYERS && m[1] !== 'entry' ? (m[1] as Layer) : null
}

const under = (file: string, where: string): boolean => (where.endsWith('/') ? file.startsWith(where) : file === where)

/** The package a bare specifier names: `@scope/name` or `name`; Node built-ins as `node:name`. */
function packageOf(spec: string): string {
  if (spec.startsWith('node:')) return spec
  const parts = spec.split('/')
  const name = spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!
  return builtinModules.includes(name) ? `node:${name}` : name
}

/** The module a relative specifier names (`./x.js` is `x.ts`), or null if it is none of `files`. */
function resolveRelative(from: string, spec: string, files: ReadonlySet<string>): string | null {
  const target = posix.normalize(posix.join(posix.dirname(from), spec))
  for (const cand of [target.replace(/\.js$/, '.ts'), target, `${target}.ts`, `${target}/index.ts`]) if (files.has(cand)) return cand
  return null
}

export interface Packages {
  dependencies: string[]
  devDependencies: string[]
}

/** Every rule broken by `files` (repo-relative path → source text). */
export function architecture(files: Record<string, string>, packages: Packages): Violation[] {
  const names = new Set(Object.keys(files))
  const out: Violation[] = []
  /** Layer → layer it imports → the first import seen, for the cycle report. */
  const edges = new Map<Layer, Map<Layer, string>>()
  /** The same between files. */
  const fileEdges = new Map<string, Map<string, string>>()
  /** What each file loads with itself: its static imports of files, and of devDependencies (dev-lazy). */
  const loads = new Map<string, { files: string[]; dev: { pkg: string; line: number; spec: string }[] }>()
  for (const [file, text] of Object.entries(files).sort(([a], [b]) => a.localeCompare(b))) {
    const script = SCRIPTS.find((s) => file.startsWith(s.folder))
    if (script) {
      out.push(...scriptViolations(file, text, script.layer, names))
      continue
    }
    const from = layerOf(file)
    if (from === null) {
      out.push({ rule: 'known-layer', file, line: 1, import: '', message: `${file} is in no layer of LAYERS` })
      continue
    }
    const loaded = { files: [] as string[], dev: [] as { pkg: string; line: number; spec: string }[] }
    loads.set(file, loaded)
    for (const { spec, line, kind } of importsOf(file, text)) {
      const v = (rule: Rule, message: string): void => void out.push({ rule, file, line, import: spec ?? '(expression)', message })
      if (spec === null) {
        v('dynamic-literal', `${file}:${line}: import() of an expression; name the module with a string literal`)
        continue
      }
      if (spec.startsWith('.')) {
        const target = resolveRelative(file, spec, names)
        if (target === null) {
          v('resolved', `${file}:${line}: '${spec}' is no module in src/`)
          continue
        }
        if (!fileEdges.has(file)) fileEdges.set(file, new Map())
        if (!fileEdges.get(file)!.has(target)) fileEdges.get(file)!.set(target, `${file}:${line} imports '${spec}'`)
        if (kind === 'static') loaded.files.push(target)
        const to = layerOf(target)
        if (to === null || to === from) continue
        if (!edges.has(from)) edges.set(from, new Map())
        if (!edges.get(from)!.has(to)) edges.get(from)!.set(to, `${file}:${line} imports '${spec}'`)
        const excepted = EXCEPTIONS.some((x) => under(file, x.from) && target === x.to)
        if (to === 'cli' && from !== 'entry') v('no-cli', `${file}:${line}: imports '${spec}'; only src/cli.ts imports src/cli/`)
        else if (!LAYERS[from].may.includes(to) && !excepted) {
          v('layers', `${file}:${line}: ${from} may not import ${to} ('${spec}'); ${from} may import ${[from, ...LAYERS[from].may].join(', ')}`)
        } else if (to === 'engine' && ENGINE_SURFACES[from] && target !== ENGINE_SURFACES[from].module) {
          v('engine-entry', `${file}:${line}: imports '${spec}'; ${from} reaches the engine only through ${ENGINE_SURFACES[from].module}`)
        }
        continue
      }
      const pkg = packageOf(spec)
      const owner = PACKAGE_OWNERS.find((o) => o.pkg === pkg)
      if (owner && !owner.owners.some((w) => under(file, w)) && !owner.exceptions?.some((x) => x.file === file)) {
        v('owners', `${file}:${line}: imports ${pkg}, which only ${owner.owners.join(', ')} may import`)
      }
      if (from === 'engine' && ENGINE_FORBIDDEN.includes(pkg)) v('engine-no-http', `${file}:${line}: the engine imports ${pkg}`)
      if (!pkg.startsWith('node:') && !packages.dependencies.includes(pkg)) {
        if (!packages.devDependencies.includes(pkg)) v('declared', `${file}:${line}: ${pkg} is not in package.json`)
        else if (from !== 'bench') v('declared', `${file}:${line}: ${pkg} is a devDependency, which only src/bench/ may import`)
        else if (kind === 'static') loaded.dev.push({ pkg, line, spec })
      }
    }
  }
  out.push(...staticDevImports(loads))
  for (const cycle of layerCycles(edges)) {
    const [file = '', line = '1'] = cycle.examples[0]!.split(' ')[0]!.split(':')
    out.push({ rule: 'cycles', file, line: Number(line), import: '', message: `layer cycle ${cycle.path.join(' -> ')}: ${cycle.examples.join('; ')}` })
  }
  for (const cycle of fileCycles(fileEdges)) {
    const [file = '', line = '1'] = cycle.examples[0]!.split(' ')[0]!.split(':')
    const group = cycle.group.length > cycle.path.length - 1 ? ` (one of ${cycle.group.length} files importing each other: ${cycle.group.join(', ')})` : ''
    out.push({ rule: 'file-cycles', file, line: Number(line), import: '', message: `import cycle ${cycle.path.join(' -> ')}: ${cycle.examples.join('; ')}${group}` })
  }
  return out
}

/**
 * Every static import of a devDependency in a module that an onnxd command loads with itself: the command modules
 * under src/cli/ (src/cli.ts loads each with import() when it is run) and what they import statically, transitively.
 * Each is reported once, with the chain from the first command (by name) that reaches it.
 */
function staticDevImports(loads: Map<string, { files: string[]; dev: { pkg: string; line: number; spec: string }[] }>): Violation[] {
  const out: Violation[] = []
  const reported = new Set<string>()
  for (const root of [...loads.keys()].filter((f) => f.startsWith('src/cli/')).sort()) {
    const parent = new Map<string, string | null>([[root, null]])
    const queue = [root]
    for (let i = 0; i < queue.length; i++) {
      const file = queue[i]!
      for (const next of loads.get(file)?.files ?? []) {
        if (parent.has(next)) continue
        parent.set(next, file)
        queue.push(next)
      }
      for (const d of loads.get(file)?.dev ?? []) {
        if (reported.has(`${file}:${d.line}`)) continue
        reported.add(`${file}:${d.line}`)
        const chain: string[] = []
        for (let at: string | null = file; at !== null; at = parent.get(at)!) chain.unshift(at)
        const command = root.slice('src/cli/'.length).replace(/\.ts$/, '')
        out.push({
          rule: 'dev-lazy',
          file,
          line: d.line,
          import: d.spec,
          message: `${file}:${d.line}: imports the devDependency ${d.pkg} statically, so \`onnxd ${command}\` cannot start without it (${chain.join(' -> ')}); load it with import() where it is used (src/bench/dev-deps.ts)`,
        })
      }
    }
  }
  return out
}

/** A script outside src/ (bench/): any relative import of an engine module other than its layer's surface. */
function scriptViolations(file: string, text: string, layer: Layer, names: ReadonlySet<string>): Violation[] {
  const surface = ENGINE_SURFACES[layer]
  const out: Violation[] = []
  for (const { spec, line } of importsOf(file, text)) {
    if (!surface || spec === null || !spec.startsWith('.')) continue
    const target = resolveRelative(file, spec, names)
    if (target !== null && layerOf(target) === 'engine' && target !== surface.module) {
      out.push({ rule: 'engine-entry', file, line, import: spec, message: `${file}:${line}: imports '${spec}'; ${layer} reaches the engine only through ${surface.module}` })
    }
  }
  return out
}

/** Strongly connected groups of two or more layers, each with one import per edge inside it. */
function layerCycles(edges: Map<Layer, Map<Layer, string>>): { path: Layer[]; examples: string[] }[] {
  return stronglyConnected(edges).map((g) => ({
    path: [...g, g[0]!],
    examples: g.flatMap((a) => g.filter((b) => edges.get(a)?.has(b)).map((b) => edges.get(a)!.get(b)!)),
  }))
}

/**
 * Strongly connected groups of files, each as one shortest cycle through its first file (the path, ending where it
 * starts, and the import of each step) and the whole group. A file that imports itself is a group of one.
 */
function fileCycles(edges: Map<string, Map<string, string>>): { path: string[]; examples: string[]; group: string[] }[] {
  const groups = [...stronglyConnected(edges), ...[...edges].filter(([f, to]) => to.has(f)).map(([f]) => [f])]
  return groups.map((g) => {
    const inside = new Set(g)
    const start = g[0]!
    // Breadth first from `start` inside the group, back to `start`.
    const from = new Map<string, string>()
    let queue = [start]
    while (queue.length && !from.has(start)) {
      const next: string[] = []
      for (const a of queue) {
        for (const b of edges.get(a)?.keys() ?? []) {
          if (!inside.has(b) || from.has(b)) continue
          from.set(b, a)
          next.push(b)
        }
      }
      queue = next
    }
    const path = [start]
    for (let at = from.get(start)!; at !== start; at = from.get(at)!) path.unshift(at)
    path.unshift(start)
    return { path, examples: path.slice(1).map((b, i) => edges.get(path[i]!)!.get(b)!), group: [...g].sort() }
  })
}

/** Strongly connected groups of two or more nodes (Tarjan), in the order their first node was reached. */
function stronglyConnected<T>(edges: Map<T, Map<T, string>>): T[][] {
  const index = new Map<T, number>()
  const low = new Map<T, number>()
  const stack: T[] = []
  const groups: T[][] = []
  const strong = (v: T): void => {
    index.set(v, index.size)
    low.set(v, index.get(v)!)
    stack.push(v)
    for (const w of edges.get(v)?.keys() ?? []) {
      if (!index.has(w)) {
        strong(w)
        low.set(v, Math.min(low.get(v)!, low.get(w)!))
      } else if (stack.includes(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!))
    }
    if (low.get(v) === index.get(v)) {
      const group: T[] = []
      let w: T
      do {
        w = stack.pop()!
        group.push(w)
      } while (w !== v)
      if (group.length > 1) groups.push(group.reverse())
    }
  }
  for (const v of edges.keys()) if (!index.has(v)) strong(v)
  return groups
}

function sources(dir: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const e of readdirSync(join(REPO, dir), { withFileTypes: true, recursive: true })) {
    if (!e.isFile() || !e.name.endsWith('.ts')) continue
    const file = relative(REPO, join(e.parentPath, e.name)).split('\\').join('/')
    out[file] = readFileSync(join(REPO, file), 'utf8')
  }
  return out
}

function packageJson(): Packages {
  const p = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as Record<string, Record<string, string> | undefined>
  return { dependencies: Object.keys(p.dependencies ?? {}), devDependencies: Object.keys(p.devDependencies ?? {}) }
}

describe('architecture: the imports of src/ keep the layer rules', () => {
  const files = { ...sources('src'), ...sources('bench') }
  const found = architecture(files, packageJson())

  it('reads the whole tree', () => {
    expect(Object.keys(files).length).toBeGreaterThan(50)
    expect(Object.values(files).reduce((n, t) => n + importsOf('x.ts', t).length, 0)).toBeGreaterThan(200)
  })

  it.each(Object.entries(RULES))('%s: %s', (rule) => {
    expect(found.filter((v) => v.rule === rule).map((v) => v.message)).toEqual([])
  })

  it('lists no exception that nothing uses any more', () => {
    const stale: string[] = []
    for (const x of EXCEPTIONS) {
      const used = Object.entries(files).some(
        ([f, t]) => under(f, x.from) && importsOf(f, t).some((i) => i.spec?.startsWith('.') && resolveRelative(f, i.spec, new Set(Object.keys(files))) === x.to),
      )
      if (!used) stale.push(`${x.from} -> ${x.to}`)
    }
    for (const o of PACKAGE_OWNERS) {
      for (const x of o.exceptions ?? []) {
        if (!importsOf(x.file, files[x.file] ?? '').some((i) => i.spec !== null && packageOf(i.spec) === o.pkg)) stale.push(`${x.file} -> ${o.pkg}`)
      }
      if (!o.owners.some((w) => Object.entries(files).some(([f, t]) => under(f, w) && importsOf(f, t).some((i) => i.spec !== null && packageOf(i.spec) === o.pkg)))) {
        stale.push(`owner of ${o.pkg}: ${o.owners.join(', ')}`)
      }
    }
    expect(stale).toEqual([])
  })
})

describe('architecture checker: a planted violation is reported with its file and import', () => {
  const pkgs: Packages = { dependencies: ['fastify', 'onnxruntime-node', '@photostructure/sqlite'], devDependencies: ['openai', 'vega', 'vega-lite', 'cli-progress', 'node-llama-cpp'] }
  const base: Record<string, string> = {
    'src/cli.ts': "const load = () => import('./cli/node.js')\n",
    'src/cli/node.ts': "import { serveNode } from '../node/server.js'\n",
    'src/shared/errors.ts': 'export class OnnxdError extends Error {}\n',
    'src/contract/completions.ts': "import type { OnnxdError } from '../shared/errors.js'\n",
    'src/engine/index.ts': "export { createEnginePool } from './pool/pool.js'\n",
    'src/engine/pool/pool.ts': "import type { X } from './client.js'\nexport const createEnginePool = 1\n",
    'src/engine/pool/client.ts': 'export interface X {}\n',
    'src/engine/model/session.ts': "import * as ort from 'onnxruntime-node'\n",
    'src/engine/model/onnx-proto.ts': 'export const DataType = {}\n',
    'src/builder/graph.ts': "import { DataType } from '../engine/model/onnx-proto.js'\n",
    'src/node/server.ts': "import { createEnginePool } from '../engine/index.js'\nconst b = await import('../builder/graph.js')\n",
    'src/facade/app.ts': "import Fastify from 'fastify'\nimport type { CompletionRequest } from '../contract/completions.js'\n",
    'src/store/sqlite.ts': "import { DatabaseSync } from '@photostructure/sqlite'\n",
    'src/bench/run.ts': "import { Engine } from '../engine/bench-surface.js'\n",
    'src/engine/engine.ts': "export class Engine {}\n",
    'src/engine/bench-surface.ts': "export { Engine } from './engine.js'\n",
    'bench/engine.bench.ts': "import { Engine } from '../src/engine/bench-surface.js'\nimport { x } from '../test/helpers/x.js'\n",
  }
  const check = (extra: Record<string, string>): Violation[] => architecture({ ...base, ...extra }, pkgs)
  /** Each violation as [rule, file, line, import]. */
  const where = (v: Violation[]): [Rule, string, number, string][] => v.map((x) => [x.rule, x.file, x.line, x.import])

  it('passes the clean tree it is planted into (the exception and imports inside a layer are allowed)', () => {
    expect(check({})).toEqual([])
  })

  /** Planted trees: the files added to `base`, each violation expected as [rule, file, line, import], and words
   * some violation's message must contain. */
  const PLANTED: { name: string; files: Record<string, string>; found: [Rule, string, number, string][]; says?: string[] }[] = [
    {
      name: 'the engine importing the HTTP contract (a type-only import, as engine/types.ts once did)',
      files: { 'src/engine/types.ts': "import type { CompletionRequest } from '../contract/completions.js'\n" },
      found: [['layers', 'src/engine/types.ts', 1, '../contract/completions.js']],
      says: ['engine may not import contract'],
    },
    {
      name: 'the bench reaching into the CLI (as node-main.ts once did), and the node importing the CLI dynamically',
      files: {
        'src/bench/targets/node-main.ts': "// import { run } from '../../cli/facade.js' in a comment does not count\nimport { run } from '../../cli/node.js'\n",
        'src/node/app.ts': "export const x = 1\nconst m = await import('../cli/node.js')\n",
      },
      found: [
        ['no-cli', 'src/bench/targets/node-main.ts', 2, '../../cli/node.js'],
        ['no-cli', 'src/node/app.ts', 2, '../cli/node.js'],
        ['cycles', 'src/cli/node.ts', 1, ''],
      ],
      says: ['layer cycle cli -> node -> cli'],
    },
    {
      name: 'the node importing an engine module other than its entry; the facade importing the engine or the node',
      files: {
        'src/node/routes/x.ts': "export { createEnginePool } from '../../engine/pool/pool.js'\n",
        'src/facade/y.ts': "import type { Engine } from '../engine/engine.js'\ntype N = import('../node/server.js').X\n",
      },
      found: [
        ['layers', 'src/facade/y.ts', 1, '../engine/engine.js'],
        ['layers', 'src/facade/y.ts', 2, '../node/server.js'],
        ['engine-entry', 'src/node/routes/x.ts', 1, '../../engine/pool/pool.js'],
      ],
    },
    {
      name: 'a native package outside its module, the engine speaking HTTP, undeclared and dev-only packages',
      files: {
        'src/engine/worker/w.ts': "import * as ort from 'onnxruntime-node'\nimport { request } from 'node:http'\n",
        'src/facade/db.ts': "import { DatabaseSync } from '@photostructure/sqlite'\nimport OpenAI from 'openai'\nimport x from 'left-pad/sub'\n",
      },
      found: [
        ['owners', 'src/engine/worker/w.ts', 1, 'onnxruntime-node'],
        ['engine-no-http', 'src/engine/worker/w.ts', 2, 'node:http'],
        ['owners', 'src/facade/db.ts', 1, '@photostructure/sqlite'],
        ['declared', 'src/facade/db.ts', 2, 'openai'],
        ['declared', 'src/facade/db.ts', 3, 'left-pad/sub'],
      ],
    },
    {
      name: 'store or builder importing a layer above them, an import into test/, an import() of an expression, a file in no layer',
      files: {
        'src/store/s.ts': "import { x } from '../facade/app.js'\n",
        'src/builder/b.ts': "import { y } from '../engine/engine.js'\nimport { f } from '../../test/helpers/fake-node.js'\nconst m = await import(name)\n",
        'src/misc/z.ts': 'export {}\n',
      },
      found: [
        ['layers', 'src/builder/b.ts', 1, '../engine/engine.js'],
        ['resolved', 'src/builder/b.ts', 2, '../../test/helpers/fake-node.js'],
        ['dynamic-literal', 'src/builder/b.ts', 3, '(expression)'],
        ['known-layer', 'src/misc/z.ts', 1, ''],
        ['layers', 'src/store/s.ts', 1, '../facade/app.js'],
      ],
    },
    {
      name: 'an import cycle between layers, named with the imports that close it',
      files: { 'src/shared/cfg.ts': "import type { S } from '../contract/completions.js'\n" },
      found: [
        ['layers', 'src/shared/cfg.ts', 1, '../contract/completions.js'],
        ['cycles', 'src/contract/completions.ts', 1, ''],
      ],
      says: [
        "layer cycle contract -> shared -> contract: src/contract/completions.ts:1 imports '../shared/errors.js'; src/shared/cfg.ts:1 imports '../contract/completions.js'",
      ],
    },
    {
      name: 'the bench reaching into the engine past its surface, in src/bench/ and in a script of bench/ (as context.ts and attack.bench.ts once did)',
      files: {
        'src/bench/context.ts': "import { KvCache } from '../engine/scheduler/kv.js'\nimport { createEnginePool } from '../engine/index.js'\n",
        'bench/attack.bench.ts': "const { createEnginePool } = await import('../src/engine/pool/pool.js')\nimport { buildNode } from '../src/node/app.js'\n",
        'src/engine/scheduler/kv.ts': 'export class KvCache {}\n',
      },
      found: [
        ['engine-entry', 'bench/attack.bench.ts', 1, '../src/engine/pool/pool.js'],
        ['engine-entry', 'src/bench/context.ts', 1, '../engine/scheduler/kv.js'],
        ['engine-entry', 'src/bench/context.ts', 2, '../engine/index.js'],
      ],
      says: ['bench reaches the engine only through src/engine/bench-surface.ts'],
    },
    {
      name: "a command loading a devDependency with itself (the chart's vega, statically), beside the allowed forms",
      files: {
        'src/cli/bench.ts': "import { runBench } from '../bench/run.js'\n",
        'src/bench/run.ts': "import { Engine } from '../engine/bench-surface.js'\nimport { chartSpec } from './chart.js'\nimport { Progress } from './progress.js'\n",
        // vega statically: reported. A type-only import is erased: allowed.
        'src/bench/chart.ts': "import * as vega from 'vega'\nimport type { TopLevelSpec } from 'vega-lite'\nimport { type Config } from 'vega-lite'\n",
        // import() where it is used: allowed.
        'src/bench/progress.ts': "import type cliProgress from 'cli-progress'\nconst bars = await import('cli-progress')\n",
        // A child process's entry that no command imports: its static import is its own business.
        'src/bench/peer/llama-cpp.ts': "import { getLlama } from 'node-llama-cpp'\n",
      },
      found: [['dev-lazy', 'src/bench/chart.ts', 1, 'vega']],
      says: ['imports the devDependency vega statically, so `onnxd bench` cannot start without it (src/cli/bench.ts -> src/bench/run.ts -> src/bench/chart.ts)'],
    },
    {
      name: 'an import cycle between files of one layer: three files through a dynamic import, and a file importing itself',
      files: {
        'src/facade/a.ts': "import { b } from './b.js'\n",
        'src/facade/b.ts': "export const b = 1\nconst c = await import('./routes/c.js')\n",
        'src/facade/routes/c.ts': "import type { A } from '../a.js'\n",
        'src/store/self.ts': "export type { S } from './self.js'\n",
      },
      found: [
        ['file-cycles', 'src/facade/a.ts', 1, ''],
        ['file-cycles', 'src/store/self.ts', 1, ''],
      ],
      says: [
        "import cycle src/facade/a.ts -> src/facade/b.ts -> src/facade/routes/c.ts -> src/facade/a.ts: src/facade/a.ts:1 imports './b.js'; src/facade/b.ts:2 imports './routes/c.js'; src/facade/routes/c.ts:1 imports '../a.js'",
        "import cycle src/store/self.ts -> src/store/self.ts: src/store/self.ts:1 imports './self.js'",
      ],
    },
  ]

  it('holds the three file cycles this rule was written against (the engine before issue #33)', () => {
    // As they were: the pool's types in the entry that re-exports the pool; the step types in session.ts, which
    // imports the C-API runner and the step helper that both import them back; the prompt bound beside the prompt.
    const v = check({
      'src/engine/pool/pool.ts': "import type { EngineClient, PoolOptions } from '../index.js'\nexport const createEnginePool = 1\n",
      'src/engine/index.ts': "export { createEnginePool } from './pool/pool.js'\nexport interface PoolOptions {}\n",
      'src/engine/model/session.ts': "import * as ort from 'onnxruntime-node'\nimport { rowLengths } from './step-lengths.js'\nimport { CapiRunner } from './capi-session.js'\n",
      'src/engine/model/capi-session.ts': "import type { ForwardInput } from './session.js'\nimport { rowLengths } from './step-lengths.js'\n",
      'src/engine/model/step-lengths.ts': "import type { ForwardInput } from './session.js'\n",
      'src/engine/tokenizer/prompt.ts': "import type { Message, TextTokenizer } from './tokenizer.js'\n",
      'src/engine/tokenizer/tokenizer.ts': "import { promptByteLimit } from './prompt.js'\n",
    })
    expect(where(v)).toEqual([
      ['file-cycles', 'src/engine/index.ts', 1, ''],
      ['file-cycles', 'src/engine/model/capi-session.ts', 1, ''],
      ['file-cycles', 'src/engine/tokenizer/prompt.ts', 1, ''],
    ])
    expect(v.map((x) => x.message)).toEqual([
      "import cycle src/engine/index.ts -> src/engine/pool/pool.ts -> src/engine/index.ts: src/engine/index.ts:1 imports './pool/pool.js'; src/engine/pool/pool.ts:1 imports '../index.js'",
      "import cycle src/engine/model/capi-session.ts -> src/engine/model/session.ts -> src/engine/model/capi-session.ts: src/engine/model/capi-session.ts:1 imports './session.js'; src/engine/model/session.ts:3 imports './capi-session.js' (one of 3 files importing each other: src/engine/model/capi-session.ts, src/engine/model/session.ts, src/engine/model/step-lengths.ts)",
      "import cycle src/engine/tokenizer/prompt.ts -> src/engine/tokenizer/tokenizer.ts -> src/engine/tokenizer/prompt.ts: src/engine/tokenizer/prompt.ts:1 imports './tokenizer.js'; src/engine/tokenizer/tokenizer.ts:1 imports './prompt.js'",
    ])
  })

  it.each(PLANTED)('$name', ({ files, found, says = [] }) => {
    const v = check(files)
    expect(where(v)).toEqual(found)
    for (const words of says) expect(v.map((x) => x.message).join('\n')).toContain(words)
  })
})
