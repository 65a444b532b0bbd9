// OpenAI legacy completion shapes ⇄ the node's internal contract: one node request per prompt (`prompt` text or
// `input_ids`), the `text_completion` answer and its stream chunks. Imports: contract, the shared completion flow
// and field translation.
import type { CompletionRequest, CompletionResponse, FinishReason, TokenLogprob, Usage } from '../../../contract/completions.js'
import { SSE_DONE, sseFrame } from '../../../shared/sse.js'
import type { ErrorCode } from '../../../shared/errors.js'
import { openAiUsage, type StreamFormat, openAiStreamFailed } from '../completion-flow.js'
import { samplingFields, withChoices } from '../openai-fields.js'
import { COMPLETIONS_DEFAULT_MAX_TOKENS, promptsOf, type CompletionParams, type LegacyLogprobs, type Prompt, type TextCompletion } from './schema.js'

/** The legacy shape of `lp`, its offsets counted from `offset` characters into the choice's text. */
export function legacyLogprobs(lp: readonly TokenLogprob[] | undefined, offset = 0): LegacyLogprobs {
  if (!lp) return null
  const out: NonNullable<LegacyLogprobs> = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] }
  for (const t of lp) {
    out.tokens.push(t.token)
    out.token_logprobs.push(t.logprob)
    out.top_logprobs.push(Object.fromEntries(t.top_logprobs.map((x) => [x.token, x.logprob])))
    out.text_offset.push(offset)
    offset += t.token.length
  }
  return out
}

/**
 * One node request per choice: `n` per prompt, prompt i's choice j at i * n + j, as OpenAI numbers them (`prompts`
 * is each choice's prompt); max_tokens is OpenAI's default for this endpoint when the request gives none.
 */
export function toNodeRequests(p: CompletionParams): { prompts: Prompt[]; requests: CompletionRequest[] } {
  const sampling = samplingFields(p as Record<string, unknown>)
  if (sampling.max_tokens === undefined) sampling.max_tokens = COMPLETIONS_DEFAULT_MAX_TOKENS
  // `logprobs: k` here is chat's logprobs: true with top_logprobs: k.
  delete sampling.logprobs
  if (p.logprobs !== undefined) Object.assign(sampling, { logprobs: true, top_logprobs: p.logprobs })
  const n = p.n ?? 1
  const given = promptsOf(p.prompt)
  const requests = withChoices(
    given.map((x): CompletionRequest => ({
      model: p.model,
      ...('text' in x ? { prompt: x.text } : { input_ids: x.ids }),
      ...sampling,
      ...(p.stream === true ? { stream: true } : {}),
    })),
    n,
  )
  return { prompts: given.flatMap((x) => Array<Prompt>(n).fill(x)), requests }
}

/** The answer: one choice per node answer, numbered as they are; with `echo`, each text starts with its prompt. */
export function toTextCompletion(id: string, created: number, p: CompletionParams, prompts: Prompt[], rs: CompletionResponse[], usage: Usage): TextCompletion {
  return {
    id,
    object: 'text_completion',
    created,
    model: p.model,
    choices: rs.map((r, index) => {
      const x = prompts[index]!
      return { text: (p.echo === true && 'text' in x ? x.text : '') + r.text, index, logprobs: legacyLogprobs(r.logprobs), finish_reason: r.finish_reason }
    }),
    usage: openAiUsage(usage),
  }
}

/** The `text_completion` chunks of one stream, as OpenAI sends them. */
export class TextChunkWriter implements StreamFormat {
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

  /** Per choice, the characters of text its logprobs' offsets have counted so far. */
  private readonly offsets = new Map<number, number>()

  private choice(index: number, text: string, finish: FinishReason | null, lp?: TokenLogprob[]): unknown {
    const at = this.offsets.get(index) ?? 0
    const logprobs = legacyLogprobs(lp, at)
    if (logprobs) this.offsets.set(index, at + lp!.reduce((n, t) => n + t.token.length, 0))
    return { text, index, logprobs, finish_reason: finish }
  }

  start(index: number): string[] {
    const echo = this.echo[index]
    return echo ? [this.chunk([this.choice(index, echo, null)])] : []
  }

  content(index: number, text: string, logprobs?: TokenLogprob[]): string {
    return this.chunk([this.choice(index, text, null, logprobs)])
  }

  finish(index: number, reason: FinishReason): string {
    return this.chunk([this.choice(index, '', reason)])
  }

  /** With `stream_options.include_usage`, the usage chunk; then `[DONE]`. */
  end(u: Usage): string {
    return (this.includeUsage ? this.chunk([], u) : '') + SSE_DONE
  }

  failed(code: ErrorCode, message: string): string {
    return openAiStreamFailed(code, message)
  }
}
