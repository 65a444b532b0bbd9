// Session tokens: JWTs verified with jose against an algorithm allowlist (HS256 with the configured secret,
// RS256/ES256 from a configured JWKS); `exp` and `sub` (the account id) are required; a token issued in the future
// or living longer than the configured maximum is refused, with `CLOCK_SKEW_S` of leeway. Imports: shared errors.
import { readFileSync } from 'node:fs'
import {
  createLocalJWKSet,
  createRemoteJWKSet,
  decodeProtectedHeader,
  errors as joseErrors,
  jwtVerify,
  SignJWT,
  type JSONWebKeySet,
  type JWTPayload,
  type JWTVerifyGetKey,
  type JWTVerifyOptions,
} from 'jose'
import { clip, OnnxdError } from '../../shared/errors.js'

export const HMAC_ALGORITHMS = ['HS256'] as const
export const ASYMMETRIC_ALGORITHMS = ['RS256', 'ES256'] as const

/** Leeway for the issuer's clock running ahead of ours: `iat` up to this far in the future is accepted. */
export const CLOCK_SKEW_S = 60

export interface SessionVerifierOptions {
  secret?: string
  jwksUrl?: string
  jwksFile?: string
  issuer?: string
  audience?: string
  /** Longest lifetime accepted: `exp - iat`, or `exp - now` (plus the leeway) when there is no `iat`. */
  maxTtlS: number
  /** Clock, unix milliseconds. */
  now?: () => number
}

const unauthorized = (message: string): OnnxdError => new OnnxdError('unauthorized', message)

export class SessionVerifier {
  private readonly secret: Uint8Array | null
  private readonly jwks: JWTVerifyGetKey | null
  private readonly claims: Pick<JWTVerifyOptions, 'issuer' | 'audience' | 'requiredClaims'>
  private readonly maxTtlS: number
  private readonly now: () => number

  constructor(opts: SessionVerifierOptions) {
    this.maxTtlS = opts.maxTtlS
    this.now = opts.now ?? Date.now
    this.secret = opts.secret !== undefined ? new TextEncoder().encode(opts.secret) : null
    if (opts.jwksUrl !== undefined) this.jwks = createRemoteJWKSet(new URL(opts.jwksUrl))
    else if (opts.jwksFile !== undefined) this.jwks = createLocalJWKSet(readJwks(opts.jwksFile))
    else this.jwks = null
    this.claims = {
      requiredClaims: ['exp', 'sub'],
      ...(opts.issuer !== undefined ? { issuer: opts.issuer } : {}),
      ...(opts.audience !== undefined ? { audience: opts.audience } : {}),
    }
  }

  /** Returns the account id (`sub`) of a valid token; throws 401 otherwise. */
  async verify(token: string): Promise<string> {
    let alg: string | undefined
    try {
      alg = decodeProtectedHeader(token).alg
    } catch {
      throw unauthorized('Invalid session token')
    }
    try {
      const options = { ...this.claims, currentDate: new Date(this.now()) }
      let payload: JWTPayload
      if (alg === 'HS256' && this.secret) {
        payload = (await jwtVerify(token, this.secret, { ...options, algorithms: [...HMAC_ALGORITHMS] })).payload
      } else if ((ASYMMETRIC_ALGORITHMS as readonly string[]).includes(alg ?? '') && this.jwks) {
        payload = (await jwtVerify(token, this.jwks, { ...options, algorithms: [...ASYMMETRIC_ALGORITHMS] })).payload
      } else {
        throw unauthorized(`Session token algorithm '${clip(alg ?? 'none')}' is not accepted`)
      }
      const problem = lifetimeProblem(payload, this.now() / 1000, this.maxTtlS)
      if (problem) throw unauthorized(problem)
      if (!payload.sub) throw unauthorized('Session token has no subject')
      return payload.sub
    } catch (e) {
      if (e instanceof OnnxdError) throw e
      if (e instanceof joseErrors.JWTExpired) throw unauthorized('Session token expired')
      if (e instanceof joseErrors.JWTClaimValidationFailed) throw unauthorized(`Invalid session token: ${e.message}`)
      throw unauthorized('Invalid session token')
    }
  }
}

/** jose has checked that `exp` (required) and `iat` (if present) are numbers and that `exp` has not passed. */
function lifetimeProblem(payload: JWTPayload, nowS: number, maxTtlS: number): string | null {
  const { exp, iat } = payload as { exp: number; iat?: number }
  if (iat !== undefined && iat > nowS + CLOCK_SKEW_S) {
    return `Invalid session token: 'iat' is in the future (more than ${CLOCK_SKEW_S} s ahead)`
  }
  const lifetime = iat !== undefined ? exp - iat : exp - nowS - CLOCK_SKEW_S
  if (!(lifetime <= maxTtlS)) {
    return `Invalid session token: its lifetime ('exp' - ${iat !== undefined ? "'iat'" : 'now'}) exceeds the maximum of ${maxTtlS} s`
  }
  return null
}

function readJwks(file: string): JSONWebKeySet {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as JSONWebKeySet
  } catch (e) {
    throw new OnnxdError('config', `jwksFile (ONNXD_JWKS_FILE): cannot read a JWKS from ${file}: ${(e as Error).message}`)
  }
}

export interface MintOptions {
  secret: string
  accountId: string
  ttlS: number
  issuer?: string
  audience?: string
  nowS?: number
}

/** An HS256 session token for an account: what `onnxd token` prints. */
export async function mintSessionToken(o: MintOptions): Promise<string> {
  const now = o.nowS ?? Math.floor(Date.now() / 1000)
  let jwt = new SignJWT({})
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(o.accountId)
    .setIssuedAt(now)
    .setExpirationTime(now + o.ttlS)
  if (o.issuer !== undefined) jwt = jwt.setIssuer(o.issuer)
  if (o.audience !== undefined) jwt = jwt.setAudience(o.audience)
  return jwt.sign(new TextEncoder().encode(o.secret))
}
