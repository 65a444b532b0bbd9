// Deployment files for a fleet (issue #15), held against the code: compose.yaml, deploy/kubernetes/*.yaml and
// deploy/grafana/onnxd-dashboard.json. Neither Docker nor a cluster runs here, so each file is parsed and every name,
// port, path, command and duration in it is checked against what the node, the facade and the CLI really define:
// environment variables against NODE_ENV / FACADE_ENV (and loaded through the real option loaders), probe paths
// against the routes the apps register, subcommands against the CLI's table, metric names and labels against the
// node's prom-client registry. Each checker returns its problems as strings, so the negative cases below can show
// that it fails on a planted mistake.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { FastifyInstance } from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parseAllDocuments, parseDocument } from 'yaml'
import { usage } from '../../src/cli.js'
import { FACADE_ENV, loadFacadeOptions } from '../../src/facade/options.js'
import { loadNodeOptions, NODE_ENV, type NodeOptions } from '../../src/node/options.js'
import { createFacadeMetrics } from '../../src/facade/metrics.js'
import { createMetrics, createRegistry, DEPRECATED_METRICS } from '../../src/node/plugins/metrics.js'
import { processMetrics } from '../../src/shared/metrics.js'
import { HUB_ENV } from '../../src/node/hub-model.js'
import { facadeFixture, type FacadeFixture } from '../helpers/facade.js'
import { testNode, type TestNode } from '../node/helpers.js'

const REPO = join(import.meta.dirname, '../..')
const read = (path: string): string => readFileSync(join(REPO, path), 'utf8')

type Role = 'node' | 'facade'
type Json = Record<string, unknown>
const obj = (v: unknown): Json => (v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Json) : {})
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : [])
/** A Deployment body's pod spec and its first container. */
const podOf = (deployment: Json): { podSpec: Json; container: Json } => {
  const podSpec = obj(obj(obj(deployment.spec).template).spec)
  return { podSpec, container: obj(arr(podSpec.containers)[0]) }
}
const str = (v: unknown): string => (typeof v === 'string' ? v : typeof v === 'number' ? String(v) : '')

/** Machine facts for the node's defaults (kvBudgetMb), fixed so the test does not depend on this host. */
const SYS = { totalMemBytes: 16 * 1024 ** 3 }

// ---------------------------------------------------------------------------------------------------------------
// What the code defines.

/** The image's CMD (`node bin/onnxd.js serve`) and volumes, from the Dockerfile's final stage. */
function dockerfile(): { cmd: string[]; volumes: string[] } {
  const text = read('Dockerfile')
  const final = text.slice(text.lastIndexOf('\nFROM '))
  const cmd = /^CMD\s+(\[.*\])\s*$/m.exec(final)?.[1]
  const volumes = /^VOLUME\s+(\[.*\])\s*$/m.exec(final)?.[1]
  if (!cmd || !volumes) throw new Error('Dockerfile: no exec-form CMD or VOLUME in the final stage')
  return { cmd: JSON.parse(cmd) as string[], volumes: JSON.parse(volumes) as string[] }
}

/** The subcommands of `onnxd`, as its usage lists them (one row per entry of the CLI's COMMANDS table). */
function cliCommands(): Set<string> {
  const rows = usage().split('commands:\n')[1] ?? ''
  return new Set([...rows.matchAll(/^ {2}(\S+)\s/gm)].map((m) => m[1]!))
}

const ENV_OF: Record<Role, Set<string>> = { node: new Set(Object.values(NODE_ENV)), facade: new Set(Object.values(FACADE_ENV)) }

/** What each file is checked against. `hasRoute` asks the real apps; tests swap any part for a planted mistake. */
interface Code {
  imageCmd: string[]
  imageVolumes: string[]
  commands: Set<string>
  env: Record<Role, Set<string>>
  hasRoute(role: Role, path: string): boolean
}

// ---------------------------------------------------------------------------------------------------------------
// Shared checks.

/** The role an onnxd container runs (`node bin/onnxd.js <sub>`), or problems if its command is not the image's. */
function commandProblems(where: string, command: unknown, code: Code): { role: Role | null; problems: string[] } {
  const argv = Array.isArray(command) ? command.map(str) : str(command).split(/\s+/).filter(Boolean)
  const prefix = code.imageCmd.slice(0, -1)
  const problems: string[] = []
  if (argv.length !== code.imageCmd.length || prefix.some((a, i) => argv[i] !== a)) {
    problems.push(`${where}: command ${JSON.stringify(argv)} is not the image's CMD ${JSON.stringify(code.imageCmd)} with another subcommand`)
  }
  const sub = argv.at(-1) ?? ''
  if (!code.commands.has(sub)) problems.push(`${where}: '${sub}' is not an onnxd command (${[...code.commands].join(', ')})`)
  const role = sub === 'node' || sub === 'facade' ? sub : null
  if (role === null) problems.push(`${where}: runs '${sub}', expected 'node' or 'facade'`)
  return { role, problems }
}

/** ONNXD_* variables the role does not read (a node option on a facade does nothing), and other unknown names. */
function envNameProblems(where: string, role: Role, names: string[], code: Code): string[] {
  const problems: string[] = []
  for (const name of names) {
    if (name.startsWith('ONNXD_')) {
      if (!code.env[role].has(name)) {
        const other = role === 'node' ? 'facade' : 'node'
        problems.push(`${where}: ${name} is not an option of the ${role}${code.env[other].has(name) ? ` (it is the ${other}'s)` : ''}`)
      }
    } else if (role === 'node' && (HUB_ENV as readonly string[]).includes(name)) continue // a hub model's token, cache, endpoint
    else if (name !== 'NODE_ENV') problems.push(`${where}: ${name} is read by nothing in onnxd${(HUB_ENV as readonly string[]).includes(name) ? ' (a node reads it, not a facade)' : ''}`)
  }
  return problems
}

/** Loads the role's options from `env` as the process would; the loader's message on failure. */
function loadProblems(where: string, role: Role, env: Record<string, string>): string[] {
  try {
    if (role === 'node') loadNodeOptions(env, {}, {}, SYS)
    else loadFacadeOptions(env)
    return []
  } catch (e) {
    return [`${where}: ${(e as Error).message}`]
  }
}

/** A node entry of ONNXD_NODES: `http(s)://host:port`, or `dns+http(s)://name:port` (every address of the name). */
function nodeEntry(entry: string): { host: string; port: number } | null {
  const m = /^(?:dns\+)?(https?):\/\/([^\s/:]+)(?::(\d+))?\/?$/.exec(entry)
  if (!m) return null
  return { host: m[2]!, port: m[3] ? Number(m[3]) : m[1] === 'https' ? 443 : 80 }
}

/** A Go duration as compose writes it (`40s`, `1m30s`, `500ms`), in seconds. */
function goDurationS(v: unknown): number {
  const s = str(v)
  const units: Record<string, number> = { h: 3600, m: 60, s: 1, ms: 0.001, us: 1e-6, µs: 1e-6, ns: 1e-9 }
  const parts = [...s.matchAll(/(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)/g)]
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== s) return NaN
  return parts.reduce((t, p) => t + Number(p[1]) * units[p[2]!]!, 0)
}

/** A Kubernetes quantity (`6Gi`, `512Mi`, `1G`), in bytes. */
function quantityBytes(v: unknown): number {
  const m = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(str(v))
  if (!m) return NaN
  const mult: Record<string, number> = { '': 1, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, k: 1e3, M: 1e6, G: 1e9, T: 1e12 }
  return Number(m[1]) * mult[m[2] ?? '']!
}

// ---------------------------------------------------------------------------------------------------------------
// compose.yaml

/** Compose's interpolation: `$$`, `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?err}`, `${VAR?err}`. */
function interpolate(value: string, env: Record<string, string | undefined>): string {
  return value.replace(/\$(\$|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?)([-?])((?:[^{}]|\{[^{}]*\})*))?\}|([A-Za-z_][A-Za-z0-9_]*))/g, (_all, dollar: string, name?: string, colon?: string, op?: string, arg?: string, bare?: string) => {
    if (dollar === '$') return '$'
    const v = env[name ?? bare!]
    const unset = v === undefined || (colon === ':' && v === '')
    if (op === '-') return unset ? interpolate(arg ?? '', env) : v!
    if (op === '?') {
      if (unset) throw new Error(`compose: ${name} is required: ${arg}`)
      return v!
    }
    return v ?? ''
  })
}

function interpolateAll(v: unknown, env: Record<string, string | undefined>): unknown {
  if (typeof v === 'string') return interpolate(v, env)
  if (Array.isArray(v)) return v.map((x) => interpolateAll(x, env))
  if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, interpolateAll(x, env)]))
  return v
}

/** An operator's ONNXD_JWT_SECRET, which compose.yaml requires from the environment. */
const COMPOSE_ENV = { ONNXD_JWT_SECRET: 'k7Vq2yq0bqkM7d3oQn0wXh2pQ4rj0cA1g6mR9bZt3sE5uW8yL1fH2dK4nP6xV0aJ' }

/** compose.yaml as Compose reads it: merge keys applied, then interpolated with `env` (the other defaults apply). */
function loadCompose(env: Record<string, string | undefined> = COMPOSE_ENV): Json {
  const doc = parseDocument(read('compose.yaml'), { merge: true })
  if (doc.errors.length > 0) throw new Error(`compose.yaml: ${doc.errors.map((e) => e.message).join('; ')}`)
  return obj(interpolateAll(doc.toJS(), env))
}

/** A service's `environment`, in either of its forms (map, or list of `K=V`). */
function composeEnv(service: Json): Record<string, string> {
  const e = service.environment
  if (Array.isArray(e)) {
    return Object.fromEntries(e.map((kv) => {
      const s = str(kv)
      const i = s.indexOf('=')
      return i < 0 ? [s, ''] : [s.slice(0, i), s.slice(i + 1)]
    }))
  }
  return Object.fromEntries(Object.entries(obj(e)).map(([k, v]) => [k, v === null ? '' : str(v) || String(v)]))
}

/** Container ports a service publishes (`[ip:]host:container[/proto]`, or the long form's `target`). */
function publishedContainerPorts(service: Json): number[] {
  return arr(service.ports).map((p) => (typeof p === 'object' ? Number(obj(p).target) : Number(str(p).replace(/\/\w+$/, '').split(':').at(-1))))
}

/** `http://127.0.0.1:PORT/PATH` inside a healthcheck's test command. */
function healthcheckUrl(service: Json): { port: number; path: string } | null {
  const test = arr(obj(service.healthcheck).test).map(str).join(' ')
  const m = /https?:\/\/(?:127\.0\.0\.1|localhost):(\d+)(\/[^\s'"`)]*)/.exec(test)
  return m ? { port: Number(m[1]), path: m[2]! } : null
}

interface ComposeService {
  name: string
  service: Json
  role: Role
  env: Record<string, string>
}

/** Every problem of a compose file (as loaded by loadCompose) against the code. */
function composeProblems(compose: Json, code: Code): string[] {
  const problems: string[] = []
  const services = obj(compose.services)
  const onnxd: ComposeService[] = []
  for (const [name, raw] of Object.entries(services)) {
    const service = obj(raw)
    if (service.build === undefined) continue // postgres, redis: their own images
    const where = `compose service ${name}`
    const cmd = commandProblems(where, service.command, code)
    problems.push(...cmd.problems)
    if (cmd.role) onnxd.push({ name, service, role: cmd.role, env: composeEnv(service) })
  }
  const nodes = onnxd.filter((s) => s.role === 'node')
  const facades = onnxd.filter((s) => s.role === 'facade')
  if (nodes.length < 2 || facades.length < 2) problems.push(`compose: expected at least two nodes and two facades, found ${nodes.length} and ${facades.length}`)

  const nodePort = new Map<string, number>()
  for (const s of onnxd) {
    const where = `compose service ${s.name}`
    problems.push(...envNameProblems(where, s.role, Object.keys(s.env), code))
    const loadErr = loadProblems(where, s.role, s.env)
    problems.push(...loadErr)
    if (loadErr.length > 0) continue
    const port = s.role === 'node' ? loadNodeOptions(s.env, {}, {}, SYS).port : loadFacadeOptions(s.env).port
    if (s.role === 'node') nodePort.set(s.name, port)
    for (const p of publishedContainerPorts(s.service)) if (p !== port) problems.push(`${where}: publishes container port ${p}, but the ${s.role} listens on ${port}`)
    const hc = healthcheckUrl(s.service)
    if (!hc) problems.push(`${where}: no healthcheck asking http://127.0.0.1:<port>/<path>`)
    else {
      if (hc.port !== port) problems.push(`${where}: healthcheck asks port ${hc.port}, but the ${s.role} listens on ${port}`)
      if (!code.hasRoute(s.role, hc.path)) problems.push(`${where}: healthcheck path ${hc.path} is not a GET route of the ${s.role}`)
    }
    if (s.role === 'node') {
      const drainS = loadNodeOptions(s.env, {}, {}, SYS).drainTimeoutMs / 1000
      const grace = goDurationS(s.service.stop_grace_period ?? '10s')
      if (!(grace > drainS)) problems.push(`${where}: stop_grace_period ${str(s.service.stop_grace_period) || '10s (default)'} is not above the drain timeout (${drainS} s)`)
      if (hc && hc.path !== '/health') problems.push(`${where}: healthcheck should ask /health (readiness), not ${hc.path}`)
    }
    for (const v of arr(s.service.volumes)) {
      const [source = '', target = ''] = str(v).split(':')
      if (!code.imageVolumes.includes(target)) problems.push(`${where}: mounts ${target}, not a VOLUME of the image (${code.imageVolumes.join(', ')})`)
      if (!source.startsWith('.') && !source.startsWith('/') && !(source in obj(compose.volumes))) problems.push(`${where}: volume ${source} is not declared under volumes:`)
    }
  }

  const postgres = Object.entries(services).find(([, s]) => str(obj(s).image).startsWith('postgres:'))
  const redis = Object.entries(services).find(([, s]) => str(obj(s).image).startsWith('redis:'))
  if (!postgres || !redis) problems.push('compose: expected a postgres and a redis service (official images)')
  const secrets = new Set<string>()
  for (const f of facades) {
    const where = `compose service ${f.name}`
    const entries = (f.env.ONNXD_NODES ?? '').split(',').map((e) => e.trim()).filter(Boolean)
    const reached = new Set<string>()
    for (const entry of entries) {
      const e = nodeEntry(entry)
      if (!e) problems.push(`${where}: ONNXD_NODES entry ${entry} is not an http(s) URL`)
      else if (!nodePort.has(e.host)) problems.push(`${where}: ONNXD_NODES entry ${entry} names no node service (${[...nodePort.keys()].join(', ')})`)
      else if (nodePort.get(e.host) !== e.port) problems.push(`${where}: ONNXD_NODES entry ${entry}: ${e.host} listens on ${nodePort.get(e.host)}`)
      else reached.add(e.host)
    }
    for (const n of nodes) if (!reached.has(n.name)) problems.push(`${where}: ONNXD_NODES does not list node ${n.name}`)
    const deps = obj(f.service.depends_on)
    for (const dep of [...nodes.map((n) => n.name), postgres?.[0], redis?.[0]]) {
      if (dep === undefined) continue
      if (obj(deps[dep]).condition !== 'service_healthy') problems.push(`${where}: does not depend on ${dep} being healthy`)
      if (obj(services[dep]).healthcheck === undefined) problems.push(`compose service ${dep}: no healthcheck to wait for`)
    }
    if (f.env.NODE_ENV !== 'production') problems.push(`${where}: NODE_ENV is not production`)
    secrets.add(f.env.ONNXD_JWT_SECRET ?? '')
    if (postgres) {
      const pg = composeEnv(obj(postgres[1]))
      const url = new URL(f.env.ONNXD_DATABASE_URL ?? 'postgres://missing')
      if (url.hostname !== postgres[0] || (url.port || '5432') !== '5432') problems.push(`${where}: ONNXD_DATABASE_URL points at ${url.host}, not ${postgres[0]}:5432`)
      if (decodeURIComponent(url.username) !== pg.POSTGRES_USER || decodeURIComponent(url.password) !== pg.POSTGRES_PASSWORD || url.pathname !== `/${pg.POSTGRES_DB}`) {
        problems.push(`${where}: ONNXD_DATABASE_URL's user, password or database is not the postgres service's`)
      }
    }
    if (redis && new URL(f.env.ONNXD_REDIS_URL ?? 'redis://missing').hostname !== redis[0]) problems.push(`${where}: ONNXD_REDIS_URL does not point at ${redis[0]}`)
  }
  if (secrets.size > 1) problems.push('compose: the facades have different ONNXD_JWT_SECRETs (a token minted for one fails on the other)')
  return problems
}

// ---------------------------------------------------------------------------------------------------------------
// deploy/kubernetes/*.yaml

interface K8sObject {
  file: string
  kind: string
  name: string
  namespace: string | undefined
  body: Json
}

function loadKubernetes(): K8sObject[] {
  const dir = join(REPO, 'deploy/kubernetes')
  const out: K8sObject[] = []
  for (const file of readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).sort()) {
    for (const doc of parseAllDocuments(readFileSync(join(dir, file), 'utf8'))) {
      if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors.map((e) => e.message).join('; ')}`)
      const body = obj(doc.toJS())
      if (Object.keys(body).length === 0) continue
      const meta = obj(body.metadata)
      out.push({ file, kind: str(body.kind), name: str(meta.name), namespace: meta.namespace === undefined ? undefined : str(meta.namespace), body })
    }
  }
  return out
}

const matches = (selector: Json, labels: Json): boolean => Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labels[k] === v)

/** A probe's or Service's port (a number or a container port's name) as a number. */
function resolvePort(port: unknown, container: Json): number {
  if (typeof port === 'number') return port
  const named = arr(container.ports).map(obj).find((p) => p.name === port)
  return named ? Number(named.containerPort) : NaN
}

/** A Secret's value: `stringData`, or `data` (base64). */
function secretValue(objects: K8sObject[], namespace: string | undefined, name: string, key: string): string | undefined {
  const secret = objects.find((o) => o.kind === 'Secret' && o.name === name && o.namespace === namespace)
  if (!secret) return undefined
  const plain = obj(secret.body.stringData)[key]
  if (plain !== undefined) return str(plain)
  const b64 = obj(secret.body.data)[key]
  return b64 === undefined ? undefined : Buffer.from(str(b64), 'base64').toString('utf8')
}

/** Every problem of the Kubernetes manifests against the code. */
function kubernetesProblems(objects: K8sObject[], code: Code): string[] {
  const problems: string[] = []
  const namespaces = new Set(objects.filter((o) => o.kind === 'Namespace').map((o) => o.name))
  for (const o of objects) {
    if (o.kind !== 'Namespace' && namespaces.size > 0 && !namespaces.has(o.namespace ?? 'default')) problems.push(`${o.file} ${o.kind}/${o.name}: namespace ${o.namespace} is not declared`)
  }
  const services = objects.filter((o) => o.kind === 'Service')
  const roles: Partial<Record<Role, { o: K8sObject; container: Json; env: Record<string, string>; labels: Json }>> = {}

  for (const o of objects.filter((x) => x.kind === 'Deployment')) {
    const spec = obj(o.body.spec)
    const pod = obj(spec.template)
    const labels = obj(obj(pod.metadata).labels)
    const podSpec = obj(pod.spec)
    const where = `${o.file} Deployment/${o.name}`
    if (!matches(obj(obj(spec.selector).matchLabels), labels)) problems.push(`${where}: selector does not match its pod labels`)
    const container = obj(arr(podSpec.containers)[0])
    const cmd = commandProblems(where, container.command ?? container.args, code)
    problems.push(...cmd.problems)
    if (!cmd.role) continue
    const role = cmd.role

    // Environment: names, secret references, then the values through the real loader.
    const env: Record<string, string> = {}
    const entries = arr(container.env).map(obj)
    problems.push(...envNameProblems(where, role, entries.map((e) => str(e.name)), code))
    for (const e of entries) {
      const ref = obj(obj(e.valueFrom).secretKeyRef)
      if (e.valueFrom !== undefined) {
        const value = secretValue(objects, o.namespace, str(ref.name), str(ref.key))
        if (value === undefined) problems.push(`${where}: ${str(e.name)} refers to secret ${str(ref.name)} key ${str(ref.key)}, which no manifest defines`)
        else env[str(e.name)] = value
      } else env[str(e.name)] = str(e.value)
    }
    roles[role] = { o, container, env, labels }
    const loadErr = loadProblems(where, role, env)
    problems.push(...loadErr)
    if (loadErr.length > 0) continue
    const port = role === 'node' ? loadNodeOptions(env, {}, {}, SYS).port : loadFacadeOptions(env).port

    const containerPorts = arr(container.ports).map((p) => Number(obj(p).containerPort))
    if (containerPorts.length !== 1 || containerPorts[0] !== port) problems.push(`${where}: containerPort ${containerPorts.join(', ')}, but the ${role} listens on ${port}`)
    for (const kind of ['startupProbe', 'readinessProbe', 'livenessProbe'] as const) {
      const probe = obj(container[kind])
      if (container[kind] === undefined) continue
      const http = probe.httpGet === undefined ? null : obj(probe.httpGet)
      const p = resolvePort(http ? http.port : obj(probe.tcpSocket).port, container)
      if (p !== port) problems.push(`${where}: ${kind} asks port ${String(http ? http.port : obj(probe.tcpSocket).port)} (${p}), but the ${role} listens on ${port}`)
      if (http && !code.hasRoute(role, str(http.path))) problems.push(`${where}: ${kind} path ${str(http.path)} is not a GET route of the ${role}`)
    }
    if (container.readinessProbe === undefined) problems.push(`${where}: no readinessProbe`)
    if (container.livenessProbe === undefined) problems.push(`${where}: no livenessProbe`)
    const requests = obj(obj(container.resources).requests)
    if (requests.cpu === undefined || requests.memory === undefined) problems.push(`${where}: no cpu and memory requests`)

    if (role === 'node') {
      const opts: NodeOptions = loadNodeOptions(env, {}, {}, SYS)
      if (str(obj(obj(container.readinessProbe).httpGet).path) !== '/health') problems.push(`${where}: readinessProbe should ask /health`)
      if (str(obj(obj(container.livenessProbe).httpGet).path) !== '/health/live') problems.push(`${where}: livenessProbe should ask /health/live`)
      if (!(NODE_ENV.drainTimeoutMs in env)) problems.push(`${where}: set ${NODE_ENV.drainTimeoutMs} explicitly`)
      const grace = Number(podSpec.terminationGracePeriodSeconds ?? 30)
      if (!(grace > opts.drainTimeoutMs / 1000)) problems.push(`${where}: terminationGracePeriodSeconds ${grace} is not above the drain timeout (${opts.drainTimeoutMs / 1000} s)`)
      const limit = quantityBytes(obj(obj(container.resources).limits).memory)
      if (!(opts.kvBudgetMb * 2 ** 20 < limit)) problems.push(`${where}: the KV budget (${opts.kvBudgetMb} MiB) does not fit the memory limit`)
    }
    // Both serve /metrics: the node its engine's, the facade its own (requests, fail-open, node states).
    const ann = obj(obj(pod.metadata).annotations)
    if (ann['prometheus.io/scrape'] !== 'true') problems.push(`${where}: no prometheus.io/scrape annotation`)
    else {
      if (Number(ann['prometheus.io/port']) !== port) problems.push(`${where}: prometheus.io/port ${str(ann['prometheus.io/port'])} is not the ${role} port ${port}`)
      if (!code.hasRoute(role, str(ann['prometheus.io/path'] ?? '/metrics'))) problems.push(`${where}: prometheus.io/path is not a route of the ${role}`)
    }
  }

  const node = roles.node
  const facade = roles.facade
  if (!node || !facade) return [...problems, 'kubernetes: expected a node Deployment and a facade Deployment']
  const serving = (r: NonNullable<typeof node>) => services.filter((s) => s.namespace === r.o.namespace && matches(obj(obj(s.body.spec).selector), r.labels))
  const headless = serving(node).filter((s) => obj(s.body.spec).clusterIP === 'None')
  if (headless.length === 0) problems.push('kubernetes: no headless Service (clusterIP: None) selects the node pods')
  if (serving(facade).length === 0) problems.push('kubernetes: no Service selects the facade pods')
  for (const [r, list] of [[node, serving(node)], [facade, serving(facade)]] as const) {
    for (const s of list) {
      for (const p of arr(obj(s.body.spec).ports).map(obj)) {
        const target = resolvePort(p.targetPort ?? p.port, r.container)
        const containerPort = Number(obj(arr(r.container.ports)[0]).containerPort)
        if (target !== containerPort) problems.push(`${s.file} Service/${s.name}: targetPort ${str(p.targetPort)} is not the container's port ${containerPort}`)
      }
    }
  }

  // The facade's nodes: the headless Service's DNS name, on the port the pods listen on (its records are pod IPs).
  const nodePort = Number(obj(arr(node.container.ports)[0]).containerPort)
  const entries = (facade.env.ONNXD_NODES ?? '').split(',').map((e) => e.trim()).filter(Boolean)
  if (entries.length === 0) problems.push(`${facade.o.file}: the facade sets no ONNXD_NODES`)
  for (const entry of entries) {
    const e = nodeEntry(entry)
    const [svc, ns] = (e?.host ?? '').split('.')
    const known = headless.some((s) => s.name === svc && s.namespace === (ns ?? facade.o.namespace))
    if (!e) problems.push(`${facade.o.file}: ONNXD_NODES entry ${entry} is not an (dns+)http(s) URL`)
    else if (!known) problems.push(`${facade.o.file}: ONNXD_NODES entry ${entry} names no headless node Service`)
    else if (e.port !== nodePort) problems.push(`${facade.o.file}: ONNXD_NODES entry ${entry}: the node pods listen on ${nodePort}`)
    else if (!entry.startsWith('dns+')) problems.push(`${facade.o.file}: ONNXD_NODES entry ${entry} names a headless Service without dns+ (only one of its addresses would be used)`)
  }
  return problems
}

// ---------------------------------------------------------------------------------------------------------------
// deploy/grafana/onnxd-dashboard.json

interface MetricInfo {
  type: string
  labels: Set<string>
}

/**
 * Every metric the node and the facade register, and the process metrics both add (prom-client's process_* and
 * nodejs_*), with the labels their series carry (exercised once so every label appears).
 */
async function nodeMetricCatalog(): Promise<Map<string, MetricInfo>> {
  const registry = createRegistry()
  const metrics = createMetrics(registry, 'onnxd-tiny', 'cpu') // as src/node/server.ts does
  metrics.requestFailed('internal') // the failure counter has no series before its first failure
  const node = { url: 'http://n:8081', status: 'ready' as const, models: [], capacity: 1, free_slots: 1, inflight: 0, affinity_routed: 0, error: null }
  const facade = createFacadeMetrics({ router: { snapshot: () => [node] }, rateLimitFailures: () => 0 })
  facade.requestDone({ endpoint: '/v1/chat/completions', status: '200', outcome: 'ok', seconds: 0.01 })
  const out = new Map<string, MetricInfo>()
  for (const m of [...(await registry.getMetricsAsJSON()), ...(await facade.registry.getMetricsAsJSON()), ...(await processMetrics().getMetricsAsJSON())]) {
    const labels = new Set<string>()
    for (const v of m.values) for (const k of Object.keys(v.labels)) if (k !== 'le') labels.add(k)
    out.set(m.name, { type: String(m.type), labels })
  }
  return out
}

/** A PromQL expression of the dashboard, where it is, and its legend. */
interface Query {
  where: string
  expr: string
  legend?: string
}

/** Labels Prometheus adds to every scraped series. */
const TARGET_LABELS = ['instance', 'job']

/**
 * Problems of PromQL expressions against the node's metrics: names it does not export (a histogram only as
 * `_bucket`, `_sum`, `_count`), and labels in selectors, `by (...)` and legends that those series do not carry.
 */
function promqlProblems(exprs: Query[], catalog: Map<string, MetricInfo>): string[] {
  const problems: string[] = []
  for (const { where, expr, legend } of exprs) {
    const allowed = new Set(TARGET_LABELS)
    const refs = [...expr.matchAll(/\b((?:onnxd|process|nodejs)_[a-z0-9_]+)\s*(\{[^}]*\})?/g)]
    if (refs.length === 0) problems.push(`${where}: queries no metric of onnxd's servers`)
    for (const [, name, selector] of refs) {
      const stripped = name!.replace(/_(bucket|sum|count)$/, '')
      const direct = catalog.get(name!)
      const hist = stripped !== name ? catalog.get(stripped) : undefined
      let info: MetricInfo | undefined
      if (direct && direct.type !== 'histogram') info = direct
      else if (hist && hist.type === 'histogram') info = hist
      else {
        problems.push(`${where}: ${name} is not a series the node exports${direct?.type === 'histogram' ? ' (a histogram: query _bucket, _sum or _count)' : ''}`)
        continue
      }
      const own = new Set([...info.labels, ...TARGET_LABELS, ...(name!.endsWith('_bucket') ? ['le'] : [])])
      for (const l of own) allowed.add(l)
      for (const [, label] of (selector ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)/g)) {
        if (!own.has(label!)) problems.push(`${where}: ${name} has no label ${label}`)
      }
    }
    for (const [, list] of expr.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g)) {
      for (const l of list!.split(',').map((s) => s.trim()).filter(Boolean)) if (!allowed.has(l)) problems.push(`${where}: groups by ${l}, a label none of its metrics has`)
    }
    for (const [, l] of (legend ?? '').matchAll(/\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}/g)) {
      if (!allowed.has(l!)) problems.push(`${where}: legend uses {{${l}}}, a label none of its metrics has`)
    }
  }
  return problems
}

interface Panel {
  id?: number
  type?: string
  title?: string
  datasource?: { type?: string; uid?: string }
  targets?: { expr?: string; legendFormat?: string; datasource?: { uid?: string } }[]
  panels?: Panel[]
}
interface Dashboard {
  schemaVersion: number
  uid: string
  title: string
  templating: { list: { name: string; type: string; query: unknown; definition?: string; datasource?: { uid?: string } }[] }
  panels: Panel[]
}

const DS_REFS = ['${datasource}', '$datasource', '${DS_PROMETHEUS}']

function dashboardQueries(d: Dashboard): Query[] {
  const panels = d.panels.flatMap((p) => [p, ...(p.panels ?? [])])
  const out: Query[] = panels.flatMap((p) => (p.targets ?? []).map((t) => ({ where: `panel "${p.title}"`, expr: t.expr ?? '', legend: t.legendFormat })))
  for (const v of d.templating.list) if (v.type === 'query') out.push({ where: `variable ${v.name}`, expr: v.definition ?? str(obj(v.query).query) })
  return out
}

// ---------------------------------------------------------------------------------------------------------------

describe('deployment files for a fleet (issue #15)', () => {
  let node: TestNode
  let facade: FacadeFixture
  let code: Code
  const apps: Partial<Record<Role, FastifyInstance>> = {}

  beforeAll(async () => {
    node = testNode()
    facade = await facadeFixture({ nodeUrls: ['http://127.0.0.1:9'] })
    apps.node = node.app
    apps.facade = facade.app
    await node.app.ready()
    await facade.app.ready()
    const image = dockerfile()
    code = {
      imageCmd: image.cmd,
      imageVolumes: image.volumes,
      commands: cliCommands(),
      env: ENV_OF,
      hasRoute: (role, path) => apps[role]!.hasRoute({ method: 'GET', url: path }),
    }
  })
  afterAll(async () => {
    await node?.app.close()
    await facade?.close()
  })

  describe('what the checks read from the code', () => {
    it('finds the image command, the CLI table and the routes the probes use', async () => {
      expect(code.imageCmd).toEqual(['node', 'bin/onnxd.js', 'serve'])
      expect([...code.commands]).toEqual(expect.arrayContaining(['serve', 'node', 'facade']))
      for (const path of ['/health', '/health/live', '/metrics']) expect(code.hasRoute('node', path), path).toBe(true)
      expect(code.hasRoute('facade', '/health')).toBe(true)
      expect(code.hasRoute('node', '/healthz')).toBe(false)
      // hasRoute agrees with a request: the node answers its liveness probe, and an unknown path is a 404.
      expect((await node.app.inject({ method: 'GET', url: '/health/live' })).statusCode).toBe(200)
      expect((await node.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(404)
    })

    it('reads compose interpolation as Compose does', () => {
      expect(interpolate('a${X:-d}b', {})).toBe('adb')
      expect(interpolate('a${X:-d}b', { X: '' })).toBe('adb')
      expect(interpolate('a${X-d}b', { X: '' })).toBe('ab')
      expect(interpolate('${X}-$X-$$X', { X: 'v' })).toBe('v-v-$X')
      expect(goDurationS('1m30s')).toBe(90)
      expect(quantityBytes('6Gi')).toBe(6 * 2 ** 30)
    })
  })

  describe('compose.yaml', () => {
    it('holds against the code: commands, variables, ports, health checks, drain, ONNXD_NODES, stores', () => {
      expect(composeProblems(loadCompose(), code)).toEqual([])
    })

    it('runs two nodes and two facades, and requires the JWT secret from the environment (no default to go live)', () => {
      const services = obj(loadCompose().services)
      expect(Object.keys(services)).toEqual(expect.arrayContaining(['postgres', 'redis', 'node-1', 'node-2', 'facade-1', 'facade-2']))
      expect(() => loadCompose({})).toThrow('compose: ONNXD_JWT_SECRET is required: set ONNXD_JWT_SECRET (openssl rand -base64 48 makes one)')
      // The operator's secret reaches every facade.
      const secret = 'x'.repeat(40)
      const mine = obj(loadCompose({ ONNXD_JWT_SECRET: secret }).services)
      for (const f of ['facade-1', 'facade-2']) expect(composeEnv(obj(mine[f])).ONNXD_JWT_SECRET).toBe(secret)
      expect(composeProblems(loadCompose({ ONNXD_JWT_SECRET: secret, POSTGRES_PASSWORD: 'other' }), code)).toEqual([])
    })

    it('fails on planted mistakes', () => {
      const bad = loadCompose()
      const s = obj(bad.services)
      const env = (name: string) => obj(obj(s[name]).environment)
      env('node-1').ONNXD_NOT_AN_OPTION = '1'
      env('node-1').HF_HOME = '/cache/hf' // read by a node (hub models): not a problem
      env('facade-1').HF_TOKEN = 'hf_x'
      env('facade-1').ONNXD_DRAIN_TIMEOUT_MS = '5000'
      env('facade-1').ONNXD_NODES = 'http://node-1:8081,http://node-3:8081'
      env('node-2').ONNXD_NODE_PORT = '9000'
      obj(s['node-2']).stop_grace_period = '20s'
      obj(s['facade-2']).command = ['node', 'bin/onnxd.js', 'gateway']
      const problems = composeProblems(bad, code).join('\n')
      expect(problems).toContain('node-1: ONNXD_NOT_AN_OPTION is not an option of the node')
      expect(problems).toContain('facade-1: HF_TOKEN is read by nothing in onnxd (a node reads it, not a facade)')
      expect(problems).not.toContain('HF_HOME')
      expect(problems).toContain("facade-1: ONNXD_DRAIN_TIMEOUT_MS is not an option of the facade (it is the node's)")
      expect(problems).toContain('ONNXD_NODES entry http://node-3:8081 names no node service')
      expect(problems).toContain('ONNXD_NODES does not list node node-2')
      expect(problems).toContain('node-2: healthcheck asks port 8081, but the node listens on 9000')
      expect(problems).toContain('node-2: stop_grace_period 20s is not above the drain timeout (30 s)')
      expect(problems).toContain("facade-2: 'gateway' is not an onnxd command")
      const noRoutes = composeProblems(loadCompose(), { ...code, hasRoute: (role, path) => !(role === 'node' && path === '/health') })
      expect(noRoutes.join('\n')).toContain('node-1: healthcheck path /health is not a GET route of the node')
    })
  })

  describe('deploy/kubernetes', () => {
    it('holds against the code: commands, variables and secrets, ports, probes, grace period, Services, ONNXD_NODES', () => {
      expect(kubernetesProblems(loadKubernetes(), code)).toEqual([])
    })

    it('has the pieces an operator applies: namespace, secret, node and facade Deployments and Services', () => {
      const objects = loadKubernetes()
      const kinds = objects.map((o) => `${o.kind}/${o.name}`)
      expect(kinds).toEqual(expect.arrayContaining(['Namespace/onnxd', 'Secret/onnxd-secrets', 'Deployment/onnxd-node', 'Service/onnxd-node', 'Deployment/onnxd-facade', 'Service/onnxd-facade']))
      const facadeEnv = arr(podOf(objects.find((o) => o.name === 'onnxd-facade' && o.kind === 'Deployment')!.body).container.env).map(obj)
      const fromSecret = facadeEnv.filter((e) => e.valueFrom !== undefined).map((e) => e.name)
      expect(fromSecret).toEqual(expect.arrayContaining(['ONNXD_JWT_SECRET', 'ONNXD_DATABASE_URL']))
      expect(facadeEnv.find((e) => e.name === 'ONNXD_NODES')?.value).toBe('dns+http://onnxd-node.onnxd.svc.cluster.local:8081')
    })

    it('fails on planted mistakes', () => {
      const objects = loadKubernetes()
      const nodeDep = objects.find((o) => o.kind === 'Deployment' && o.name === 'onnxd-node')!
      const { podSpec, container } = podOf(nodeDep.body)
      podSpec.terminationGracePeriodSeconds = 30
      obj(obj(container.livenessProbe).httpGet).path = '/live'
      arr(container.env).map(obj).find((e) => e.name === 'ONNXD_NODE_PORT')!.value = '9001'
      const facadeDep = objects.find((o) => o.kind === 'Deployment' && o.name === 'onnxd-facade')!
      const fEnv = arr(podOf(facadeDep.body).container.env).map(obj)
      fEnv.find((e) => e.name === 'ONNXD_NODES')!.value = 'dns+http://onnxd-nodes.onnxd.svc.cluster.local:8081'
      obj(fEnv.find((e) => e.name === 'ONNXD_JWT_SECRET')!.valueFrom).secretKeyRef = { name: 'onnxd-secrets', key: 'JWT' }
      const problems = kubernetesProblems(objects, code).join('\n')
      expect(problems).toContain('terminationGracePeriodSeconds 30 is not above the drain timeout (30 s)')
      expect(problems).toContain('livenessProbe path /live is not a GET route of the node')
      expect(problems).toContain('containerPort 8081, but the node listens on 9001')
      expect(problems).toContain('readinessProbe asks port http (8081), but the node listens on 9001')
      expect(problems).toContain('ONNXD_NODES entry dns+http://onnxd-nodes.onnxd.svc.cluster.local:8081 names no headless node Service')
      expect(problems).toContain('ONNXD_JWT_SECRET refers to secret onnxd-secrets key JWT, which no manifest defines')
    })
  })

  describe('deploy/grafana/onnxd-dashboard.json', () => {
    const dashboard = JSON.parse(read('deploy/grafana/onnxd-dashboard.json')) as Dashboard

    it('queries only series the node exports, by labels they carry', async () => {
      const queries = dashboardQueries(dashboard)
      expect(queries.length).toBeGreaterThan(20)
      expect(promqlProblems(queries, await nodeMetricCatalog())).toEqual([])
    })

    it('covers throughput, latency percentiles, load, KV and prefix cache, and errors', () => {
      const exprs = dashboardQueries(dashboard).map((q) => q.expr)
      const has = (re: RegExp) => expect(exprs.some((e) => re.test(e)), String(re)).toBe(true)
      has(/rate\(onnxd_generation_tokens_total\b/)
      has(/rate\(onnxd_request_success_total\b/)
      has(/histogram_quantile\(0\.99, .*onnxd_time_to_first_token_seconds_bucket/)
      has(/histogram_quantile\(0\.99, .*onnxd_inter_token_latency_seconds_bucket/)
      has(/onnxd_num_requests_running\b/)
      has(/onnxd_num_requests_waiting\b/)
      has(/onnxd_kv_cache_usage_perc\b/)
      has(/onnxd_prefix_cache_hits_total\b.*\/.*onnxd_prefix_cache_queries_total\b/)
      has(/by \(outcome, code\) \(rate\(onnxd_request_failures_total\b/)
      has(/ceil\(histogram_quantile\(0\.5, .*onnxd_batch_size_bucket/)
      has(/rate\(process_cpu_seconds_total\b.*\) and on \(instance\) \(onnxd_info or onnxd_facade_store_up\)/)
      has(/nodejs_eventloop_lag_p99_seconds\b/)
    })

    it('counts errors of the service apart from clients that hung up, and queries no deprecated name', () => {
      const panels = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])])
      const exprsOf = (title: string): string[] => (panels.find((p) => p.title === title)?.targets ?? []).map((t) => t.expr ?? '')
      expect(exprsOf('Errors / s')).toEqual([expect.stringMatching(/^sum\(rate\(onnxd_request_failures_total\{outcome="server_error", /)])
      expect(exprsOf('Client hang-ups / s')).toEqual([expect.stringMatching(/^sum\(rate\(onnxd_request_failures_total\{outcome="client_gone", /)])
      for (const q of dashboardQueries(dashboard)) {
        // A sum over failures or facade requests either selects an outcome or keeps outcomes apart.
        if (/onnxd_(request_failures|facade_requests)_total\b/.test(q.expr)) expect(q.expr, q.where).toMatch(/outcome|by \(status\)/)
        for (const d of DEPRECATED_METRICS) expect(q.expr, q.where).not.toMatch(new RegExp(`\\b${d.name}\\b`))
      }
    })

    it('is importable: schema version, a Prometheus data-source variable used by every panel, unique ids', () => {
      expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36)
      expect(dashboard.schemaVersion).toBeLessThanOrEqual(41)
      expect(dashboard.uid).toMatch(/^[\w-]{1,40}$/)
      const ds = dashboard.templating.list.find((v) => v.type === 'datasource')
      expect(ds).toMatchObject({ name: 'datasource', query: 'prometheus' })
      const panels = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])])
      const ids = panels.map((p) => p.id)
      expect(new Set(ids).size).toBe(ids.length)
      for (const p of panels.filter((x) => x.type !== 'row')) {
        expect(DS_REFS, `panel "${p.title}"`).toContain(p.datasource?.uid)
        for (const t of p.targets ?? []) expect(DS_REFS, `panel "${p.title}"`).toContain(t.datasource?.uid)
      }
    })

    it('fails on planted mistakes', async () => {
      const problems = promqlProblems(
        [
          { where: 'made-up', expr: 'sum(rate(onnxd_made_up_tokens_total[5m]))' },
          { where: 'made-up process metric', expr: 'rate(process_made_up_seconds_total[5m])' },
          { where: 'bare histogram', expr: 'rate(onnxd_time_to_first_token_seconds[5m])' },
          { where: 'suffix on a counter', expr: 'onnxd_generation_tokens_total_bucket' },
          { where: 'bad selector', expr: 'onnxd_num_requests_running{finished_reason="stop"}' },
          { where: 'bad grouping', expr: 'sum by (code) (onnxd_num_requests_running)', legend: '{{phase}}' },
        ],
        await nodeMetricCatalog(),
      )
      expect(problems).toEqual([
        'made-up: onnxd_made_up_tokens_total is not a series the node exports',
        'made-up process metric: process_made_up_seconds_total is not a series the node exports',
        'bare histogram: onnxd_time_to_first_token_seconds is not a series the node exports (a histogram: query _bucket, _sum or _count)',
        'suffix on a counter: onnxd_generation_tokens_total_bucket is not a series the node exports',
        'bad selector: onnxd_num_requests_running has no label finished_reason',
        'bad grouping: groups by code, a label none of its metrics has',
        'bad grouping: legend uses {{phase}}, a label none of its metrics has',
      ])
    })
  })
})
