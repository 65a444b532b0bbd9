// Anthropic's Messages API: POST /v1/messages (values 422 → billing 402 → a node → the `message`, JSON or Anthropic's
// SSE events, through the flow every surface shares, ../completion-flow.ts) and POST /v1/messages/count_tokens (the
// prompt's tokens as the model's chat template renders it, counted by a node's tokenize endpoint without running the
// model; not billed). Anthropic's clients send the key as `x-api-key` (auth/authenticate.ts takes it). Errors are the
// spec's error object. Imports: facade parts, shared errors, store ids.
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { ErrorBodySchema } from '../../../shared/http-errors.js'
import { randomBase62 } from '../../../store/ids.js'
import type { FacadeContext } from '../../context.js'
import { keyPrincipal } from '../../request.js'
import { checkModel, runCompletion } from '../completion-flow.js'
import { CountTokensBody, MessageSchema, MessagesBody, parseMessageParams } from './schema.js'
import { MessageEvents, toMessage, toNodeRequest, toolReading } from './translate.js'

const Errors = { '4xx': ErrorBodySchema, '5xx': ErrorBodySchema }

export function messagesRoutes(app: FastifyInstance, ctx: FacadeContext): void {
  const v1 = app.withTypeProvider<TypeBoxTypeProvider>()
  v1.post('/messages', { config: { auth: 'key' }, schema: { body: MessagesBody, response: { 200: MessageSchema, ...Errors } } }, async (request, reply) => {
    const principal = keyPrincipal(request)
    const params = parseMessageParams(request.body as Record<string, unknown>)
    const id = `msg_${randomBase62(24)}`
    const tools = toolReading(params)
    return runCompletion(request, reply, ctx, {
      id,
      model: params.model,
      chat: 'messages',
      principal,
      requests: [toNodeRequest(params)],
      chunks: params.stream === true ? new MessageEvents(id, params.model, tools) : undefined,
      answer: ([r]) => toMessage(id, params.model, r!, tools),
    })
  })

  v1.post(
    '/messages/count_tokens',
    { config: { auth: 'key' }, schema: { body: CountTokensBody, response: { 200: Type.Object({ input_tokens: Type.Integer() }), ...Errors } } },
    async (request, reply) => {
      const principal = keyPrincipal(request)
      const params = parseMessageParams({ ...(request.body as Record<string, unknown>), max_tokens: 1, stream: false }, true)
      checkModel(ctx, params.model, 'messages')
      // The node renders and tokenizes the prompt as it would for the message; nothing is generated or billed.
      const { model, messages, prompt, tools } = toNodeRequest(params)
      const release = ctx.sequences.acquire(principal.key.id, 1)
      const gone = new AbortController()
      const onClose = (): void => {
        if (!reply.raw.writableFinished) gone.abort(new Error('client disconnected'))
      }
      reply.raw.on('close', onClose)
      try {
        return { input_tokens: await ctx.router.countTokens({ model, messages, prompt, tools }, gone.signal) }
      } finally {
        reply.raw.off('close', onClose)
        release()
      }
    },
  )
}
