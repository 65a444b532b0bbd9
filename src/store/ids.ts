// Random identifiers: unbiased base62 strings from crypto.randomBytes. Imports: nothing internal.
import { randomFillSync } from 'node:crypto'

const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

// Random bytes are drawn in blocks: one randomFillSync per 4 KiB instead of one call per id (ids are made per
// request). The bytes are the same CSPRNG output either way.
const pool = Buffer.alloc(4096)
let offset = pool.length

function randomByte(): number {
  if (offset === pool.length) {
    randomFillSync(pool)
    offset = 0
  }
  return pool[offset++]!
}

/** `length` base62 characters, each carrying log2(62) ≈ 5.95 bits; bytes ≥ 248 are rejected to avoid modulo bias. */
export function randomBase62(length: number): string {
  let out = ''
  while (out.length < length) {
    const b = randomByte()
    if (b < 248) out += ALPHABET[b % 62]
  }
  return out
}

export const newAccountId = (): string => `acct_${randomBase62(20)}`
export const newKeyId = (): string => `key_${randomBase62(20)}`
