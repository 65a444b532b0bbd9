// Session tokens: JWTs verified with jose against an algorithm allowlist (HS256 with the configured secret,
// RS256/ES256 from a configured JWKS); `exp` and `sub` (the account id) are required. Imports: shared errors.
import { readFileSync } from 'node:fs'
import {
  createLocalJWKSet,
  createRemoteJWKSet,
  decodeProtectedHeader,
  errors as joseErrors,
  jwtVerify,
  SignJWT,
  type JSONWebKeySet,
  type JWTVerifyGetKey,
  type JWTVerifyOptions,
} from 'jose'
import { OnnxdError } from '../../shared/errors.js'

export const HMAC_ALGORITHMS = ['HS256'] as const
export const ASYMMETRIC_ALGORITHMS = ['RS256', 'ES256'] as const

export interface SessionVerifierOptions {
  secret?: string
  jwksUrl?: string
  jwksFile?: string
  issuer?: string
  audience?: string
}

const unauthorized = (message: string): OnnxdError => new OnnxdError('unauthorized', message)

export class SessionVerifier {
  private readonly secret: Uint8Array | null
  private readonly jwks: JWTVerifyGetKey | null
  private readonly claims: Pick<JWTVerifyOptions, 'issuer' | 'audience' | 'requiredClaims'>

  constructor(opts: SessionVerifierOptions) {
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
      let sub: string | undefined
      if (alg === 'HS256' && this.secret) {
        sub = (await jwtVerify(token, this.secret, { ...this.claims, algorithms: [...HMAC_ALGORITHMS] })).payload.sub
      } else if ((ASYMMETRIC_ALGORITHMS as readonly string[]).includes(alg ?? '') && this.jwks) {
        sub = (await jwtVerify(token, this.jwks, { ...this.claims, algorithms: [...ASYMMETRIC_ALGORITHMS] })).payload.sub
      } else {
        throw unauthorized(`Session token algorithm '${alg ?? 'none'}' is not accepted`)
      }
      if (!sub) throw unauthorized('Session token has no subject')
      return sub
    } catch (e) {
      if (e instanceof OnnxdError) throw e
      if (e instanceof joseErrors.JWTExpired) throw unauthorized('Session token expired')
      if (e instanceof joseErrors.JWTClaimValidationFailed) throw unauthorized(`Invalid session token: ${e.message}`)
      throw unauthorized('Invalid session token')
    }
  }
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
