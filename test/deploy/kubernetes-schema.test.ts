// deploy/kubernetes/*.yaml against the Kubernetes OpenAPI schemas, as the API server would take them (issue #35):
// each object through the validator that npm's kubernetes-models generated from the schema of its apiVersion and
// kind, and no field the schema does not define (the validator alone lets unknown fields through, as `kubectl apply`
// without --validate=strict would, where the server then drops them silently).
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { parseAllDocuments } from 'yaml'

const DIR = join(import.meta.dirname, '../../deploy/kubernetes')

type Json = Record<string, unknown>
/** A kubernetes-models model's validate(): the schema's generated validator run over `this`; throws its errors. */
type Validate = (this: unknown) => void
interface SchemaError {
  instancePath: string
  message?: string
  keyword: string
}

/** The kubernetes-models module of each apiVersion/kind the manifests use (it exports a class named as the kind). */
const MODELS: Record<string, string> = {
  'v1/Namespace': 'kubernetes-models/v1/Namespace',
  'v1/Secret': 'kubernetes-models/v1/Secret',
  'v1/Service': 'kubernetes-models/v1/Service',
  'v1/ConfigMap': 'kubernetes-models/v1/ConfigMap',
  'apps/v1/Deployment': 'kubernetes-models/apps/v1/Deployment',
  'apps/v1/StatefulSet': 'kubernetes-models/apps/v1/StatefulSet',
  'policy/v1/PodDisruptionBudget': 'kubernetes-models/policy/v1/PodDisruptionBudget',
}

async function validatorFor(apiVersion: string, kind: string): Promise<Validate | null> {
  const mod = MODELS[`${apiVersion}/${kind}`]
  if (!mod) return null
  const ctor = ((await import(mod)) as Record<string, { prototype: { validate: Validate } }>)[kind]
  return ctor?.prototype.validate ?? null
}

/**
 * Runs the schema's validator over `data` wrapped so that every property it reads is recorded. The generated
 * validator reads each property its schema defines (and every key of a map), so an own key it never read is one the
 * schema does not know: an unknown field, reported with its path.
 */
function validate(validator: Validate, data: unknown): string[] {
  const read = new Map<object, Set<string>>()
  const paths = new Map<object, string>()
  const wrap = (v: unknown, path: string): unknown => {
    if (v === null || typeof v !== 'object') return v
    const seen = new Set<string>()
    const target = v as Json
    const proxy = new Proxy(target, {
      get(t, key, receiver) {
        if (typeof key === 'string') seen.add(key)
        const value = Reflect.get(t, key, receiver) as unknown
        return typeof key === 'string' && Object.hasOwn(t, key) ? wrapped(value, `${path}/${key}`) : value
      },
    })
    read.set(target, seen)
    paths.set(target, path)
    return proxy
  }
  const cache = new Map<unknown, unknown>()
  const wrapped = (v: unknown, path: string): unknown => {
    if (v === null || typeof v !== 'object') return v
    if (!cache.has(v)) cache.set(v, wrap(v, path))
    return cache.get(v)
  }
  let problems: string[] = []
  try {
    validator.call(wrapped(data, ''))
  } catch (e) {
    const errors = (e as { errors?: SchemaError[] }).errors
    if (!errors) throw e
    problems = errors.map((err) => `${err.instancePath || '/'}: ${err.message ?? err.keyword}`)
  }
  if (problems.length > 0) return problems // a failing validator may stop reading early: its errors come first
  for (const [target, seen] of read) {
    if (Array.isArray(target)) continue
    for (const key of Object.keys(target)) if (!seen.has(key)) problems.push(`${paths.get(target) || '/'}/${key}: unknown field`)
  }
  return problems
}

interface Manifest {
  where: string
  body: Json
}

function manifests(): Manifest[] {
  const out: Manifest[] = []
  for (const file of readdirSync(DIR).filter((f) => /\.ya?ml$/.test(f)).sort()) {
    for (const doc of parseAllDocuments(readFileSync(join(DIR, file), 'utf8'))) {
      const body = doc.toJS() as Json | null
      if (body === null) continue
      const meta = (body.metadata ?? {}) as Json
      out.push({ where: `${file} ${String(body.kind)}/${String(meta.name)}`, body })
    }
  }
  return out
}

async function problemsOf(m: Manifest): Promise<string[]> {
  const validator = await validatorFor(String(m.body.apiVersion), String(m.body.kind))
  if (!validator) return [`${m.where}: no schema for ${String(m.body.apiVersion)}/${String(m.body.kind)} (add it to MODELS)`]
  return validate(validator, m.body).map((p) => `${m.where}: ${p}`)
}

describe('deploy/kubernetes against the Kubernetes schemas (kubernetes-models)', () => {
  it('every object validates, with no unknown field', async () => {
    const all = manifests()
    expect(all.map((m) => m.where)).toEqual(expect.arrayContaining(['20-node.yaml Deployment/onnxd-node', '30-facade.yaml Deployment/onnxd-facade']))
    const problems = (await Promise.all(all.map(problemsOf))).flat()
    expect(problems).toEqual([])
  })

  it('fails on planted mistakes: a wrong type, a missing required field, unknown fields at any depth', async () => {
    const node = manifests().find((m) => m.where === '20-node.yaml Deployment/onnxd-node')!
    const body = structuredClone(node.body)
    const spec = body.spec as Json
    const podSpec = (spec.template as Json).spec as Json
    const container = (podSpec.containers as Json[])[0]!
    // Misspelled and misplaced fields, as a hand edit makes them.
    spec.replica = 3
    container.envFrom = [{ secretRef: { name: 'onnxd-secrets' }, secretKey: 'x' }]
    ;(container.readinessProbe as Json).httpGet = { path: '/health', port: 'http', timeout: 3 }
    podSpec.terminationGracePeriod = 45
    const unknown = await problemsOf({ where: node.where, body })
    expect(unknown).toEqual(
      expect.arrayContaining([
        `${node.where}: /spec/replica: unknown field`,
        `${node.where}: /spec/template/spec/terminationGracePeriod: unknown field`,
        `${node.where}: /spec/template/spec/containers/0/envFrom/0/secretKey: unknown field`,
        `${node.where}: /spec/template/spec/containers/0/readinessProbe/httpGet/timeout: unknown field`,
      ]),
    )
    expect(unknown).toHaveLength(4)

    const typed = structuredClone(node.body)
    ;((typed.spec as Json).template as Json).spec = { ...podSpec, terminationGracePeriodSeconds: '45', containers: [{ image: 'onnxd:0.1.0' }] }
    const typeProblems = (await problemsOf({ where: node.where, body: typed })).join('\n')
    expect(typeProblems).toContain('/spec/template/spec/terminationGracePeriodSeconds: must be integer')
    expect(typeProblems).toContain('/spec/template/spec/containers/0: must have required property name')

    // Maps (labels, annotations, a Secret's stringData) take any key.
    const secret = manifests().find((m) => m.where.startsWith('10-secret.yaml'))!
    const more = structuredClone(secret.body)
    ;(more.stringData as Json).ANY_KEY = 'v'
    expect(await problemsOf({ where: secret.where, body: more })).toEqual([])
  })
})
