// OpenAI legacy completion shapes ⇄ the node's internal contract: one node request per prompt (`prompt` text or
// `input_ids`), the `text_completion` answer and its stream chunks. Imports: contract, the shared completion flow
// and field translation.
import type { CompletionRequest, CompletionResponse, FinishReason, Usage } from '../../../contract/completions.js'
import { sseFrame } from '../../../shared/sse.js'
import { openAiUsage, sumUsage, type ChunkFormat } from '../completion-flow.js'
import { samplingFields } from '../openai-fields.js'
import { COMPLETIONS_DEFAULT_MAX_TOKENS, promptsOf, type CompletionParams, type Prompt, type TextCompletion } from './schema.js'

/** One node request per prompt; max_tokens is OpenAI's default for this endpoint when the request gives none. */
export function toNodeRequests(p: CompletionParams): { prompts: Prompt[]; requests: CompletionRequest[] } {
  const sampling = samplingFields(p as Record<string, unknown>)
  if (sampling.max_tokens === undefined) sampling.max_tokens = COMPLETIONS_DEFAULT_MAX_TOKENS
  const prompts = promptsOf(p.prompt)
  const requests = prompts.map((x): CompletionRequest => ({
    model: p.model,
    ...('text' in x ? { prompt: x.text } : { input_ids: x.ids }),
    ...sampling,
    ...(p.stream === true ? { stream: true } : {}),
  }))
  return { prompts, requests }
}

/** The answer: one choice per prompt, numbered as the prompts are; with `echo`, each text starts with its prompt. */
export function toTextCompletion(id: string, created: number, p: CompletionParams, prompts: Prompt[], rs: CompletionResponse[]): TextCompletion {
  const usage = sumUsage(rs.map((r) => r.usage))
  return {
    id,
    object: 'text_completion',
    created,
    model: p.model,
    choices: rs.map((r, index) => {
      const x = prompts[index]!
      return { text: (p.echo === true && 'text' in x ? x.text : '') + r.text, index, logprobs: null, finish_reason: r.finish_reason }
    }),
    usage: openAiUsage(usage),
  }
}

/** The `text_completion` chunks of one stream, as OpenAI sends them. */
export class TextChunkWriter implements ChunkFormat {
  constructor(
    private readonly id: string,
    private readonly created: number,
    private readonly model: string,
    /** With `stream_options.include_usage`, every chunk carries `usage: null` and a last chunk carries usage. */
    private readonly includeUsage: boolean,
    /** Per choice, the prompt to send first (`echo`), or null. */
    private readonly echo: readonly (string | null)[],
  ) {}

  private chunk(choices: unknown[], usage?: Usage): string {
    const c: Record<string, unknown> = { id: this.id, object: 'text_completion', created: this.created, model: this.model, choices }
    if (this.includeUsage) c.usage = usage ? openAiUsage(usage) : null
    return sseFrame(JSON.stringify(c))
  }

  private choice(index: number, text: string, finish: FinishReason | null): unknown {
    return { text, index, logprobs: null, finish_reason: finish }
  }

  start(index: number): string[] {
    const echo = this.echo[index]
    return echo ? [this.chunk([this.choice(index, echo, null)])] : []
  }

  content(index: number, text: string): string {
    return this.chunk([this.choice(index, text, null)])
  }

  finish(index: number, reason: FinishReason): string {
    return this.chunk([this.choice(index, '', reason)])
  }

  usage(u: Usage): string | null {
    return this.includeUsage ? this.chunk([], u) : null
  }
}
