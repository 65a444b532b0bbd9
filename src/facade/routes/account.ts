// The session-token routes: /v1/account/{profile,keys,billing,usage}. Imports: facade parts, store, shared errors.
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { clip, OnnxdError, quote } from '../../shared/errors.js'
import { AccountJson, accountJson, ApiKeyJson, apiKeyJson, createApiKey } from '../accounts.js'
import { formatMoney } from '../billing/money.js'
import type { FacadeContext } from '../context.js'
import { ErrorBodySchema } from '../../shared/http-errors.js'
import { sessionPrincipal } from '../request.js'
import { UsageQuerystring, UsageReport, usageReport } from './usage-shape.js'

const AnyObject = Type.Object({}, { additionalProperties: true })
const Errors = { '4xx': ErrorBodySchema, '5xx': ErrorBodySchema }

const ProfilePatch = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    email: Type.Optional(Type.Union([Type.String({ pattern: '^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$', maxLength: 320 }), Type.Null()])),
  },
  { additionalProperties: false },
)
const NewKey = Type.Object(
  {
    name: Type.Optional(Type.Union([Type.String({ maxLength: 200 }), Type.Null()])),
    rpm_limit: Type.Optional(Type.Union([Type.Integer({ minimum: 0 }), Type.Null()])),
  },
  { additionalProperties: false },
)

/** Checks values against a schema; 422 naming the first bad field, its bound and a short prefix of the value. */
function values<T extends typeof ProfilePatch | typeof NewKey>(schema: T) {
  const c = TypeCompiler.Compile(schema)
  return (v: unknown) => {
    if (c.Check(v)) return v
    const e = c.Errors(v).First()!
    const field = clip(e.path.slice(1)) || '(body)'
    throw new OnnxdError('invalid_value', `Invalid value for '${field}': ${e.message}. Given: ${quote(e.value)}`)
  }
}
const checkProfile = values(ProfilePatch)
const checkNewKey = values(NewKey)

const Billing = Type.Object({
  object: Type.Literal('billing'),
  account_id: Type.String(),
  balance_micros: Type.Integer(),
  balance: Type.String(),
  subscription: Type.Union([Type.Literal('active'), Type.Literal('inactive')]),
  can_spend: Type.Boolean(),
  prices: Type.Record(Type.String(), Type.Object({ prompt: Type.Number(), completion: Type.Number() })),
})

export function accountRoutes(app: FastifyInstance, ctx: FacadeContext): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()
  const config = { auth: 'session' as const }

  api.get('/account/profile', { config, schema: { response: { 200: AccountJson, ...Errors } } }, async (request) =>
    accountJson(sessionPrincipal(request).account),
  )

  api.patch(
    '/account/profile',
    { config, schema: { body: AnyObject, response: { 200: AccountJson, ...Errors } } },
    async (request) => {
      const { account } = sessionPrincipal(request)
      const patch = checkProfile(request.body)
      const updated = await ctx.store.updateProfile(account.id, patch)
      if (!updated) throw new OnnxdError('not_found', `No account '${account.id}'`)
      return accountJson(updated)
    },
  )

  api.get(
    '/account/keys',
    { config, schema: { response: { 200: Type.Object({ object: Type.Literal('list'), data: Type.Array(ApiKeyJson) }), ...Errors } } },
    async (request) => {
      const { account } = sessionPrincipal(request)
      return { object: 'list' as const, data: (await ctx.store.listKeys(account.id)).map((k) => apiKeyJson(k)) }
    },
  )

  api.post(
    '/account/keys',
    {
      config,
      schema: { body: AnyObject, response: { 201: ApiKeyJson, ...Errors } },
      // An empty body is a key with defaults.
      preValidation: async (request) => {
        if (request.body === undefined || request.body === null) request.body = {}
      },
    },
    async (request, reply) => {
      const { account } = sessionPrincipal(request)
      const input = checkNewKey(request.body)
      const created = await createApiKey(ctx.store, account.id, { name: input.name ?? null, rpmLimit: input.rpm_limit ?? null })
      request.log.info({ account: account.id, key: created.id }, 'api key created')
      return reply.code(201).send(created)
    },
  )

  api.delete(
    '/account/keys/:id',
    { config, schema: { params: Type.Object({ id: Type.String() }), response: { 200: ApiKeyJson, ...Errors } } },
    async (request) => {
      const { account } = sessionPrincipal(request)
      const revoked = await ctx.store.revokeKey(account.id, request.params.id)
      if (!revoked) throw new OnnxdError('not_found', `No API key '${clip(request.params.id)}' in this account`)
      request.log.info({ account: account.id, key: revoked.id }, 'api key revoked')
      return apiKeyJson(revoked)
    },
  )

  api.get('/account/billing', { config, schema: { response: { 200: Billing, ...Errors } } }, async (request) => {
    const { account } = sessionPrincipal(request)
    let canSpend = true
    try {
      ctx.meter.checkCanSpend(account)
    } catch {
      canSpend = false
    }
    return {
      object: 'billing' as const,
      account_id: account.id,
      balance_micros: account.balanceMicros,
      balance: formatMoney(account.balanceMicros),
      subscription: account.subscription,
      can_spend: canSpend,
      prices: ctx.meter.prices.table(),
    }
  })

  api.get(
    '/account/usage',
    { config, schema: { querystring: UsageQuerystring, response: { 200: UsageReport, ...Errors } } },
    async (request) => {
      const { account } = sessionPrincipal(request)
      const q = request.query
      const rows = await ctx.store.usage({ accountId: account.id, from: q.start_date, to: q.end_date })
      return usageReport(rows, account.id, null, q)
    },
  )
}
