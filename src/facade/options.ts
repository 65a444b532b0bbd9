// The facade's options: one TypeBox schema, read once at start-up from a config-file section, the environment
// (ONNXD_*) and command-line flags, in that order of precedence (flags win), by the shared loader.
// Imports: shared options and config file, the PostgreSQL store's default pool size, typebox.
import { Type, type Static } from '@sinclair/typebox'
import { LOG_LEVELS, readConfigSection } from '../shared/config-file.js'
import { flagInput, loadOptions, optionFlags, optionName, type Env, type OptionsSpec } from '../shared/options.js'
import { DEFAULT_MAX_CONNECTIONS } from '../store/postgres.js'

const Url = Type.String({ pattern: '^https?://[^\\s/]+', description: 'an http(s) URL' })
/** A node's base URL, or `dns+http(s)://name:port`: every address the name resolves to, re-resolved periodically. */
const NodeEntry = Type.String({ pattern: '^(dns\\+)?https?://[^\\s/]+', description: 'an http(s) URL, or dns+http(s)://name:port' })

export const ModelPrice = Type.Object(
  {
    /** Currency units per 1M prompt tokens (1 unit per 1M tokens = 1 micro-unit per token). */
    prompt: Type.Number({ minimum: 0 }),
    /** Currency units per 1M completion tokens. */
    completion: Type.Number({ minimum: 0 }),
  },
  { additionalProperties: false },
)
export type ModelPrice = Static<typeof ModelPrice>

/** What a model costs when `prices` names neither it nor `*`: small, so that credits go down out of the box. */
export const DEFAULT_PRICE: ModelPrice = { prompt: 0.5, completion: 1.5 }

export const FacadeOptions = Type.Object(
  {
    port: Type.Integer({ minimum: 0, maximum: 65535, default: 8080 }),
    host: Type.String({ minLength: 1, default: '127.0.0.1' }),
    /**
     * The worker nodes this facade fronts: base URLs, or `dns+http://name:port` for every address a name resolves
     * to (a Kubernetes headless service), re-resolved every `dnsIntervalMs`.
     */
    nodes: Type.Array(NodeEntry, { minItems: 1, default: ['http://127.0.0.1:8081'] }),
    /** How often the DNS names among `nodes` are resolved again. A failed lookup keeps the addresses it had. */
    dnsIntervalMs: Type.Integer({ minimum: 100, default: 10_000 }),
    /**
     * Prefix affinity: requests whose prompts share their first this-many characters go to the same node (by
     * rendezvous hashing, the same choice on every facade) while it has a free running slot, so that its prefix
     * cache serves them; otherwise, and for shorter prompts, the least-loaded node. 0 turns it off.
     */
    affinityPrefixChars: Type.Integer({ minimum: 0, default: 1024 }),
    /** Holds the SQLite database and, when no secret is configured, the generated JWT secret. */
    dataDir: Type.String({ minLength: 1, default: 'data' }),
    /**
     * PostgreSQL holding accounts, keys and usage, shared by every facade given the same URL (`postgres://…`).
     * Absent: SQLite in `dataDir`. (Its scheme is checked below, so that a bad value, which may hold a password, is
     * never echoed.)
     */
    databaseUrl: Type.Optional(Type.String({ minLength: 1 })),
    /**
     * Most PostgreSQL connections this facade holds. Small on purpose: a completion's queries are short, so a few
     * connections kept busy serve hundreds of requests a second, where many idle ones each cost the server a
     * process to wake per query (docs/benchmarks.md, the facade benchmark); and every facade's pool counts against the
     * server's `max_connections`.
     */
    databasePoolSize: Type.Integer({ minimum: 1, maximum: 1000, default: DEFAULT_MAX_CONNECTIONS }),
    /** Redis holding the rate-limit counters, shared by every facade given the same URL (`redis://…`). Absent: in process. */
    redisUrl: Type.Optional(Type.String({ minLength: 1 })),
    /** HS256 secret for session tokens. Absent: generated once and kept in `<dataDir>/jwt-secret` (not in production). */
    jwtSecret: Type.Optional(Type.String({ minLength: 32 })),
    /** A JWKS URL or file with the public keys of RS256/ES256 session tokens. */
    jwksUrl: Type.Optional(Url),
    jwksFile: Type.Optional(Type.String({ minLength: 1 })),
    /** When set, session tokens must carry this `iss` / `aud`. */
    jwtIssuer: Type.Optional(Type.String({ minLength: 1 })),
    jwtAudience: Type.Optional(Type.String({ minLength: 1 })),
    /** Longest accepted session-token lifetime in seconds (`exp - iat`, or `exp - now` without `iat`). */
    jwtMaxTtlS: Type.Integer({ minimum: 1, default: 86_400 }),
    /** Default requests per minute per API key (a key's own `rpm_limit` overrides it); 0 = unlimited. */
    keyRpm: Type.Integer({ minimum: 0, default: 600 }),
    /** Requests per minute over all keys of this facade; 0 = unlimited. */
    fleetRpm: Type.Integer({ minimum: 0, default: 60_000 }),
    /**
     * Sequences one API key may run at once through this facade (a request holds one per choice, `n`, and per
     * prompt, until it ends); over it, 429 with Retry-After. 0 = unlimited.
     */
    keyMaxSequences: Type.Integer({ minimum: 0, default: 64 }),
    /** Prices per model id; the key `*` applies to models not listed, and `defaultPrice` when there is no `*`. */
    prices: Type.Record(Type.String({ minLength: 1 }), ModelPrice, { default: {} }),
    /** The price of a model that `prices` does not name (set both to 0 to make unpriced models free). */
    defaultPrice: Type.Object(ModelPrice.properties, { additionalProperties: false, default: DEFAULT_PRICE }),
    /** Usage of completions in flight is saved at least this often (ms): a crash loses at most this much. */
    billingFlushMs: Type.Integer({ minimum: 50, maximum: 60_000, default: 1000 }),
    /** ... and whenever a completion has delivered this many tokens since its last save. */
    billingFlushTokens: Type.Integer({ minimum: 1, default: 16 }),
    /** How often each node's /health is polled. */
    healthIntervalMs: Type.Integer({ minimum: 50, default: 2000 }),
    /** Longest wait for a node's response headers, and for the next chunk of a stream. */
    nodeTimeoutMs: Type.Integer({ minimum: 1000, default: 600_000 }),
    /** Largest accepted request body, in bytes (413 above). */
    bodyLimit: Type.Integer({ minimum: 1024, default: 1_048_576 }),
    logLevel: Type.Union(
      LOG_LEVELS.map((l) => Type.Literal(l)),
      { default: 'info' },
    ),
  },
  { additionalProperties: false },
)
export type FacadeOptions = Static<typeof FacadeOptions>

type Field = keyof FacadeOptions

/** Options that are secrets: no flag (ONNXD_JWT_SECRET or the config file only), and never quoted in a problem. */
export const FACADE_SECRETS: readonly Field[] = ['jwtSecret']

/** The environment variable of each option. */
export const FACADE_ENV: Record<Field, string> = {
  port: 'ONNXD_PORT',
  host: 'ONNXD_HOST',
  nodes: 'ONNXD_NODES',
  dnsIntervalMs: 'ONNXD_DNS_INTERVAL_MS',
  affinityPrefixChars: 'ONNXD_AFFINITY_PREFIX_CHARS',
  dataDir: 'ONNXD_DATA_DIR',
  databaseUrl: 'ONNXD_DATABASE_URL',
  databasePoolSize: 'ONNXD_DATABASE_POOL_SIZE',
  redisUrl: 'ONNXD_REDIS_URL',
  jwtSecret: 'ONNXD_JWT_SECRET',
  jwksUrl: 'ONNXD_JWKS_URL',
  jwksFile: 'ONNXD_JWKS_FILE',
  jwtIssuer: 'ONNXD_JWT_ISSUER',
  jwtAudience: 'ONNXD_JWT_AUDIENCE',
  jwtMaxTtlS: 'ONNXD_JWT_MAX_TTL_S',
  keyRpm: 'ONNXD_KEY_RPM',
  fleetRpm: 'ONNXD_FLEET_RPM',
  keyMaxSequences: 'ONNXD_KEY_MAX_SEQUENCES',
  prices: 'ONNXD_PRICES',
  defaultPrice: 'ONNXD_DEFAULT_PRICE',
  billingFlushMs: 'ONNXD_BILLING_FLUSH_MS',
  billingFlushTokens: 'ONNXD_BILLING_FLUSH_TOKENS',
  healthIntervalMs: 'ONNXD_HEALTH_INTERVAL_MS',
  nodeTimeoutMs: 'ONNXD_NODE_TIMEOUT_MS',
  bodyLimit: 'ONNXD_BODY_LIMIT',
  logLevel: 'ONNXD_LOG_LEVEL',
}

/** The command-line flag of each option (`--data-dir` for dataDir). */
export const FACADE_FLAGS: Record<Field, string> = optionFlags(FACADE_ENV)

export type { Env }

/** A JSON string, or an error showing the form expected. */
const json =
  (example: string) =>
  (raw: string): unknown => {
    try {
      return JSON.parse(raw) as unknown
    } catch {
      throw new Error(`must be JSON such as ${example}`)
    }
  }

/** Base URLs compare as given without their trailing slashes. */
const withoutTrailingSlashes = (v: unknown): unknown => (Array.isArray(v) ? v.map((n) => (typeof n === 'string' ? n.replace(/\/+$/, '') : n)) : v)

const SPEC: OptionsSpec<typeof FacadeOptions> = {
  name: 'facade',
  schema: FacadeOptions,
  env: FACADE_ENV,
  parse: {
    nodes: (raw) =>
      raw
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean),
    prices: json('{"my-model":{"prompt":0.5,"completion":1.5}}'),
    defaultPrice: json('{"prompt":0.5,"completion":1.5}'),
  },
  normalize: { nodes: withoutTrailingSlashes },
  secrets: FACADE_SECRETS,
  check: (v, env) => {
    const problems: string[] = []
    const name = (field: Field): string => optionName(FACADE_ENV, field, FACADE_SECRETS)
    // The URLs are not quoted: they can carry a password.
    if (typeof v.databaseUrl === 'string' && !/^postgres(ql)?:\/\/./.test(v.databaseUrl)) {
      problems.push(`${name('databaseUrl')}: must be a postgres:// URL`)
    }
    if (typeof v.redisUrl === 'string' && !/^rediss?:\/\/./.test(v.redisUrl)) {
      problems.push(`${name('redisUrl')}: must be a redis:// or rediss:// URL`)
    }
    if (v.jwksUrl !== undefined && v.jwksFile !== undefined) {
      problems.push(`${name('jwksUrl')} and ${name('jwksFile')} are exclusive: set one`)
    }
    if (env.NODE_ENV === 'production' && v.jwtSecret === undefined && v.jwksUrl === undefined && v.jwksFile === undefined) {
      problems.push(`${name('jwtSecret')} is required when NODE_ENV=production (or configure ONNXD_JWKS_URL / ONNXD_JWKS_FILE)`)
    }
    return problems
  },
}

/**
 * Reads the facade's options: `file` (the `facade` section of onnxd.config.json) under the environment under
 * `flags` (see loadOptions). Lists every problem in one `OnnxdError('config')`, naming each field and its
 * variable. The result is frozen.
 */
export function loadFacadeOptions(env: Env, flags: Partial<Record<Field, unknown>> = {}, file: Record<string, unknown> = {}): FacadeOptions {
  return loadOptions(SPEC, env, flags, file)
}

/** The `facade` section of the config file: `path` if given (must exist), else ./onnxd.config.json if present. */
export const readFacadeConfig = (path?: string): Record<string, unknown> => readConfigSection('facade', path)

/** Flags named like the options (`--data-dir`, `--key-rpm`) as loader input; others are ignored. */
export function facadeFlags(values: Record<string, unknown>): Partial<Record<Field, unknown>> {
  return flagInput(FACADE_FLAGS, values)
}
