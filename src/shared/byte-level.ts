// GPT-2's byte-level alphabet (bytes_to_unicode), used by byte-level BPE tokenizers: every byte is written as one
// visible character. The builder trains its tokenizer on it; the engine reads a token's bytes back through it.
// Plain data, no imports.

/**
 * GPT-2's bytes_to_unicode, as a list in GPT-2's vocabulary order: printable bytes stand for themselves, the
 * others map to U+0100 upward, so every byte is a visible character. Entry i is [byte, character].
 */
export function byteAlphabet(): [number, string][] {
  const bs: number[] = []
  const range = (a: number, b: number): void => {
    for (let i = a; i <= b; i++) bs.push(i)
  }
  range(0x21, 0x7e)
  range(0xa1, 0xac)
  range(0xae, 0xff)
  const cs = [...bs]
  let n = 0
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b)
      cs.push(256 + n++)
    }
  }
  return bs.map((b, i) => [b, String.fromCharCode(cs[i]!)])
}

/** The byte each character of the alphabet stands for. */
export const BYTE_OF_CHAR: ReadonlyMap<string, number> = new Map(byteAlphabet().map(([b, c]) => [c, b]))
