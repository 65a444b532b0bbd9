// Account and key operations shared by the account routes and the operator CLI, and their JSON shapes.
// Imports: store, auth, billing, shared errors.
import { Type, type Static } from '@sinclair/typebox'
import type { Account, ApiKey, Store } from '../store/interfaces.js'
import { clip, OnnxdError } from '../shared/errors.js'
import { generateApiKey } from './auth/api-keys.js'
import { formatMoney } from './billing/money.js'

export const ApiKeyJson = Type.Object({
  id: Type.String(),
  object: Type.Literal('api_key'),
  account_id: Type.String(),
  name: Type.Union([Type.String(), Type.Null()]),
  /** Display form of the secret; the secret itself is shown once, at creation, in `key`. */
  redacted_key: Type.String(),
  rpm_limit: Type.Union([Type.Integer(), Type.Null()]),
  status: Type.Union([Type.Literal('active'), Type.Literal('revoked')]),
  created_at: Type.Integer(),
  last_used_at: Type.Union([Type.Integer(), Type.Null()]),
  revoked_at: Type.Union([Type.Integer(), Type.Null()]),
  key: Type.Optional(Type.String()),
})
export type ApiKeyJson = Static<typeof ApiKeyJson>

export const AccountJson = Type.Object({
  id: Type.String(),
  object: Type.Literal('account'),
  name: Type.String(),
  email: Type.Union([Type.String(), Type.Null()]),
  balance_micros: Type.Integer(),
  balance: Type.String(),
  subscription: Type.Union([Type.Literal('active'), Type.Literal('inactive')]),
  created_at: Type.Integer(),
})
export type AccountJson = Static<typeof AccountJson>

export function apiKeyJson(k: ApiKey, secret?: string): ApiKeyJson {
  return {
    id: k.id,
    object: 'api_key',
    account_id: k.accountId,
    name: k.name,
    redacted_key: k.redacted,
    rpm_limit: k.rpmLimit,
    status: k.revokedAt === null ? 'active' : 'revoked',
    created_at: k.createdAt,
    last_used_at: k.lastUsedAt,
    revoked_at: k.revokedAt,
    ...(secret !== undefined ? { key: secret } : {}),
  }
}

export function accountJson(a: Account): AccountJson {
  return {
    id: a.id,
    object: 'account',
    name: a.name,
    email: a.email,
    balance_micros: a.balanceMicros,
    balance: formatMoney(a.balanceMicros),
    subscription: a.subscription,
    created_at: a.createdAt,
  }
}

export interface NewKeyInput {
  name?: string | null
  rpmLimit?: number | null
}

/** Creates a key; the returned JSON is the only place its secret ever appears (in `key`). */
export async function createApiKey(store: Store, accountId: string, input: NewKeyInput = {}): Promise<ApiKeyJson> {
  if (input.rpmLimit != null && (!Number.isSafeInteger(input.rpmLimit) || input.rpmLimit < 0)) {
    throw new OnnxdError('invalid_value', `rpm_limit must be an integer >= 0 (0 = unlimited). Given: ${input.rpmLimit}`)
  }
  if (!(await store.getAccount(accountId))) throw new OnnxdError('not_found', `No account '${clip(accountId)}'`)
  const s = generateApiKey()
  const key = await store.createKey({ accountId, name: input.name ?? null, rpmLimit: input.rpmLimit ?? null, hash: s.hash, redacted: s.redacted })
  return apiKeyJson(key, s.secret)
}
