// Engine: one engine replica in the current thread, a loaded model and its batcher. Turns engine requests into
// sequences (tokenize, chat template, model and sampling validation) and streams their events to a sink. Each
// worker thread of EnginePool (pool/pool.ts) runs one; `onnxd generate` and the benchmarks use it directly. Other
// layers that serve requests hold EngineClient (index.ts), not this. Imports: engine, shared.
import { randomUUID } from 'node:crypto'
import { OnnxdError, toErrorData } from '../shared/errors.js'
import { loadModel, type LoadedModel, type LoadOptions } from './model/load.js'
import { Batcher, type BatcherObserver, type BatcherOptions } from './scheduler/batcher.js'
import { Sequence, type SeqSink } from './scheduler/sequence.js'
import { validateSampling } from './generation/params.js'
import { SamplerScratch } from './generation/sampling.js'
import { DEFAULT_GRAMMAR_LIMITS, Grammars, type GrammarLimits } from './generation/grammar.js'
import { requiredTools, toolConstraint } from '../shared/tools.js'
import type { StructuredOutput } from '../shared/sampling.js'
import { checkOnePrompt } from '../shared/prompt-input.js'
import { checkModel } from '../shared/model.js'
import { encodeTextPrompt } from './tokenizer/prompt.js'
import type { EngineRequest, EngineStats } from './types.js'

export interface EngineOptions extends LoadOptions, Partial<BatcherOptions> {
  modelDir: string
  /** Structured outputs' grammar thread: compile time limit, heap bound, cache (grammar.ts; defaults there). */
  grammar?: Partial<GrammarLimits>
}

export const DEFAULT_BATCHER: BatcherOptions = {
  maxRunning: 64,
  maxWaiting: 256,
  maxBatchedTokens: 512,
  kvBudgetBytes: 2 * 1024 ** 3,
  prefixCaching: true,
  speculativeTokens: 0,
  speculativeMaxRows: 4,
}

/** The batcher limits of `opts`, defaults filled in. */
export function batcherOptions(opts: Partial<BatcherOptions>): BatcherOptions {
  return {
    maxRunning: opts.maxRunning ?? DEFAULT_BATCHER.maxRunning,
    maxWaiting: opts.maxWaiting ?? DEFAULT_BATCHER.maxWaiting,
    maxBatchedTokens: opts.maxBatchedTokens ?? DEFAULT_BATCHER.maxBatchedTokens,
    kvBudgetBytes: opts.kvBudgetBytes ?? DEFAULT_BATCHER.kvBudgetBytes,
    prefixCaching: opts.prefixCaching ?? DEFAULT_BATCHER.prefixCaching,
    speculativeTokens: opts.speculativeTokens ?? DEFAULT_BATCHER.speculativeTokens,
    speculativeMaxRows: opts.speculativeMaxRows ?? DEFAULT_BATCHER.speculativeMaxRows,
  }
}

/**
 * A request's tools as a grammar (toolConstraint): one call for a required or named tool_choice, free text whose
 * calls are held to the parameters for strict tools under auto. Null when nothing constrains the output.
 */
function toolCallFormat(req: EngineRequest): StructuredOutput | null {
  const tools = requiredTools(req.tools, req.tool_choice)
  if (req.tool_choice !== undefined && typeof req.tool_choice === 'object' && tools.length === 0) {
    throw new OnnxdError('invalid_value', `\`tool_choice\` names the function '${req.tool_choice.function.name.slice(0, 64)}', which is not in \`tools\``, { param: 'tool_choice' })
  }
  if (req.tool_choice === 'required' && !req.tools?.length) throw new OnnxdError('invalid_value', '`tool_choice` required needs `tools`', { param: 'tool_choice' })
  const c = toolConstraint(req.tools, req.tool_choice)
  if (!c) return null
  if (req.response_format && req.response_format.type !== 'text') throw new OnnxdError('invalid_value', '`response_format` cannot be combined with constrained tool calls', { param: 'response_format' })
  return { type: 'tool_call', ...c }
}

export class Engine {
  /** Sampling scratch memory, shared by every sequence of this engine (they sample one at a time). */
  private readonly scratch: SamplerScratch
  /** The model's JSON grammars (response_format), made on the first request that asks for one. */
  private grammars: Grammars | null = null

  private constructor(
    readonly model: LoadedModel,
    private readonly batcher: Batcher,
    private readonly limits: BatcherOptions,
    private readonly grammarLimits: GrammarLimits,
  ) {
    this.scratch = new SamplerScratch(model.vocab)
  }

  static async load(opts: EngineOptions, observer?: BatcherObserver): Promise<Engine> {
    return Engine.over(await loadModel(opts.modelDir, opts), opts, observer)
  }

  /** An engine over a model already loaded (or a stand-in for one: the scheduler's tests step a fake runtime). */
  static over(model: LoadedModel, opts: Partial<BatcherOptions> & { grammar?: Partial<GrammarLimits> } = {}, observer?: BatcherObserver): Engine {
    const limits = batcherOptions(opts)
    return new Engine(model, new Batcher(model, limits, observer), limits, { ...DEFAULT_GRAMMAR_LIMITS, ...opts.grammar })
  }

  /** Prompt token ids of a request: exactly one of messages, prompt or input_ids. */
  promptIds(req: EngineRequest): number[] {
    checkOnePrompt(req)
    if (!req.input_ids) return encodeTextPrompt(this.model.tokenizer, this.model.id, req)
    const bad = req.input_ids.find((t) => !Number.isInteger(t) || t < 0 || t >= this.model.vocab)
    if (bad !== undefined) throw new OnnxdError('invalid_value', `\`input_ids\` must be integers in [0, ${this.model.vocab}). Given: ${bad}`)
    return req.input_ids
  }

  /**
   * Validates and queues a request. Events go to `sink`: accepted, tokens, then done or error. Returns a cancel
   * function; cancelling drops the sequence at the next step. Validation errors arrive as an `error` event.
   */
  submit(req: EngineRequest, sink: SeqSink): () => void {
    let seq: Sequence
    try {
      checkModel(req.model, this.model.id)
      const ids = this.promptIds(req)
      const params = validateSampling(req, { maxContext: this.model.contextLength, promptTokens: ids.length, vocab: this.model.vocab })
      seq = new Sequence(req.request_id || randomUUID(), ids, params, this.model, sink, this.scratch, req.tenant, req.choice)
      const format = toolCallFormat(req) ?? params.response_format
      if (format) {
        const s = seq
        this.grammarsOf()
          .matcher(format)
          .then((g) => {
            if (s.cancelled) {
              g.dispose()
              return s.fail({ code: 'internal', message: 'request cancelled' })
            }
            s.constrain(g)
            this.batcher.submit(s)
            sink({ type: 'accepted', promptTokens: ids.length })
          })
          .catch((e: unknown) => s.fail(toErrorData(e)))
        return () => s.cancel()
      }
      this.batcher.submit(seq)
      sink({ type: 'accepted', promptTokens: ids.length })
    } catch (e) {
      sink({ type: 'error', error: toErrorData(e) })
      return () => {}
    }
    return () => seq.cancel()
  }

  private grammarsOf(): Grammars {
    const tok = this.model.tokenizer
    if (!tok) throw new OnnxdError('invalid_value', '`response_format` needs the model\'s tokenizer, and this bundle has none', { param: 'response_format' })
    this.grammars ??= new Grammars(() => tok.vocabulary(this.model.vocab), [...this.model.eos], this.grammarLimits)
    return this.grammars
  }

  /**
   * Runs, before the first request, the step shapes a GPU provider compiles shaders for on first use (issue 33), so
   * that no request waits for them: on lavapipe the first decode step at 1, at 2-4 and at 16 rows, and the first prompt
   * chunk, each took 0.7-13 s once. A device cache steps in powers of two (rows in capi-session.ts runDevice, prompt
   * chunks in prefillChunk), so these are all the shapes it runs. Greedy requests over synthetic ids, in turn:
   * - maxRunning one-token prompts (at most maxWaiting), each long enough to still run when the last joins, so that
   *   the decode steps cover every power of two of rows up to maxRunning (as many as the KV budget admits);
   * - one prompt of 2 x maxBatchedTokens - 1 tokens (as the context allows), prefilled alone in chunks of every power
   *   of two up to maxBatchedTokens.
   * With speculative decoding on, a third: as many rows as may draft together (speculativeMaxRows; one on a
   * GroupQueryAttention graph), whose output repeats, so that their steps carry drafts. Sampled steps
   * fetch the logits instead of the graph's argmax, over the same kernels (lavapipe compiled nothing new for them).
   * Returns how many requests ran; the caller decides where (the node's workers, before they say ready).
   */
  async warmUp(): Promise<number> {
    const { vocab, contextLength, eos, kvBytesPerToken } = this.model
    const { maxRunning, maxWaiting, maxBatchedTokens, kvBudgetBytes } = this.limits
    // Ids that are not EOS: ignore_eos runs past one, but a stop id would end the sequence.
    const ok = Array.from({ length: Math.min(vocab, 64) }, (_, i) => i).filter((t) => !eos.has(t))
    // Within what the node takes: the rows all wait at first (the queue's bound), and no sequence may need more than
    // the context or the KV budget holds.
    const rows = Math.max(1, Math.min(maxRunning, maxWaiting))
    const longest = Math.min(contextLength, Math.floor(kvBudgetBytes / kvBytesPerToken)) - 1
    const run = (prompt: number | number[], maxTokens: number, k: number): Promise<void> =>
      new Promise((resolve, reject) => {
        const ids = typeof prompt === 'number' ? Array.from({ length: prompt }, (_, j) => ok[(j * 7 + k) % ok.length]) : prompt
        this.submit({ model: this.model.id, request_id: `warmup-${k}`, input_ids: ids, max_tokens: maxTokens, temperature: 0, ignore_eos: true }, (e) => {
          if (e.type === 'error') reject(new OnnxdError('internal', `warm-up request failed: ${e.error.message}`))
          else if (e.type === 'done') resolve()
        })
      })
    // The short rows first: a plain graph's decode step attends over the whole slot, and the long prompt widens it.
    await Promise.all(Array.from({ length: rows }, (_, k) => run(1, Math.max(1, Math.min(rows + 2, longest)), k + 1)))
    await run(Math.max(1, Math.min(2 * maxBatchedTokens - 1, longest)), 1, 0)
    if (this.limits.speculativeTokens === 0) return rows + 1
    // With speculative decoding: as many rows as may draft together, each alone at first, whose output soon repeats
    // what it holds (a prompt of one pair of ids over and over), so that their steps carry drafts: on the device in
    // the one width they take (batcher.ts deviceDrafts), at every power of two of rows up to that many.
    const drafters = Math.max(1, Math.min(this.limits.speculativeMaxRows, rows, this.model.session.multiTokenRows))
    const repeating = (k: number): number[] => Array.from({ length: Math.min(16, longest) }, (_, j) => ok[(1 + k + (j % 2)) % ok.length])
    await Promise.all(Array.from({ length: drafters }, (_, k) => run(repeating(k), Math.max(1, Math.min(64 + 16 * k, longest - 16)), rows + 1 + k)))
    return rows + 1 + drafters
  }

  stats(): EngineStats {
    return this.batcher.stats()
  }

  async close(): Promise<void> {
    await this.batcher.close()
    await this.grammars?.close()
    await this.model.session.dispose()
  }
}
