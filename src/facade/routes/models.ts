// GET /v1/models and /v1/models/{id}: the models of ready nodes, in OpenAI's list shape, each with the endpoints
// that serve it (`endpoints`: "completions", and "chat.completions", "responses" and "messages" unless its bundle
// has no chat template).
// Imports: facade parts.
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { Type, type Static } from '@sinclair/typebox'
import { clip, OnnxdError } from '../../shared/errors.js'
import type { FacadeContext } from '../context.js'
import { ErrorBodySchema } from '../../shared/http-errors.js'

/** The endpoints of /v1 a model can serve, named as OpenAI names the resources. */
export type ModelEndpoint = 'chat.completions' | 'completions' | 'responses' | 'messages'

const Model = Type.Object({
  id: Type.String(),
  object: Type.Literal('model'),
  created: Type.Integer(),
  owned_by: Type.String(),
  endpoints: Type.Array(Type.Union([Type.Literal('chat.completions'), Type.Literal('completions'), Type.Literal('responses'), Type.Literal('messages')])),
})
type Model = Static<typeof Model>
const ModelList = Type.Object({ object: Type.Literal('list'), data: Type.Array(Model) })

export function modelsRoutes(app: FastifyInstance, ctx: FacadeContext): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>()
  const list = (): Model[] =>
    ctx.router.readyModels().map((m) => ({
      id: m.id,
      object: 'model' as const,
      created: m.created,
      owned_by: 'onnxd',
      endpoints: m.chat ? ['chat.completions', 'completions', 'responses', 'messages'] : ['completions'],
    }))

  api.get(
    '/models',
    { config: { auth: 'key' }, schema: { response: { 200: ModelList, '4xx': ErrorBodySchema } } },
    async () => ({ object: 'list' as const, data: list() }),
  )

  api.get(
    '/models/:id',
    {
      config: { auth: 'key' },
      schema: { params: Type.Object({ id: Type.String() }), response: { 200: Model, '4xx': ErrorBodySchema } },
    },
    async (request) => {
      const m = list().find((x) => x.id === request.params.id)
      if (!m) throw new OnnxdError('not_found', `The model '${clip(request.params.id)}' does not exist`)
      return m
    },
  )
}
