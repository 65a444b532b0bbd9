// POST /v1/chat/completions: values (422) → billing (402) → dispatch to a node → the OpenAI answer, JSON or SSE. The
// shared flow (disconnects, usage, the debit, streams cut short) is ../completion-flow.ts. Imports: facade parts,
// shared errors, store ids.
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { randomBase62 } from '../../../store/ids.js'
import type { FacadeContext } from '../../context.js'
import { ErrorBodySchema } from '../../../shared/http-errors.js'
import { keyPrincipal } from '../../request.js'
import { runCompletion } from '../completion-flow.js'
import { ChatCompletionBody, ChatCompletionSchema, parseChatParams } from './schema.js'
import { ChunkWriter, toChatCompletion, toNodeRequests, toolReading } from './translate.js'

export function chatCompletionsRoute(app: FastifyInstance, ctx: FacadeContext): void {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/chat/completions',
    {
      config: { auth: 'key' },
      schema: { body: ChatCompletionBody, response: { 200: ChatCompletionSchema, '4xx': ErrorBodySchema, '5xx': ErrorBodySchema } },
    },
    async (request, reply) => {
      const principal = keyPrincipal(request)
      const params = parseChatParams(request.body as Record<string, unknown>)
      const id = `chatcmpl-${randomBase62(24)}`
      const created = Math.floor(ctx.now() / 1000)
      const tools = toolReading(params)
      return runCompletion(request, reply, ctx, {
        id,
        model: params.model,
        chat: 'chat completions',
        principal,
        requests: toNodeRequests(params, id),
        choices: params.n ?? 1,
        chunks: params.stream === true ? new ChunkWriter(id, created, params.model, params.stream_options?.include_usage === true, tools) : undefined,
        answer: (rs, usage) => toChatCompletion(id, created, params.model, rs, usage, tools),
      })
    },
  )
}
