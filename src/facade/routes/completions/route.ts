// POST /v1/completions (OpenAI's legacy completions): raw-text prompts, so base models without a chat template are
// usable. Values (422) → billing (402) → dispatch to a node → `text_completion`, JSON or SSE, through the flow chat
// uses (../completion-flow.ts): the same auth, limits, billing, usage and errors. Imports: facade parts, shared
// errors, store ids.
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { randomBase62 } from '../../../store/ids.js'
import type { FacadeContext } from '../../context.js'
import { ErrorBodySchema } from '../../../shared/http-errors.js'
import { keyPrincipal } from '../../request.js'
import { runCompletion } from '../completion-flow.js'
import { CompletionBody, parseCompletionParams, TextCompletionSchema } from './schema.js'
import { TextChunkWriter, toNodeRequests, toTextCompletion } from './translate.js'

export function completionsRoute(app: FastifyInstance, ctx: FacadeContext): void {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/completions',
    {
      config: { auth: 'key' },
      schema: { body: CompletionBody, response: { 200: TextCompletionSchema, '4xx': ErrorBodySchema, '5xx': ErrorBodySchema } },
    },
    async (request, reply) => {
      const principal = keyPrincipal(request)
      const params = parseCompletionParams(request.body as Record<string, unknown>)
      const { prompts, requests } = toNodeRequests(params)
      const id = `cmpl-${randomBase62(24)}`
      const created = Math.floor(ctx.now() / 1000)
      const echo = prompts.map((x) => (params.echo === true && 'text' in x ? x.text : null))
      return runCompletion(request, reply, ctx, {
        id,
        model: params.model,
        principal,
        requests,
        choices: params.n ?? 1,
        chunks:
          params.stream === true
            ? new TextChunkWriter(id, created, params.model, params.stream_options?.include_usage === true, echo)
            : undefined,
        answer: (rs, usage) => toTextCompletion(id, created, params, prompts, rs, usage),
      })
    },
  )
}
