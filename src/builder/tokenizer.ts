// The embedded model's tokenizer: a byte-level BPE (GPT-2 / SmolLM2 style) trained deterministically on CORPUS,
// written as Hugging Face tokenizer.json, tokenizer_config.json (ChatML chat template) and special_tokens_map.json.
import { CORPUS } from './corpus.js'
import { byteAlphabet } from '../shared/byte-level.js'

/** Special tokens, ids 0.. in this order, as in SmolLM2: `<|endoftext|>` is also BOS, pad and unk; `<|im_end|>` is EOS. */
export const SPECIAL_TOKENS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'] as const
export const BOS_TOKEN = '<|endoftext|>'
export const EOS_TOKEN = '<|im_end|>'
export const BOS_ID = 0
export const EOS_ID = 2
export const PAD_ID = 0

/**
 * ChatML, as SmolLM2's template writes it (without its default system message), with tools as Qwen2.5's template
 * renders them (Hermes style): a system turn listing the functions in <tools>, the assistant's calls as
 * <tool_call>{"name": ..., "arguments": ...}</tool_call>, and the results as <tool_response> in a user turn.
 * Without tools it writes exactly the plain ChatML it always did.
 */
export const CHAT_TEMPLATE =
  "{% if tools %}{{ '<|im_start|>system\n' }}{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] + '\n\n' }}{% endif %}" +
  "{{ '# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}" +
  "{% for tool in tools %}{{ '\n' + (tool | tojson) }}{% endfor %}" +
  "{{ '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n' }}{% endif %}" +
  "{% for message in messages %}" +
  "{% if message['role'] == 'system' and tools and loop.first %}" +
  "{% elif message['role'] == 'tool' %}{{ '<|im_start|>user\n<tool_response>\n' + message['content'] + '\n</tool_response><|im_end|>\n' }}" +
  "{% elif message['role'] == 'assistant' and message['tool_calls'] %}{{ '<|im_start|>assistant\n' }}{% if message['content'] %}{{ message['content'] + '\n' }}{% endif %}" +
  "{% for call in message['tool_calls'] %}{{ '<tool_call>\n{\"name\": \"' + call['function']['name'] + '\", \"arguments\": ' + (call['function']['arguments'] | tojson) + '}\n</tool_call>' }}{% endfor %}{{ '<|im_end|>\n' }}" +
  "{% else %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endif %}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"

/** GPT-2's pre-tokenizer split (what the ByteLevel pre-tokenizer does with use_regex: true). */
const GPT2_SPLIT = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu

export interface TrainedBpe {
  /** Token strings by id: special tokens, the 256 byte symbols, then one token per merge. */
  tokens: string[]
  merges: [string, string][]
  /** How many merges were learned from the corpus (the rest are synthetic, to fill the vocabulary). */
  learned: number
}

/** Max-heap on (count desc, pair key asc); entries go stale when a count changes and are skipped on pop. */
class PairHeap {
  private readonly items: [number, number][] = []
  private static before(a: [number, number], b: [number, number]): boolean {
    return a[0] > b[0] || (a[0] === b[0] && a[1] < b[1])
  }
  push(item: [number, number]): void {
    const h = this.items
    h.push(item)
    let i = h.length - 1
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (!PairHeap.before(h[i], h[parent])) break
      ;[h[i], h[parent]] = [h[parent], h[i]]
      i = parent
    }
  }
  pop(): [number, number] | undefined {
    const h = this.items
    const top = h[0]
    const last = h.pop()
    if (h.length > 0 && last) {
      h[0] = last
      let i = 0
      for (;;) {
        const l = 2 * i + 1
        const r = l + 1
        let best = i
        if (l < h.length && PairHeap.before(h[l], h[best])) best = l
        if (r < h.length && PairHeap.before(h[r], h[best])) best = r
        if (best === i) break
        ;[h[i], h[best]] = [h[best], h[i]]
        i = best
      }
    }
    return top
  }
}

// Pair keys pack two ids (< 2^20) into one safe integer.
const PAIR = 2 ** 20
const pairKey = (a: number, b: number): number => a * PAIR + b

/** Extension letters for synthetic merges, most frequent English letters first. */
const EXTEND = 'etaoinshrdlcumwfgypbvkjxqz'
const WORDLIKE = /^Ġ?[a-z]+$/

/**
 * Trains byte-level BPE to exactly `vocabSize` ids. Merges are learned from the corpus (most frequent pair first,
 * ties to the smaller ids); a pair whose concatenation is already a token is skipped, so every merge adds exactly
 * one new token. When the corpus has no pairs left, word-like tokens are extended by letters until the
 * vocabulary is full.
 */
export function trainByteLevelBpe(vocabSize: number, corpus = CORPUS): TrainedBpe {
  const alphabet = byteAlphabet()
  const tokens: string[] = [...SPECIAL_TOKENS, ...alphabet.map(([, ch]) => ch)]
  if (vocabSize < tokens.length) throw new Error(`vocabSize must be >= ${tokens.length}. Given: ${vocabSize}`)
  if (vocabSize >= PAIR) throw new Error(`vocabSize must be < ${PAIR}. Given: ${vocabSize}`)
  const index = new Map(tokens.map((t, i) => [t, i]))
  const byteId = new Int32Array(256)
  alphabet.forEach(([b], i) => (byteId[b] = SPECIAL_TOKENS.length + i))
  const merges: [string, string][] = []

  const counts = new Map<string, number>()
  const utf8 = new TextEncoder()
  for (const piece of corpus.match(GPT2_SPLIT) ?? []) counts.set(piece, (counts.get(piece) ?? 0) + 1)
  const words = [...counts].map(([piece, count]) => ({ syms: Array.from(utf8.encode(piece), (b) => byteId[b]), count }))

  const pairCount = new Map<number, number>()
  const pairWords = new Map<number, Set<number>>()
  const addPairs = (w: number, sign: 1 | -1, touched: Set<number>): void => {
    const { syms, count } = words[w]
    for (let i = 0; i + 1 < syms.length; i++) {
      const k = pairKey(syms[i], syms[i + 1])
      pairCount.set(k, (pairCount.get(k) ?? 0) + sign * count)
      touched.add(k)
      if (sign > 0) {
        let set = pairWords.get(k)
        if (!set) pairWords.set(k, (set = new Set()))
        set.add(w)
      }
    }
  }
  const heap = new PairHeap()
  const banned = new Set<number>()
  const initial = new Set<number>()
  words.forEach((_, w) => addPairs(w, 1, initial))
  for (const k of initial) heap.push([pairCount.get(k) ?? 0, k])

  while (tokens.length < vocabSize) {
    const top = heap.pop()
    if (!top) break
    const [count, k] = top
    if (pairCount.get(k) !== count || count <= 0 || banned.has(k)) continue // stale entry
    const a = Math.floor(k / PAIR)
    const b = k % PAIR
    const merged = tokens[a] + tokens[b]
    if (index.has(merged)) {
      banned.add(k) // another merge order already made this string
      continue
    }
    const id = tokens.length
    tokens.push(merged)
    index.set(merged, id)
    merges.push([tokens[a], tokens[b]])
    const touched = new Set<number>()
    for (const w of pairWords.get(k) ?? []) {
      const word = words[w]
      addPairs(w, -1, touched)
      const out: number[] = []
      for (let i = 0; i < word.syms.length; i++) {
        if (i + 1 < word.syms.length && word.syms[i] === a && word.syms[i + 1] === b) {
          out.push(id)
          i++
        } else out.push(word.syms[i])
      }
      word.syms = out
      addPairs(w, 1, touched)
    }
    pairWords.delete(k)
    pairCount.delete(k)
    for (const t of touched) {
      const c = pairCount.get(t) ?? 0
      if (c > 0) heap.push([c, t])
      else pairCount.delete(t)
    }
  }
  const learned = merges.length

  while (tokens.length < vocabSize) {
    const before = tokens.length
    const stems = tokens.filter((t) => WORDLIKE.test(t))
    for (const stem of stems) {
      for (const letter of EXTEND) {
        if (tokens.length >= vocabSize) break
        const merged = stem + letter
        if (index.has(merged)) continue
        index.set(merged, tokens.length)
        tokens.push(merged)
        merges.push([stem, letter])
      }
    }
    if (tokens.length === before) throw new Error('synthetic merges made no progress') // cannot happen: stems grow
  }
  return { tokens, merges, learned }
}

const addedToken = (content: string): Record<string, unknown> => ({
  content,
  lstrip: false,
  normalized: false,
  rstrip: false,
  single_word: false,
  special: true,
})

/** tokenizer.json text, laid out as the Rust `tokenizers` library saves it (vocab in id order). */
export function tokenizerJsonText(bpe: TrainedBpe): string {
  const doc = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: SPECIAL_TOKENS.map((content, id) => ({ id, ...addedToken(content) })),
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab: '__VOCAB__',
      merges: bpe.merges,
    },
  }
  // A JS object would reorder integer-like keys ("1", "10"), so the vocab is written by hand, in id order.
  const vocab = `{\n${bpe.tokens.map((t, id) => `      ${JSON.stringify(t)}: ${id}`).join(',\n')}\n    }`
  return JSON.stringify(doc, null, 2).replace('"__VOCAB__"', () => vocab) + '\n'
}

export function tokenizerConfig(vocabSize: number, modelMaxLength: number): Record<string, unknown> {
  return {
    add_bos_token: false,
    add_eos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: Object.fromEntries(SPECIAL_TOKENS.map((content, id) => [String(id), addedToken(content)])),
    additional_special_tokens: ['<|im_start|>', '<|im_end|>'],
    bos_token: BOS_TOKEN,
    chat_template: CHAT_TEMPLATE,
    clean_up_tokenization_spaces: false,
    eos_token: EOS_TOKEN,
    model_max_length: modelMaxLength,
    pad_token: BOS_TOKEN,
    tokenizer_class: 'GPT2Tokenizer',
    unk_token: BOS_TOKEN,
    vocab_size: vocabSize,
  }
}

export function specialTokensMap(): Record<string, unknown> {
  const tok = (content: string): Record<string, unknown> => ({ content, lstrip: false, normalized: false, rstrip: false, single_word: false })
  return {
    additional_special_tokens: ['<|im_start|>', '<|im_end|>'],
    bos_token: tok(BOS_TOKEN),
    eos_token: tok(EOS_TOKEN),
    pad_token: tok(BOS_TOKEN),
    unk_token: tok(BOS_TOKEN),
  }
}
