// API key secrets: generation, hashing, format check, constant-time comparison. Imports: store ids.
import { createHash, timingSafeEqual } from 'node:crypto'
import { randomBase62 } from '../../store/ids.js'

export const API_KEY_PREFIX = 'sk-svc-'
/** 32 base62 characters ≈ 190 bits: far above the spec's minimum of 22 characters. */
export const API_KEY_RANDOM_CHARS = 32

const FORMAT = /^sk-svc-[A-Za-z0-9_-]{22,200}$/

export interface NewSecret {
  secret: string
  hash: Buffer
  redacted: string
}

export function generateApiKey(): NewSecret {
  const secret = API_KEY_PREFIX + randomBase62(API_KEY_RANDOM_CHARS)
  return { secret, hash: hashApiKey(secret), redacted: redactApiKey(secret) }
}

/** sha256 suffices for high-entropy secrets: there is nothing to brute-force, so no slow KDF is needed. */
export function hashApiKey(secret: string): Buffer {
  return createHash('sha256').update(secret).digest()
}

export const isApiKeyFormat = (credential: string): boolean => FORMAT.test(credential)

export function redactApiKey(secret: string): string {
  return `${secret.slice(0, API_KEY_PREFIX.length + 4)}…${secret.slice(-4)}`
}

export function hashesEqual(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b)
}
