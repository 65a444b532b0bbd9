// OpenAI's Responses API: POST /v1/responses (values 422 → the previous response, 404 → billing 402 → a node → the
// `response`, JSON or typed SSE events, through the flow every surface shares, ../completion-flow.ts), and the kept
// responses: GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items, each of the caller's account
// only (404 otherwise). A response is kept (store, default true) before the client hears it is complete. Imports:
// facade parts, shared errors, store (ids, interfaces).
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { clip, OnnxdError } from '../../../shared/errors.js'
import { ErrorBodySchema } from '../../../shared/http-errors.js'
import { randomBase62 } from '../../../store/ids.js'
import type { StoredResponse } from '../../../store/interfaces.js'
import type { FacadeContext } from '../../context.js'
import { keyPrincipal } from '../../request.js'
import { runCompletion } from '../completion-flow.js'
import { ResponsesBody, parseResponseParams, RESPONSE_ID, type ResponseObject } from './schema.js'
import { itemOrigin, keptItems, referencedIds, ResponseEvents, responseShell, toMessages, toNodeRequest, toolReading, toResponse, type KeptItem } from './translate.js'

// The answers are built here (no 200 schema: the response object keeps its optional fields as they are).
const Errors = { 200: Type.Unknown(), '4xx': ErrorBodySchema, '5xx': ErrorBodySchema }
const IdParams = Type.Object({ id: Type.String() })
/** Querystring values arrive as text: `limit` is checked as digits, then as a number. */
const InputItemsQuery = Type.Object(
  {
    limit: Type.Optional(Type.String({ pattern: '^[0-9]{1,3}$' })),
    order: Type.Optional(Type.Union([Type.Literal('asc'), Type.Literal('desc')])),
    after: Type.Optional(Type.String()),
    before: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
)

const notFound = (id: string, what = 'Response'): OnnxdError => new OnnxdError('not_found', `${what} with id '${clip(id)}' not found`)

/** The caller's kept response `id`, or a 404 (another account's is not found either). */
async function kept(ctx: FacadeContext, accountId: string, id: string, what?: string): Promise<StoredResponse> {
  const r = new RegExp(RESPONSE_ID).test(id) ? await ctx.store.getResponse(accountId, id) : null
  if (!r) throw notFound(id, what)
  return r
}

/** The caller's earlier output items that `ids` name (item_reference), each found in its kept response; else a 404. */
async function referencedItems(ctx: FacadeContext, accountId: string, ids: readonly string[]): Promise<Map<string, KeptItem>> {
  const out = new Map<string, KeptItem>()
  const responses = new Map<string, ResponseObject | null>()
  for (const itemId of ids) {
    const origin = itemOrigin(itemId)
    let response: ResponseObject | null = null
    if (origin) {
      if (!responses.has(origin.responseId)) {
        const kept = await ctx.store.getResponse(accountId, origin.responseId)
        responses.set(origin.responseId, kept ? (JSON.parse(kept.response) as ResponseObject) : null)
      }
      response = responses.get(origin.responseId) ?? null
    }
    const item = response?.output[origin!.index]
    if (!item || item.id !== itemId) throw notFound(itemId, 'Item')
    out.set(itemId, item)
  }
  return out
}

export function responsesRoutes(app: FastifyInstance, ctx: FacadeContext): void {
  const v1 = app.withTypeProvider<TypeBoxTypeProvider>()
  v1.post('/responses', { config: { auth: 'key' }, schema: { body: ResponsesBody, response: Errors } }, async (request, reply) => {
    const principal = keyPrincipal(request)
    const params = parseResponseParams(request.body as Record<string, unknown>)
    const prior: KeptItem[] = params.previous_response_id
      ? (JSON.parse((await kept(ctx, principal.account.id, params.previous_response_id, 'Previous response')).conversation) as KeptItem[])
      : []
    const input = keptItems(params.input, await referencedItems(ctx, principal.account.id, referencedIds(params.input)))
    const id = `resp_${randomBase62(24)}`
    const createdAt = Math.floor(ctx.now() / 1000)
    const shell = responseShell(id, createdAt, params)
    const tools = toolReading(params)
    const keep = async (r: ResponseObject): Promise<void> => {
      if (!shell.store) return
      try {
        await ctx.store.saveResponse({
          id,
          accountId: principal.account.id,
          createdAt,
          response: JSON.stringify(r),
          inputItems: JSON.stringify(input),
          conversation: JSON.stringify([...prior, ...input, ...r.output]),
        })
      } catch (err) {
        // The answer still reaches its client (it is billed); only GET and previous_response_id will not find it.
        request.log.error({ id, err }, 'could not keep a response')
      }
    }
    return runCompletion(request, reply, ctx, {
      id,
      model: params.model,
      chat: 'responses',
      principal,
      requests: [toNodeRequest(params, toMessages(params.instructions, [...prior, ...input]))],
      chunks: params.stream === true ? new ResponseEvents(shell, tools, keep) : undefined,
      answer: async ([r]) => {
        const response = toResponse(shell, r!, tools)
        await keep(response)
        return response
      },
    })
  })

  v1.get('/responses/:id', { config: { auth: 'key' }, schema: { params: IdParams, response: Errors } }, async (request) => {
    const r = await kept(ctx, keyPrincipal(request).account.id, request.params.id)
    return JSON.parse(r.response) as ResponseObject
  })

  v1.delete('/responses/:id', { config: { auth: 'key' }, schema: { params: IdParams, response: Errors } }, async (request) => {
    const { id } = request.params
    const gone = new RegExp(RESPONSE_ID).test(id) && (await ctx.store.deleteResponse(keyPrincipal(request).account.id, id))
    if (!gone) throw notFound(id)
    return { id, object: 'response.deleted', deleted: true }
  })

  v1.get(
    '/responses/:id/input_items',
    { config: { auth: 'key' }, schema: { params: IdParams, querystring: InputItemsQuery, response: Errors } },
    async (request) => {
      const q = request.query
      const limit = q.limit === undefined ? 20 : Number(q.limit)
      if (limit < 1 || limit > 100) throw new OnnxdError('invalid_value', `Invalid value for 'limit': must be between 1 and 100. Given: ${limit}`)
      const r = await kept(ctx, keyPrincipal(request).account.id, request.params.id)
      // OpenAI's default order is the newest first.
      let items = JSON.parse(r.inputItems) as KeptItem[]
      if (q.order !== 'asc') items = items.reverse()
      const cut = (id: string | undefined, name: string): number => {
        if (id === undefined) return -1
        const i = items.findIndex((x) => x.id === id)
        if (i < 0) throw new OnnxdError('invalid_value', `Invalid value for '${name}': no input item '${clip(id)}' in this response`)
        return i
      }
      const after = cut(q.after, 'after')
      const before = cut(q.before, 'before')
      const window = items.slice(after + 1, before < 0 ? items.length : before)
      const data = window.slice(0, limit)
      return { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: window.length > data.length }
    },
  )
}
