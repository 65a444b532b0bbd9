// Who is calling: the `Authorization: Bearer` credential (or Anthropic's `x-api-key`) turned into a principal, or a
// 401. API keys open the inference routes, session tokens the account routes, never the other way round. Imports:
// store, shared errors.
import type { IncomingHttpHeaders } from 'node:http'
import type { Account, ApiKey, Store } from '../../store/interfaces.js'
import { OnnxdError } from '../../shared/errors.js'
import { API_KEY_PREFIX, hashApiKey, hashesEqual, isApiKeyFormat } from './api-keys.js'
import type { SessionVerifier } from './jwt.js'

/** Which credential a route takes. */
export type RouteAuth = 'key' | 'session'

export type Principal = { kind: 'key'; key: ApiKey; account: Account } | { kind: 'session'; account: Account }

const INVALID_KEY = 'Invalid API key'
const unauthorized = (message: string): OnnxdError => new OnnxdError('unauthorized', message)

/** The credential of an `Authorization` header value, or a 401 saying what is wrong with it. */
export function bearerCredential(header: string | undefined): string {
  if (header === undefined || header.trim() === '') {
    throw unauthorized('Missing Authorization header; send `Authorization: Bearer <credential>`')
  }
  const space = header.indexOf(' ')
  const scheme = space < 0 ? header : header.slice(0, space)
  if (scheme.toLowerCase() !== 'bearer') {
    throw unauthorized('The Authorization header must use the Bearer scheme: `Authorization: Bearer <credential>`')
  }
  const credential = space < 0 ? '' : header.slice(space + 1).trim()
  if (credential === '' || /\s/.test(credential)) {
    throw unauthorized('Malformed Authorization header: expected `Bearer <credential>`')
  }
  return credential
}

/**
 * The credential header of a request: `Authorization`, or else Anthropic's `x-api-key` (its clients send the key
 * there, with `anthropic-version`), read as `Bearer <key>`: the same sk-svc- keys either way.
 */
export function credentialHeader(headers: IncomingHttpHeaders): string | undefined {
  if (headers.authorization !== undefined) return headers.authorization
  const key = headers['x-api-key']
  return typeof key === 'string' && key.trim() !== '' ? `Bearer ${key.trim()}` : undefined
}

const looksLikeJwt = (c: string): boolean => c.split('.').length === 3

export class Authenticator {
  constructor(
    private readonly store: Store,
    private readonly sessions: SessionVerifier,
  ) {}

  /**
   * The principal of an Authorization header, or a 401. `beforeLookup` gets a well-formed API key's hash as the
   * lookup starts (synchronously, within this call), so that a caller can start work that overlaps it.
   */
  async authenticate(header: string | undefined, want: RouteAuth, beforeLookup?: (hash: Buffer) => void): Promise<Principal> {
    const credential = bearerCredential(header)
    if (credential.startsWith(API_KEY_PREFIX)) {
      if (want === 'session') {
        throw unauthorized('API keys are not accepted for account management; use a session token')
      }
      return this.apiKey(credential, beforeLookup)
    }
    if (want === 'key') {
      if (looksLikeJwt(credential)) {
        throw unauthorized('Session tokens are not accepted for inference; use an API key (sk-svc-…)')
      }
      throw unauthorized(INVALID_KEY)
    }
    const accountId = await this.sessions.verify(credential)
    const account = await this.store.getAccount(accountId)
    if (!account) throw unauthorized('Invalid session token: unknown account')
    return { kind: 'session', account }
  }

  private async apiKey(secret: string, beforeLookup?: (hash: Buffer) => void): Promise<Principal> {
    if (!isApiKeyFormat(secret)) throw unauthorized(INVALID_KEY)
    const hash = hashApiKey(secret)
    beforeLookup?.(hash)
    const found = await this.store.findKeyByHash(hash)
    if (!found || !hashesEqual(found.hash, hash) || found.key.revokedAt !== null) throw unauthorized(INVALID_KEY)
    return { kind: 'key', key: found.key, account: found.account }
  }
}
