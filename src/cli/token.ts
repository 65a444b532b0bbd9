// `onnxd token <account-id> [--ttl S]`: mints an HS256 session token with the facade's secret; prints only the JWT.
import { parseArgs } from 'node:util'
import { OnnxdError } from '../shared/errors.js'
import { mintSessionToken } from '../facade/auth/jwt.js'
import { resolveJwtSecret } from '../facade/auth/secret.js'
import { operatorOptions, withStore } from './operator.js'

const USAGE = `usage: onnxd token <account-id> [--ttl SECONDS]   (default 3600; at most ONNXD_JWT_MAX_TTL_S, 86400 by default)
options: --data-dir DIR (ONNXD_DATA_DIR), --config FILE; the secret is ONNXD_JWT_SECRET or <data-dir>/jwt-secret
`

export async function run(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      ttl: { type: 'string', default: '3600' },
      'data-dir': { type: 'string' },
      config: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  })
  if (values.help) {
    process.stdout.write(USAGE)
    return 0
  }
  if (positionals.length !== 1) {
    process.stderr.write(USAGE)
    return 2
  }
  if (!/^\d+$/.test(values.ttl) || Number(values.ttl) < 1) {
    throw new OnnxdError('invalid_value', `--ttl must be a whole number of seconds >= 1. Given: ${values.ttl}`)
  }
  const opts = operatorOptions(values, env)
  if (Number(values.ttl) > opts.jwtMaxTtlS) {
    throw new OnnxdError(
      'invalid_value',
      `--ttl must be <= ${opts.jwtMaxTtlS} s, the longest session the facade accepts (jwtMaxTtlS, ONNXD_JWT_MAX_TTL_S). Given: ${values.ttl}`,
    )
  }
  if (opts.jwtSecret === undefined && (opts.jwksUrl !== undefined || opts.jwksFile !== undefined)) {
    throw new OnnxdError(
      'config',
      'a JWKS is configured and no ONNXD_JWT_SECRET: session tokens come from your identity provider, not from onnxd',
    )
  }
  const accountId = positionals[0]!
  await withStore(opts, async (store) => {
    if (!(await store.getAccount(accountId))) throw new OnnxdError('not_found', `no account '${accountId}'`)
  })
  const token = await mintSessionToken({
    secret: resolveJwtSecret(opts.dataDir, opts.jwtSecret),
    accountId,
    ttlS: Number(values.ttl),
    issuer: opts.jwtIssuer,
    audience: opts.jwtAudience,
  })
  process.stdout.write(`${token}\n`)
  return 0
}
