// Structured outputs: the tokens a JSON grammar allows at each step, as a bitmask over the vocabulary, from xgrammar
// (its WebAssembly build, the npm package @mlc-ai/web-xgrammar; this module is its one importer). A request's
// response_format becomes a grammar (any JSON object, or one JSON Schema), compiled once per schema against the
// model's vocabulary; each sequence walks it with a matcher: the mask before a step, the pick accepted after it.
// Imports: node, shared errors, the package's types.
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname } from 'node:path'
import type * as XG from '@mlc-ai/web-xgrammar'
import { OnnxdError } from '../../shared/errors.js'
import type { StructuredOutput } from '../../shared/sampling.js'
import { JSON_OBJECT_GRAMMAR, jsonSchemaGrammar } from './json-schema-grammar.js'
import { TOOL_CALL_CLOSE, TOOL_CALL_OPEN } from '../../shared/tools.js'

type Xgrammar = typeof XG

let loaded: Promise<Xgrammar> | null = null

/**
 * The package. Its bundle is UMD in a package marked `"type": "module"`, which Node's ESM loader cannot run (it
 * reads `require`), so it is evaluated here as the CommonJS module it also is (pinned: 0.1.27).
 */
function xgrammar(): Promise<Xgrammar> {
  loaded ??= (async () => {
    const file = createRequire(import.meta.url).resolve('@mlc-ai/web-xgrammar')
    const module = { exports: {} as Record<string, unknown> }
    // Its one dynamic import (of node:module, for createRequire) becomes a require: code made by new Function has no
    // module loader to import with inside vitest's VM contexts.
    const source = readFileSync(file, 'utf8').replace("await import('module')", "require('module')")
    new Function('exports', 'module', 'require', '__filename', '__dirname', source)(module.exports, module, createRequire(file), file, dirname(file))
    return module.exports as unknown as Xgrammar
  })()
  return loaded
}

/** The model's vocabulary as the grammar engine reads it (TextTokenizer.vocabulary). */
export interface GrammarVocabulary {
  pieces: string[]
  kind: 'byte_level' | 'byte_fallback' | 'raw'
  prependsSpace: boolean
}

/** Compiled grammars kept per engine replica, by schema: compiling one costs tens of ms over a 49k vocabulary. */
const CACHED_GRAMMARS = 64

/** One model's grammar compiler: vocabulary read once, on the first structured request. */
export class Grammars {
  private compiler: Promise<XG.GrammarCompiler> | null = null
  private readonly compiled = new Map<string, Promise<XG.CompiledGrammar>>()

  constructor(
    private readonly vocabulary: () => GrammarVocabulary,
    /** Tokens that end a sequence (the model's EOS): allowed once the JSON is complete, and only then. */
    private readonly stopIds: readonly number[],
  ) {}

  private async compilerOf(): Promise<XG.GrammarCompiler> {
    this.compiler ??= (async () => {
      const xg = await xgrammar()
      const v = this.vocabulary()
      const info = await xg.TokenizerInfo.createTokenizerInfo(v.pieces, v.kind, v.prependsSpace, v.pieces.length, [...this.stopIds])
      return xg.GrammarCompiler.createGrammarCompiler(info, true)
    })()
    return this.compiler
  }

  /**
   * A fresh matcher of `spec`'s grammar: compact JSON (no free whitespace, so a model cannot spend its tokens on
   * spaces). A schema with a constraint it cannot enforce is a 422 naming it (json-schema-grammar.ts).
   */
  async matcher(spec: StructuredOutput): Promise<TokenMask> {
    // Auto: free text, in which whatever follows the call tag is one call (xgrammar's triggered tags).
    const auto = spec.type === 'tool_call' && spec.mode === 'auto'
    const key = JSON.stringify(spec)
    let g = this.compiled.get(key)
    if (g) this.compiled.delete(key)
    else {
      // Converted only on a miss (a schema it cannot enforce throws its 422 here, and is not kept).
      const ebnf = spec.type === 'json_object' ? JSON_OBJECT_GRAMMAR : spec.type === 'json_schema' ? jsonSchemaGrammar(spec.schema) : toolCallGrammar(spec.functions, spec.mode === 'required')
      g = this.compilerOf().then((c) =>
        auto
          ? c.compileStructuralTag({ type: 'structural_tag', format: { type: 'triggered_tags', triggers: [TOOL_CALL_OPEN], tags: [{ type: 'tag', begin: `${TOOL_CALL_OPEN}\n`, content: { type: 'grammar', grammar: ebnf }, end: `\n${TOOL_CALL_CLOSE}` }] } })
          : c.compileGrammar(ebnf, 'root'),
      )
      g.catch(() => this.compiled.delete(key))
    }
    this.compiled.set(key, g)
    if (this.compiled.size > CACHED_GRAMMARS) {
      const [oldest, evicted] = this.compiled.entries().next().value as [string, Promise<XG.CompiledGrammar>]
      this.compiled.delete(oldest)
      void evicted.then((c) => c.dispose(), () => {})
    }
    let compiled: XG.CompiledGrammar
    try {
      compiled = await g
    } catch (e) {
      const what = spec.type === 'json_object' ? 'response_format' : spec.type === 'json_schema' ? 'response_format.json_schema.schema' : 'tools'
      throw new OnnxdError('invalid_value', `\`${what}\` cannot be compiled into a grammar: ${String((e as Error).message ?? e).slice(0, 200)}`, { param: what })
    }
    const xg = await xgrammar()
    // A JSON value or a required call ends when it is complete (no stop token needed): the sequence then finishes
    // with "stop". Free text (auto) ends as text does, with the model's end-of-sequence token.
    return new TokenMask(await xg.GrammarMatcher.createGrammarMatcher(compiled, undefined, !auto))
  }
}

/**
 * A call's JSON to one of `functions`: its name, and arguments valid under its parameters (any object without);
 * `tagged`, inside Hermes's <tool_call> tags.
 */
function toolCallGrammar(functions: { name: string; parameters: Record<string, unknown> | null }[], tagged: boolean): string {
  const schema = {
    anyOf: functions.map((f) => ({ type: 'object', properties: { name: { const: f.name }, arguments: f.parameters ?? { type: 'object' } }, required: ['name', 'arguments'] })),
  }
  return jsonSchemaGrammar(schema, tagged ? [`${TOOL_CALL_OPEN}\n`, `\n${TOOL_CALL_CLOSE}`] : undefined, 'tools[].function.parameters')
}

/** One sequence's walk through its grammar. */
export class TokenMask {
  /** Bit i set: token i is allowed at this step (filled by next()). */
  bits: Int32Array = new Int32Array(0)

  constructor(private readonly m: XG.GrammarMatcher) {}

  /** Computes the next step's allowed tokens. */
  async next(): Promise<void> {
    this.bits = await this.m.getNextTokenBitmask()
  }

  /** Advances past the picked token; false when the grammar does not allow it (a bug: the mask was not applied). */
  accept(id: number): boolean {
    return this.m.acceptToken(id)
  }

  /** Whether the value is complete: nothing more may follow. */
  get terminated(): boolean {
    return this.m.isTerminated()
  }

  dispose(): void {
    this.m.dispose()
  }
}
