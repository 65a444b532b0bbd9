// The HS256 session-token secret when none is configured: generated once and kept in the data directory, so that
// `onnxd token` and the running facade agree. Imports: shared errors.
import { randomBytes } from 'node:crypto'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { OnnxdError } from '../../shared/errors.js'

export const JWT_SECRET_FILE = 'jwt-secret'

function readSecret(file: string): string {
  const secret = readFileSync(file, 'utf8').trim()
  if (secret.length < 32) {
    throw new OnnxdError('config', `${file} holds a JWT secret shorter than 32 characters: delete it to generate a new one, or set ONNXD_JWT_SECRET`)
  }
  return secret
}

export function resolveJwtSecret(dataDir: string, configured: string | undefined): string {
  if (configured !== undefined) return configured
  const file = join(dataDir, JWT_SECRET_FILE)
  try {
    return readSecret(file)
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e
  }
  mkdirSync(dataDir, { recursive: true })
  const secret = randomBytes(48).toString('base64url')
  try {
    writeFileSync(file, `${secret}\n`, { flag: 'wx', mode: 0o600 })
    return secret
  } catch (e) {
    // Another process wrote it first: use theirs.
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return readSecret(file)
    throw e
  }
}
