// Money as integer micro-units (1 unit = 1_000_000 micros), so that sums of many debits are exact.
// Imports: shared errors.
import { OnnxdError } from '../../shared/errors.js'

export const MICROS_PER_UNIT = 1_000_000

/** `"10"`, `"0.25"`, `"-3.000001"` → micros, exactly (no float arithmetic); at most 6 decimals. */
export function parseMoney(text: string): number {
  const m = /^(-)?(\d+)(?:\.(\d{1,6}))?$/.exec(text.trim())
  if (!m) throw new OnnxdError('invalid_value', `amount must be a decimal number with at most 6 decimals. Given: ${text}`)
  const micros = Number(m[2]) * MICROS_PER_UNIT + Number((m[3] ?? '').padEnd(6, '0'))
  if (!Number.isSafeInteger(micros)) throw new OnnxdError('invalid_value', `amount is too large. Given: ${text}`)
  return m[1] ? -micros : micros
}

/** micros → `"10.250000"`. */
export function formatMoney(micros: number): string {
  const sign = micros < 0 ? '-' : ''
  const abs = Math.abs(micros)
  return `${sign}${Math.floor(abs / MICROS_PER_UNIT)}.${String(abs % MICROS_PER_UNIT).padStart(6, '0')}`
}
