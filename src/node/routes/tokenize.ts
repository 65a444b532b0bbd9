// POST /internal/v1/tokenize: a prompt's token count, rendered (messages through the chat template, with tools) and
// tokenized on the pool's tokenizer threads exactly as a completion of it would be; no sequence, no step on the
// model. A draining node refuses it (503) as it refuses completions, and its drain waits for the counts under way.
// Imports: contract, engine types, shared errors and HTTP errors, node internals.
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { TOKENIZE_PATH, TokenizeRequest, TokenizeResponse } from '../../contract/tokenize.js'
import type { EngineClient } from '../../engine/index.js'
import type { OnnxdError } from '../../shared/errors.js'
import { ErrorBodySchema } from '../../shared/http-errors.js'
import type { AdmissionState } from '../admission.js'
import { checkPromptFields, checkServedModel, refuseWhileDraining } from './completions.js'

export function registerTokenizeRoute(app: FastifyInstance, deps: { engine: EngineClient; state: AdmissionState }): void {
  const { engine, state } = deps
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    TOKENIZE_PATH,
    {
      schema: { body: TokenizeRequest, response: { 200: TokenizeResponse, '4xx': ErrorBodySchema, '5xx': ErrorBodySchema } },
      onRequest: async () => refuseWhileDraining(state),
    },
    async (request) => {
      const { model, messages, prompt, tools } = request.body
      refuseWhileDraining(state)
      checkPromptFields(request.body) // 400s, as for a completion
      checkServedModel(engine, model)
      // A drain that runs out of time ends the count with its 503.
      let abort!: (e: OnnxdError) => void
      const aborted = new Promise<never>((_, reject) => (abort = reject))
      const release = state.track((e) => abort(e))
      try {
        const n = await Promise.race([engine.countTokens({ messages, prompt, tools }), aborted])
        request.log.info({ messages: messages?.length, prompt_chars: prompt?.length, prompt_tokens: n }, 'prompt counted')
        return { model, prompt_tokens: n }
      } finally {
        release()
      }
    },
  )
}
