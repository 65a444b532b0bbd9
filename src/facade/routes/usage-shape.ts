// The usage report shared by GET /v1/usage (one key) and GET /v1/account/usage (all keys of an account).
// Imports: store, billing.
import { Type, type Static } from '@sinclair/typebox'
import type { UsageRow } from '../../store/interfaces.js'
import { formatMoney } from '../billing/money.js'

const Day = Type.String({ pattern: '^\\d{4}-\\d{2}-\\d{2}$', description: 'UTC day, YYYY-MM-DD' })
export const UsageQuerystring = Type.Object({ start_date: Type.Optional(Day), end_date: Type.Optional(Day) })
export type UsageQuerystring = Static<typeof UsageQuerystring>

const Totals = {
  requests: Type.Integer(),
  prompt_tokens: Type.Integer(),
  completion_tokens: Type.Integer(),
  total_tokens: Type.Integer(),
  cost_micros: Type.Integer(),
  /** cost_micros as a decimal string in currency units. */
  cost: Type.String(),
}

export const UsageReport = Type.Object({
  object: Type.Literal('usage'),
  account_id: Type.String(),
  key_id: Type.Union([Type.String(), Type.Null()]),
  start_date: Type.Union([Type.String(), Type.Null()]),
  end_date: Type.Union([Type.String(), Type.Null()]),
  data: Type.Array(Type.Object({ key_id: Type.String(), model: Type.String(), ...Totals })),
  total: Type.Object(Totals),
})
export type UsageReport = Static<typeof UsageReport>

export function usageReport(rows: UsageRow[], accountId: string, keyId: string | null, q: UsageQuerystring): UsageReport {
  const total = { requests: 0, prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, cost_micros: 0, cost: '' }
  const data = rows.map((r) => {
    total.requests += r.requests
    total.prompt_tokens += r.promptTokens
    total.completion_tokens += r.completionTokens
    total.cost_micros += r.costMicros
    return {
      key_id: r.keyId,
      model: r.model,
      requests: r.requests,
      prompt_tokens: r.promptTokens,
      completion_tokens: r.completionTokens,
      total_tokens: r.promptTokens + r.completionTokens,
      cost_micros: r.costMicros,
      cost: formatMoney(r.costMicros),
    }
  })
  total.total_tokens = total.prompt_tokens + total.completion_tokens
  total.cost = formatMoney(total.cost_micros)
  return {
    object: 'usage',
    account_id: accountId,
    key_id: keyId,
    start_date: q.start_date ?? null,
    end_date: q.end_date ?? null,
    data,
    total,
  }
}
