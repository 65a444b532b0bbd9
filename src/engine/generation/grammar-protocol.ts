// The messages between an engine replica (grammar.ts) and its grammar thread (grammar-thread.ts). Plain data: they
// are cloned across threads. Imports: shared types.
import type { StructuredOutput } from '../../shared/sampling.js'

/** The model's vocabulary as the grammar engine reads it (TextTokenizer.vocabulary). */
export interface GrammarVocabulary {
  pieces: string[]
  kind: 'byte_level' | 'byte_fallback' | 'raw'
  prependsSpace: boolean
}

export interface GrammarThreadData {
  vocabulary: GrammarVocabulary
  /** Tokens that end a sequence (the model's EOS): allowed wherever the value may end, and only there. */
  stopIds: number[]
  /** Compiled grammars kept, least recently used evicted first. */
  maxCached: number
}

export type GrammarRequest =
  /**
   * Builds `spec`'s grammar (grammar-source.ts) and compiles it unless `key` is cached, makes matcher `m` of it, and
   * walks it through `replay` (a replaced thread's matchers come back this way).
   */
  | { type: 'open'; req: number; m: number; key: string; spec: StructuredOutput; replay: number[] }
  /** For each matcher: accepts the token picked last (null: none yet), then computes the next step's mask. */
  | { type: 'next'; req: number; items: { m: number; accept: number | null }[] }
  | { type: 'close'; m: number }

export interface MaskResult {
  /** The grammar refused the accepted token. */
  rejected: boolean
  /**
   * The value is complete: it took an end-of-sequence token, or nothing but one may follow it (no mask then). A value
   * that may end but may also go on (a number at the root) is not: its mask allows the EOS beside its continuations.
   */
  terminated: boolean
  /** Bit i set: token i is allowed at the next step. */
  bits: Int32Array | null
}

export type GrammarReply =
  /** Request `req` missed the cache and its compile starts now (the replica's timer starts here). */
  | { type: 'compiling'; req: number }
  /** `bits`: the matcher's mask for its next token, so a sequence's first step never waits for the thread. */
  | { type: 'opened'; req: number; heapBytes: number; bits: Int32Array | null }
  /**
   * `fatal`: a WebAssembly trap; the thread's instance is no longer usable. `refusal`: the schema's own 422 (a
   * constraint the converter cannot enforce), passed on as it is.
   */
  | { type: 'failed'; req: number; message: string; fatal: boolean; refusal?: { message: string; param?: string } }
  | { type: 'masks'; req: number; results: MaskResult[] }
