// Text <-> token ids for one model: @huggingface/tokenizers for encode/decode, @huggingface/jinja for the chat
// template (rendered as transformers' apply_chat_template does, with add_generation_prompt).
import { Tokenizer } from '@huggingface/tokenizers'
import { Template } from '@huggingface/jinja'
import { OnnxdError } from '../../shared/errors.js'
import { BYTE_OF_CHAR } from '../../shared/byte-level.js'

const UTF8 = new TextDecoder('utf-8', { fatal: true })

export interface Message {
  role: string
  content: string
}

const tokenText = (v: unknown): string | undefined =>
  typeof v === 'string' ? v : typeof v === 'object' && v !== null && typeof (v as { content?: unknown }).content === 'string' ? (v as { content: string }).content : undefined

interface TokenizerJson {
  normalizer?: TokenizerPart | null
  pre_tokenizer?: TokenizerPart | null
  decoder?: TokenizerPart | null
  model?: { type?: string; byte_fallback?: boolean }
}
interface TokenizerPart {
  type?: string
  normalizers?: TokenizerPart[]
  pretokenizers?: TokenizerPart[]
  decoders?: TokenizerPart[]
  pattern?: { String?: string }
  content?: string
}

const flatten = (p: TokenizerPart | null | undefined): TokenizerPart[] =>
  !p ? [] : p.type === 'Sequence' ? [...(p.normalizers ?? []), ...(p.pretokenizers ?? []), ...(p.decoders ?? [])].flatMap(flatten) : [p]

/**
 * See TextTokenizer.lengthPreserving: normalizers that only add text (Prepend, a Replace by something no shorter),
 * and a BPE model that reaches every byte (a ByteLevel pre-tokenizer, or byte fallback).
 */
function lengthPreserving(json: object): boolean {
  const t = json as TokenizerJson
  const growing = flatten(t.normalizer).every(
    (p) => p.type === 'Prepend' || (p.type === 'Replace' && typeof p.pattern?.String === 'string' && Buffer.byteLength(p.content ?? '') >= Buffer.byteLength(p.pattern.String)),
  )
  const everyByte = t.model?.type === 'BPE' && (t.model.byte_fallback === true || flatten(t.pre_tokenizer).some((p) => p.type === 'ByteLevel'))
  return growing && everyByte
}

export class TextTokenizer {
  private readonly tok: Tokenizer
  private readonly template: Template | null
  private readonly specials: Record<string, string | undefined>
  /** One past the largest id the tokenizer can produce. */
  readonly vocabSize: number
  #maxTokenBytes: number | null = null
  /**
   * Whether every byte of input text survives into tokens: no normalizer that can shrink or delete text (Unicode
   * normalization, stripping, lowercasing) and no model that folds a run of unknown characters into one token.
   * Then a text of B bytes is at least B / maxTokenBytes tokens.
   */
  readonly lengthPreserving: boolean
  /** Whether token strings are written in GPT-2's byte alphabet (a ByteLevel decoder): then they map back to bytes. */
  private readonly byteLevel: boolean
  /** Whether token strings write a space as `▁` (SentencePiece: a Metaspace decoder, or a Replace of it). */
  private readonly metaspace: boolean
  /** Whether bytes outside the vocabulary are tokens `<0x00>`..`<0xFF>` (SentencePiece's byte fallback). */
  private readonly byteFallback: boolean
  private readonly bytesOf = new Map<number, number[]>()

  constructor(json: object, config: Record<string, unknown>, private readonly templateSource: string | null, where = 'tokenizer.json') {
    const chatTemplate = templateSource
    try {
      this.tok = new Tokenizer(json, config)
    } catch (e) {
      throw new OnnxdError('bad_bundle', `${where}: cannot load tokenizer: ${(e as Error).message}`)
    }
    let max = -1
    for (const id of this.tok.get_vocab(true).values()) if (id > max) max = id
    this.vocabSize = max + 1
    this.lengthPreserving = lengthPreserving(json)
    const decoders = flatten((json as TokenizerJson).decoder)
    this.byteLevel = decoders.some((d) => d.type === 'ByteLevel')
    this.metaspace = decoders.some((d) => d.type === 'Metaspace' || (d.type === 'Replace' && d.pattern?.String === '\u2581'))
    this.byteFallback = (json as TokenizerJson).model?.byte_fallback === true
    try {
      this.template = chatTemplate ? new Template(chatTemplate) : null
    } catch (e) {
      throw new OnnxdError('bad_bundle', `${where}: chat_template does not parse: ${(e as Error).message}`)
    }
    this.specials = {
      bos_token: tokenText(config.bos_token),
      eos_token: tokenText(config.eos_token),
      unk_token: tokenText(config.unk_token),
      pad_token: tokenText(config.pad_token),
    }
  }

  /**
   * The most UTF-8 bytes of text one token stands for (its decoded form; special tokens included). Decodes the whole
   * vocabulary once, on first use: only the threads that bound prompts pay for it, not the engine replicas.
   */
  get maxTokenBytes(): number {
    if (this.#maxTokenBytes === null) {
      let longest = 1
      for (const id of this.tok.get_vocab(true).values()) {
        longest = Math.max(longest, Buffer.byteLength(this.tok.decode([id], { skip_special_tokens: false, clean_up_tokenization_spaces: false })))
      }
      this.#maxTokenBytes = longest
    }
    return this.#maxTokenBytes
  }

  /** Whether the chat template reads `tools` (as transformers' apply_chat_template(tools=...) passes them). */
  get rendersTools(): boolean {
    return this.templateSource !== null && /\btools\b/.test(this.templateSource)
  }

  get hasChatTemplate(): boolean {
    return this.template !== null
  }

  /** Encodes raw text; special tokens (e.g. BOS) are added as the tokenizer's post-processor says. */
  encode(text: string, addSpecialTokens = true): number[] {
    return this.tok.encode(text, { add_special_tokens: addSpecialTokens }).ids
  }

  /**
   * Special tokens are skipped. Space clean-up (" ." -> ".") is off: a streamed space cannot be taken back, so the
   * final text must be the plain concatenation of what was streamed.
   */
  decode(ids: number[]): string {
    return this.tok.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false })
  }

  /**
   * One token's text as logprobs report it: its bytes (tokenBytes) as UTF-8, so a SentencePiece token keeps its
   * leading space; a token holding part of a character reads as the decoder gives it (U+FFFD).
   */
  tokenText(id: number): string {
    try {
      return UTF8.decode(Uint8Array.from(this.tokenBytes(id)))
    } catch {
      return this.tok.decode([id], { skip_special_tokens: false, clean_up_tokenization_spaces: false })
    }
  }

  /**
   * The bytes one token stands for, as logprobs report them: exact for byte-level BPE (its string in GPT-2's byte
   * alphabet), for byte-fallback tokens (`<0xE2>`) and for SentencePiece pieces (`▁` is a space), so a character
   * split across tokens can be put back together; otherwise the UTF-8 of the token decoded alone. Kept per id.
   */
  tokenBytes(id: number): number[] {
    let b = this.bytesOf.get(id)
    if (b) return b
    const piece = this.tok.id_to_token(id) ?? ''
    const fallback = /^<0x([0-9A-Fa-f]{2})>$/.exec(piece)
    const chars = [...piece]
    if (fallback) b = [parseInt(fallback[1]!, 16)]
    else if (this.byteLevel && piece && chars.every((c) => BYTE_OF_CHAR.has(c))) b = chars.map((c) => BYTE_OF_CHAR.get(c)!)
    else if (this.metaspace && piece) b = [...Buffer.from(piece.replaceAll('\u2581', ' '), 'utf8')]
    else b = [...Buffer.from(this.tok.decode([id], { skip_special_tokens: false, clean_up_tokenization_spaces: false }), 'utf8')]
    this.bytesOf.set(id, b)
    return b
  }

  /**
   * Every token's string as the vocabulary writes it (GPT-2's byte alphabet, `▁` for a space, `<0x0A>`), ids 0 to
   * `size` - 1 ('' past the vocabulary), and how to read them: what a grammar engine needs to know which token
   * spells which bytes.
   */
  vocabulary(size: number): { pieces: string[]; kind: 'byte_level' | 'byte_fallback' | 'raw'; prependsSpace: boolean } {
    const pieces = Array.from({ length: size }, (_, id) => this.tok.id_to_token(id) ?? '')
    return { pieces, kind: this.byteLevel ? 'byte_level' : this.byteFallback ? 'byte_fallback' : 'raw', prependsSpace: this.metaspace }
  }

  tokenId(token: string): number | undefined {
    return this.tok.token_to_id(token)
  }

  /** Renders the chat template with a generation prompt. Template errors (jinja's raise_exception too) are 422s. */
  renderChat(messages: Message[], tools?: readonly object[]): string {
    if (!this.template) throw new OnnxdError('invalid_value', 'this model has no chat template: send `prompt` or `input_ids` instead of `messages`')
    if (tools?.length && !this.rendersTools) {
      throw new OnnxdError('invalid_value', "`tools`: this model's chat template does not render tools, so it cannot call them", { param: 'tools' })
    }
    try {
      return this.template.render({
        messages,
        ...(tools?.length ? { tools } : {}),
        add_generation_prompt: true,
        ...this.specials,
      })
    } catch (e) {
      throw new OnnxdError('invalid_value', `chat template rejected the messages: ${(e as Error).message}`)
    }
  }

  /** Chat messages to prompt ids. The template writes BOS itself, so no special tokens are added again. */
  encodeChat(messages: Message[], tools?: readonly object[]): number[] {
    return this.encode(this.renderChat(messages, tools), false)
  }
}
