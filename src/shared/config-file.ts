// onnxd.config.json: one file with a section per process kind ("node", "facade"). Imports: shared errors.
import { existsSync, readFileSync } from 'node:fs'
import { OnnxdError } from './errors.js'

export const CONFIG_FILE = 'onnxd.config.json'

/** pino's log levels, the `logLevel` option of every process kind. */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const

/** One section of the config file: `path` if given (must exist), else ./onnxd.config.json if present. */
export function readConfigSection(section: string, path?: string): Record<string, unknown> {
  const file = path ?? (existsSync(CONFIG_FILE) ? CONFIG_FILE : undefined)
  if (file === undefined) return {}
  let parsed: unknown
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'))
  } catch (e) {
    throw new OnnxdError('config', `cannot read ${file}: ${(e as Error).message}`)
  }
  const value = (parsed as Record<string, unknown> | null)?.[section]
  if (value === undefined) return {}
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new OnnxdError('config', `${file}: "${section}" must be an object`)
  }
  return value as Record<string, unknown>
}
