// The bytes logprobs report for a token (TextTokenizer.tokenBytes): exact for byte-level BPE (the embedded model's
// tokenizer) and for byte-fallback SentencePiece vocabularies (the stories260K-hf fixture), so a client can put a
// character split across tokens back together from their bytes.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { TextTokenizer } from '../../../src/engine/tokenizer/tokenizer.js'
import { tinyPlainModelDir, fixture, haveFixtures } from '../../helpers/fixtures.js'

const load = (dir: string): TextTokenizer =>
  new TextTokenizer(JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')) as object, JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>, null)

const TEXTS = ['plain words', 'naïve café — 日本語 🙂', 'tab\tand\nnewline']

describe('token bytes', () => {
  const cases: [string, () => string][] = [['byte-level BPE (embedded model)', tinyPlainModelDir]]
  if (haveFixtures) cases.push(['SentencePiece with byte fallback (stories260K-hf)', () => fixture('stories260K-hf')])
  for (const [name, dir] of cases) {
    it(`${name}: the tokens' bytes concatenate to the text's UTF-8, multi-byte characters split across tokens included`, () => {
      const tok = load(dir())
      let split = 0
      for (const text of TEXTS) {
        const ids = tok.encode(text, false)
        const bytes = ids.flatMap((id) => tok.tokenBytes(id))
        // SentencePiece writes a leading space (▁) before the first word: its bytes say so.
        const want = [...Buffer.from(text, 'utf8')]
        const got = Buffer.from(bytes).toString('utf8')
        expect(got === text || got === ` ${text}`, `${JSON.stringify(got)} for ${JSON.stringify(text)}`).toBe(true)
        expect(bytes.length - want.length).toBeLessThanOrEqual(1)
        split += ids.filter((id) => tok.tokenText(id).includes('\ufffd')).length
      }
      // Some token held part of a character (its text alone is U+FFFD), and its bytes still put the text together.
      expect(split).toBeGreaterThan(0)
    })
  }
})
