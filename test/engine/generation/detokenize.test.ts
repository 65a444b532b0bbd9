import { existsSync, readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Tokenizer } from '@huggingface/tokenizers'
import { describe, expect, it } from 'vitest'
import { IncrementalDecoder, type DecodeFn } from '../../../src/engine/generation/detokenize.js'
import { Rng } from '../../../src/shared/prng.js'

const repoRoot = fileURLToPath(new URL('../../../', import.meta.url))
const fixtures = resolve(repoRoot, process.env.ONNXD_FIXTURES ?? '../shared/fixtures')

const FFFD = '\ufffd'

/** Streams `ids` through a fresh decoder; returns every delta, the flush last. */
function stream(decode: DecodeFn, ids: number[], contextIds?: number[]): string[] {
  const d = new IncrementalDecoder(decode, { contextIds })
  const deltas = ids.map((id) => d.push(id))
  deltas.push(d.flush())
  return deltas
}

const TEXTS = [
  'Hello world',
  'Once upon a time, there was a little girl named Lily.',
  ' leading space',
  '  two leading spaces and trailing  ',
  'café crème brûlée, naïve façade',
  'Ünïcödé àccents: éèêë',
  '日本語のテキスト',
  'mixed 日本 and English 中文',
  'emoji 😀🎉 and flags 🇫🇷 and family 👨‍👩‍👧',
  '😀',
  'line one\nline two\n\n  indented\ttab',
  'numbers 12345 and symbols #$%&*()',
  '€100 — “quotes” … ±½',
  ' 日本',
  'a é b 日 c 😀 d',
]

/** Byte-per-token fake: ids are UTF-8 bytes, decode is a lossy UTF-8 decode (special id 256 decodes to nothing). */
const byteDecode: DecodeFn = (ids) => new TextDecoder().decode(Uint8Array.from(ids.filter((i) => i < 256)))
const bytesOf = (s: string): number[] => [...new TextEncoder().encode(s)]

describe('IncrementalDecoder with a byte-level fake', () => {
  it('adds up to the full decode and never emits a broken character', () => {
    for (const text of TEXTS) {
      const deltas = stream(byteDecode, bytesOf(text))
      expect(deltas.join('')).toBe(text)
      for (const d of deltas) expect(d).not.toContain(FFFD)
    }
  })

  it('holds back the bytes of an unfinished character and emits it whole', () => {
    const d = new IncrementalDecoder(byteDecode)
    expect(d.push(0x61)).toBe('a')
    expect(d.push(0xe6)).toBe('')
    expect(d.push(0x97)).toBe('')
    expect(d.push(0xa5)).toBe('日')
  })

  it('emits complete characters before a pending one in the same window', () => {
    const d = new IncrementalDecoder(byteDecode)
    expect(d.push(0xe6)).toBe('')
    expect(d.push(0x97)).toBe('')
    expect(d.push(0xa5)).toBe('日')
    expect(d.push(0xf0)).toBe('')
    expect(d.push(0x9f)).toBe('')
    expect(d.push(0x98)).toBe('')
    expect(d.push(0x80)).toBe('😀')
  })

  it('flushes an unfinished character as U+FFFD at the end', () => {
    const deltas = stream(byteDecode, [0x61, 0xe6, 0x97])
    expect(deltas.join('')).toBe(byteDecode([0x61, 0xe6, 0x97]))
    expect(deltas.at(-1)).toBe(FFFD)
  })

  it('passes invalid bytes followed by valid text through as the full decode does', () => {
    const ids = [0x61, 0x97, 0x62, 0xe6, 0x63, 0xff, 0xff, 0x64]
    expect(stream(byteDecode, ids).join('')).toBe(byteDecode(ids))
  })

  it('stays bounded when a model emits stray lead bytes forever', () => {
    const calls: number[] = []
    const decode: DecodeFn = (ids) => {
      calls.push(ids.length)
      return byteDecode(ids)
    }
    const ids = Array.from({ length: 500 }, () => 0xe6)
    const text = stream(decode, ids).join('')
    expect(text).toBe(FFFD.repeat(500))
    expect(Math.max(...calls)).toBeLessThanOrEqual(64)
  })
})

/**
 * A sentencepiece-style fake: pieces with "▁" for spaces, joined, "▁" → " ", then one leading space stripped
 * (the Strip decoder of Llama tokenizers). Id 0 is a special token, skipped.
 */
const PIECES = ['<s>', '▁Hello', '▁world', '!', '▁', 'a', '▁b', '▁▁']
const spDecode: DecodeFn = (ids) =>
  ids
    .filter((i) => i !== 0)
    .map((i) => PIECES[i])
    .join('')
    .replaceAll('▁', ' ')
    .replace(/^ /, '')

describe('IncrementalDecoder with a sentencepiece-style fake (Strip decoder)', () => {
  it('keeps the spaces that decoding tokens one by one would strip', () => {
    const ids = [1, 2, 3, 4, 5, 6]
    expect(ids.map((i) => spDecode([i])).join('')).not.toBe(spDecode(ids)) // the naive way loses spaces
    expect(stream(spDecode, ids).join('')).toBe(spDecode(ids))
  })

  it('does not lose a space after a special token or a lone "▁" (left context that decodes to nothing)', () => {
    for (const ids of [
      [1, 0, 6],
      [5, 0, 6],
      [5, 0, 0, 2, 0, 6],
      [5, 4, 5],
      [5, 4, 6],
      [4, 4, 5],
      [5, 7, 0, 4, 6],
      [0, 1],
      [0, 4, 1],
    ]) {
      expect(stream(spDecode, ids).join(''), JSON.stringify(ids)).toBe(spDecode(ids))
    }
  })

  it('all id sequences over the fake vocabulary add up to the full decode (exhaustive, length 4)', () => {
    const n = PIECES.length
    for (let x = 0; x < n ** 4; x++) {
      const ids = [x % n, Math.floor(x / n) % n, Math.floor(x / n ** 2) % n, Math.floor(x / n ** 3) % n]
      expect(stream(spDecode, ids).join(''), JSON.stringify(ids)).toBe(spDecode(ids))
    }
  })

  it('uses the prompt as left context so the first generated token keeps its space', () => {
    const prompt = [1] // "Hello"
    const generated = [2, 3] // " world!"
    expect(stream(spDecode, generated).join('')).toBe('world!')
    expect(stream(spDecode, generated, prompt).join('')).toBe(' world!')
  })
})

interface Fixture {
  name: string
  dir: string
}

const TOKENIZERS: Fixture[] = [
  { name: 'stories260K-hf (sentencepiece BPE, byte fallback)', dir: join(fixtures, 'stories260K-hf') },
  { name: 'tiny-random-gpt2-fp32 (byte-level BPE)', dir: join(fixtures, 'tiny-random-gpt2-fp32') },
  { name: 'tiny-random-LlamaForCausalLM (sentencepiece)', dir: join(fixtures, 'tiny-random-LlamaForCausalLM-fp32-derived') },
]

function loadTokenizer(dir: string): Tokenizer {
  const json = (f: string): object => JSON.parse(readFileSync(join(dir, f), 'utf8')) as object
  return new Tokenizer(json('tokenizer.json'), json('tokenizer_config.json'))
}

for (const fx of TOKENIZERS) {
  describe.skipIf(!existsSync(join(fx.dir, 'tokenizer.json')))(`IncrementalDecoder with ${fx.name}`, () => {
    // Loaded lazily: describe bodies run even for skipped suites.
    let tok: Tokenizer | undefined
    const tokenizer = (): Tokenizer => (tok ??= loadTokenizer(fx.dir))
    // Streaming needs a decode that is stable under appending tokens, so no clean_up_tokenization_spaces
    // (it rewrites " ." into "." after the space may have been streamed).
    const decode: DecodeFn = (ids) => tokenizer().decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false })
    const encode = (s: string): number[] => tokenizer().encode(s, { add_special_tokens: false }).ids

    it('adds up to decode(all ids) and never emits U+FFFD, over ASCII, accents, CJK, emoji and leading spaces', () => {
      for (const text of TEXTS) {
        const ids = encode(text)
        const full = decode(ids)
        const deltas = stream(decode, ids)
        expect(deltas.join(''), JSON.stringify(text)).toBe(full)
        if (!full.includes(FFFD)) for (const d of deltas) expect(d, JSON.stringify(text)).not.toContain(FFFD)
      }
    })

    it('emits multi-token characters whole, holding back until the last piece arrives', () => {
      const ids = encode('x 日本 😀')
      const d = new IncrementalDecoder(decode)
      const deltas = ids.map((id) => d.push(id))
      expect(deltas.join('') + d.flush()).toBe(decode(ids))
      // Some pushes give nothing (a character still incomplete) when the tokenizer splits characters into bytes.
      const pieces = ids.map((id) => decode([id]))
      if (pieces.some((p) => p.includes(FFFD))) expect(deltas).toContain('')
      for (const delta of deltas) expect(delta).not.toContain(FFFD)
    })

    it('continues a prompt: deltas add up to the text the generated ids add to the prompt', () => {
      let checked = 0
      for (const [prompt, completion] of [
        ['Once upon a time', ' there was a cat.'],
        ['Il était', ' une fois, café'],
        ['日本', '語 😀 ok'],
        ['Hello', 'world'],
      ] as const) {
        const p = encode(prompt)
        const g = encode(prompt + completion).slice(p.length)
        const before = decode(p)
        const after = decode([...p, ...g])
        // Only meaningful when the prompt's tokens are a prefix of the whole text's tokens.
        if (!after.startsWith(before)) continue
        expect(stream(decode, g, p).join(''), prompt + completion).toBe(after.slice(before.length))
        checked++
      }
      expect(checked).toBeGreaterThanOrEqual(3)
    })

    it('adds up to decode(all ids) for random id sequences, special tokens included (fuzz)', () => {
      const vocabSize = tokenizer().get_vocab(true).size
      const rng = new Rng(31337)
      for (let t = 0; t < 200; t++) {
        const ids = Array.from({ length: 1 + Math.floor(rng.next() * 24) }, () => Math.floor(rng.next() * vocabSize))
        const full = decode(ids)
        const deltas = stream(decode, ids)
        expect(deltas.join(''), JSON.stringify(ids)).toBe(full)
        if (!full.includes(FFFD)) for (const d of deltas) expect(d).not.toContain(FFFD)
      }
    })

    it('decodes only a small window per token, not the whole sequence', () => {
      const sizes: number[] = []
      const counting: DecodeFn = (ids) => {
        sizes.push(ids.length)
        return decode(ids)
      }
      const ids = encode(TEXTS.join(' ').repeat(4))
      expect(ids.length).toBeGreaterThan(200)
      expect(stream(counting, ids).join('')).toBe(decode(ids))
      expect(Math.max(...sizes)).toBeLessThanOrEqual(16)
      expect(sizes.length).toBeLessThanOrEqual(2 * ids.length + 1)
    })
  })
}
