// GET /v1/usage: the usage of the calling API key only. Imports: facade parts.
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { FacadeContext } from '../context.js'
import { ErrorBodySchema } from '../../shared/http-errors.js'
import { keyPrincipal } from '../request.js'
import { UsageQuerystring, UsageReport, usageReport } from './usage-shape.js'

export function usageRoute(app: FastifyInstance, ctx: FacadeContext): void {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/usage',
    { config: { auth: 'key' }, schema: { querystring: UsageQuerystring, response: { 200: UsageReport, '4xx': ErrorBodySchema } } },
    async (request) => {
      const { key, account } = keyPrincipal(request)
      const q = request.query
      const rows = await ctx.store.usage({ keyId: key.id, from: q.start_date, to: q.end_date })
      return usageReport(rows, account.id, key.id, q)
    },
  )
}
