// Text <-> token ids for one model: @huggingface/tokenizers for encode/decode, @huggingface/jinja for the chat
// template (rendered as transformers' apply_chat_template does, with add_generation_prompt).
import { Tokenizer } from '@huggingface/tokenizers'
import { Template } from '@huggingface/jinja'
import { OnnxdError } from '../../shared/errors.js'

export interface Message {
  role: string
  content: string
}

const tokenText = (v: unknown): string | undefined =>
  typeof v === 'string' ? v : typeof v === 'object' && v !== null && typeof (v as { content?: unknown }).content === 'string' ? (v as { content: string }).content : undefined

export class TextTokenizer {
  private readonly tok: Tokenizer
  private readonly template: Template | null
  private readonly specials: Record<string, string | undefined>
  /** One past the largest id the tokenizer can produce. */
  readonly vocabSize: number

  constructor(json: object, config: Record<string, unknown>, chatTemplate: string | null, where = 'tokenizer.json') {
    try {
      this.tok = new Tokenizer(json, config)
    } catch (e) {
      throw new OnnxdError('bad_bundle', `${where}: cannot load tokenizer: ${(e as Error).message}`)
    }
    let max = -1
    for (const id of this.tok.get_vocab(true).values()) if (id > max) max = id
    this.vocabSize = max + 1
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
