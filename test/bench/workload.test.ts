import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { makeWorkload, parseLength, readPromptFile } from '../../src/bench/workload.js'

describe('parseLength', () => {
  it('reads fixed and uniform lengths', () => {
    expect(parseLength('prompt-len', '128')).toEqual({ kind: 'fixed', value: 128 })
    expect(parseLength('prompt-len', '64:192')).toEqual({ kind: 'uniform', min: 64, max: 192 })
    expect(parseLength('prompt-len', '5:5')).toEqual({ kind: 'fixed', value: 5 })
  })

  it('names the flag and the value it rejects', () => {
    expect(() => parseLength('output-len', '0')).toThrow(/--output-len .* Given: 0/)
    expect(() => parseLength('output-len', '9:3')).toThrow(/Given: 9:3/)
    expect(() => parseLength('output-len', 'abc')).toThrow(/--output-len/)
  })
})

describe('makeWorkload', () => {
  const spec = { promptLen: parseLength('p', '4:12'), outputLen: parseLength('o', '2:6'), seed: 3 }

  it('is the same for the same seed, and item i does not depend on how many are made', () => {
    const a = makeWorkload(spec, { kind: 'ids', vocab: 50 }, 20)
    expect(makeWorkload(spec, { kind: 'ids', vocab: 50 }, 20)).toEqual(a)
    expect(makeWorkload(spec, { kind: 'ids', vocab: 50 }, 5)).toEqual(a.slice(0, 5))
    expect(makeWorkload({ ...spec, seed: 4 }, { kind: 'ids', vocab: 50 }, 20)).not.toEqual(a)
  })

  it('draws lengths within the distributions and token ids above the reserved ones', () => {
    const items = makeWorkload(spec, { kind: 'ids', vocab: 50 }, 200)
    for (const it of items) {
      if (!('input_ids' in it.input)) throw new Error('expected ids')
      expect(it.input.input_ids.length).toBeGreaterThanOrEqual(4)
      expect(it.input.input_ids.length).toBeLessThanOrEqual(12)
      expect(Math.min(...it.input.input_ids)).toBeGreaterThanOrEqual(3)
      expect(Math.max(...it.input.input_ids)).toBeLessThan(50)
      expect(it.maxTokens).toBeGreaterThanOrEqual(2)
      expect(it.maxTokens).toBeLessThanOrEqual(6)
    }
  })

  it('writes text prompts of N words, and chat messages for a chat endpoint', () => {
    const fixed = { promptLen: parseLength('p', '7'), outputLen: parseLength('o', '3'), seed: 0 }
    const [t] = makeWorkload(fixed, { kind: 'text' }, 1)
    expect('prompt' in t.input && t.input.prompt.split(' ')).toHaveLength(7)
    const [c] = makeWorkload(fixed, { kind: 'chat' }, 1)
    expect('messages' in c.input && c.input.messages[0].role).toBe('user')
  })

  it('starts every prompt with the same shared prefix (a system prompt), then the prompt’s own tokens', () => {
    const spec = { promptLen: parseLength('p', '5'), outputLen: parseLength('o', '3'), seed: 2, sharedPrefixLen: 12 }
    const items = makeWorkload(spec, { kind: 'ids', vocab: 1000 }, 4).map((i) => ('input_ids' in i.input ? i.input.input_ids : []))
    for (const ids of items) {
      expect(ids).toHaveLength(17)
      expect(ids.slice(0, 12)).toEqual(items[0].slice(0, 12))
    }
    expect(new Set(items.map((ids) => ids.slice(12).join())).size).toBe(4)
    // The prompts' own tokens are those of the same workload without a prefix.
    expect(makeWorkload({ ...spec, sharedPrefixLen: 0 }, { kind: 'ids', vocab: 1000 }, 4).map((i) => ('input_ids' in i.input ? i.input.input_ids : []))).toEqual(items.map((ids) => ids.slice(12)))
    const texts = makeWorkload(spec, { kind: 'text' }, 2).map((i) => ('prompt' in i.input ? i.input.prompt.split(' ') : []))
    expect(texts[0]).toHaveLength(17)
    expect(texts[1].slice(0, 12)).toEqual(texts[0].slice(0, 12))
  })

  it('takes prompts from a JSONL file, with their own output lengths', () => {
    const dir = mkdtempSync(join(tmpdir(), 'onnxd-bench-'))
    const path = join(dir, 'p.jsonl')
    writeFileSync(path, ['"plain text"', '{"prompt": "a b c", "max_tokens": 9}', '', '{"input_ids": [5, 6]}'].join('\n'))
    const file = readPromptFile(path)
    expect(file.items).toHaveLength(3)
    const items = makeWorkload({ ...spec, file }, { kind: 'ids', vocab: 50 }, 30)
    expect(items.some((i) => 'prompt' in i.input && i.input.prompt === 'a b c' && i.maxTokens === 9)).toBe(true)
    expect(items.some((i) => 'input_ids' in i.input)).toBe(true)
    writeFileSync(path, '{"prompt": "x", "input_ids": [1]}\n')
    expect(() => readPromptFile(path)).toThrow(/p\.jsonl:1: expected/)
  })
})
