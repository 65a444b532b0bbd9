// Text <-> token ids for one model: @huggingface/tokenizers for encode/decode, @huggingface/jinja for the chat
// template (rendered as transformers' apply_chat_template does, with add_generation_prompt).
import { Tokenizer } from '@huggingface/tokenizers'
import { Template } from '@huggingface/jinja'
import { OnnxdError } from '../../shared/errors.js'
import { promptByteLimit } from './prompt.js'

export interface Message {
  role: string
  content: string
}

const tokenText = (v: unknown): string | undefined =>
  typeof v === 'string' ? v : typeof v === 'object' && v !== null && typeof (v as { content?: unknown }).content === 'string' ? (v as { content: string }).content : undefined

interface TokenizerJson {
  normalizer?: TokenizerPart | null
  pre_tokenizer?: TokenizerPart | null
  model?: { type?: string; byte_fallback?: boolean }
}
interface TokenizerPart {
  type?: string
  normalizers?: TokenizerPart[]
  pretokenizers?: TokenizerPart[]
  pattern?: { String?: string }
  content?: string
}

const flatten = (p: TokenizerPart | null | undefined): TokenizerPart[] =>
  !p ? [] : p.type === 'Sequence' ? [...(p.normalizers ?? []), ...(p.pretokenizers ?? [])].flatMap(flatten) : [p]

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

  constructor(json: object, config: Record<string, unknown>, chatTemplate: string | null, where = 'tokenizer.json') {
    try {
      this.tok = new Tokenizer(json, config)
    } catch (e) {
      throw new OnnxdError('bad_bundle', `${where}: cannot load tokenizer: ${(e as Error).message}`)
    }
    let max = -1
    for (const id of this.tok.get_vocab(true).values()) if (id > max) max = id
    this.vocabSize = max + 1
    this.lengthPreserving = lengthPreserving(json)
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
   * The most UTF-8 bytes of prompt text that can fit `contextTokens` tokens. Exact for length-preserving tokenizers;
   * otherwise four times that, so only a pathological text that normalization shrinks fourfold is refused wrongly.
   */
  promptByteLimit(contextTokens: number): number {
    return promptByteLimit(contextTokens, this.maxTokenBytes, this.lengthPreserving)
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

  tokenId(token: string): number | undefined {
    return this.tok.token_to_id(token)
  }

  /** Renders the chat template with a generation prompt. Template errors (jinja's raise_exception too) are 422s. */
  renderChat(messages: Message[]): string {
    if (!this.template) throw new OnnxdError('invalid_value', 'this model has no chat template: send `prompt` or `input_ids` instead of `messages`')
    try {
      return this.template.render({
        messages,
        add_generation_prompt: true,
        ...this.specials,
      })
    } catch (e) {
      throw new OnnxdError('invalid_value', `chat template rejected the messages: ${(e as Error).message}`)
    }
  }

  /** Chat messages to prompt ids. The template writes BOS itself, so no special tokens are added again. */
  encodeChat(messages: Message[]): number[] {
    return this.encode(this.renderChat(messages), false)
  }
}
