// The grammar thread (grammar.ts, grammar-thread.ts) on the tiny default model's vocabulary: schemas past a bound are
// refused before anything compiles; a compile past its time limit is refused and its thread replaced while another
// request's matcher goes on where it was (rebuilt from its grammar and accepted tokens); a heap over its bound
// replaces the thread with nobody failing; and an engine serves a plain request while a slow grammar compiles.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { Grammars, type TokenMask } from '../../../src/engine/generation/grammar.js'
import { checkGrammarBounds, GRAMMAR_BOUNDS } from '../../../src/engine/generation/grammar-bounds.js'
import { TextTokenizer } from '../../../src/engine/tokenizer/tokenizer.js'
import { Engine } from '../../../src/engine/engine.js'
import { OnnxdError } from '../../../src/shared/errors.js'
import type { StructuredOutput } from '../../../src/shared/sampling.js'
import type { SeqEvent } from '../../../src/engine/types.js'
import { tinyPlainModelDir } from '../../helpers/fixtures.js'

const dir = tinyPlainModelDir()
const tok = new TextTokenizer(JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')) as object, JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>, null)
const EOS = 2
const vocabulary = (): ReturnType<TextTokenizer['vocabulary']> => tok.vocabulary(tok.vocabSize)

const PET: StructuredOutput = {
  type: 'json_schema',
  schema: { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 0, maximum: 30 }, tags: { type: 'array', items: { enum: ['cat', 'dog'] }, maxItems: 3 } }, required: ['name', 'age', 'tags'] },
}

/**
 * An object of `n` optional bounded integer properties: compiles in about a second at 256 on a 2-core host (each
 * range is its own expression; unbounded integers share one rule and compile several times faster).
 */
const wide = (n: number, prefix = 'p'): StructuredOutput => ({
  type: 'json_schema',
  schema: { type: 'object', properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`${prefix}${i}`, { type: 'integer', minimum: -1000, maximum: 1000 }])) },
})

/** Walks `text` on `m` token by token: the masks seen (as bit counts) and whether the walk stayed on the grammar. */
async function walk(m: TokenMask, text: string): Promise<{ allowed: number[]; ok: boolean }> {
  const allowed: number[] = []
  for (const id of tok.encode(text, false)) {
    await m.next()
    allowed.push(m.bits.reduce((n, w) => n + popcount(w), 0))
    if (!m.accept(id)) return { allowed, ok: false }
  }
  return { allowed, ok: true }
}

const popcount = (w: number): number => {
  let n = 0
  for (let x = w >>> 0; x; x &= x - 1) n++
  return n
}

const refusal = async (p: Promise<unknown>): Promise<OnnxdError> => {
  try {
    await p
  } catch (e) {
    if (e instanceof OnnxdError) return e
    throw e
  }
  throw new Error('expected a refusal')
}

describe('schema bounds', () => {
  it('refuses, naming the bound, what would compile for seconds or hold hundreds of MB', () => {
    const props = (n: number): object => ({ type: 'object', properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: 'integer' }])) })
    const cases: [object, RegExp][] = [
      [props(3000), /more than 256 object properties/],
      // A record over 300 listed names is 300 optional properties.
      [{ type: 'object', propertyNames: { enum: Array.from({ length: 300 }, (_, i) => `k${i}`) }, additionalProperties: { type: 'boolean' } }, /more than 256 object properties/],
      [{ type: 'object', properties: { a: { enum: Array.from({ length: 12_000 }, (_, i) => `value-${i}-${'x'.repeat(40)}`) } } }, /more than 1024 enum values/],
      [{ type: 'object', properties: { a: { type: 'string', description: 'x'.repeat(70_000) } } }, /bytes of JSON schema, over 65536/],
      [Array.from({ length: 20 }).reduce<object>((s) => ({ type: 'array', items: s }), { type: 'integer' }), /nested more than 16 levels/],
    ]
    for (const [schema, says] of cases) {
      const e = (() => {
        try {
          checkGrammarBounds([schema], 'response_format.json_schema.schema')
        } catch (err) {
          return err as OnnxdError
        }
        return null
      })()
      expect(e?.code).toBe('invalid_value')
      expect(e?.message).toMatch(says)
      expect(e?.message).toContain('`response_format.json_schema.schema`')
    }
    expect(() => checkGrammarBounds(Array.from({ length: GRAMMAR_BOUNDS.tools + 1 }, () => ({})), 'tools[].function.parameters')).toThrow(/more than 128 functions/)
    expect(() => checkGrammarBounds([props(GRAMMAR_BOUNDS.properties)], 'response_format.json_schema.schema')).not.toThrow()
  })

  it('a refused schema never reaches the thread: the answer comes before any compile', async () => {
    const g = new Grammars(vocabulary, [EOS])
    const e = await refusal(g.matcher(wide(3000)))
    expect(e.message).toMatch(/more than 256 object properties/)
    expect(g.replacements).toBe(0)
    await g.close()
  })
})

describe('the grammar thread', () => {
  it('a compile past its time limit is refused and the thread replaced; a live matcher goes on where it was', async () => {
    const text = '{"name":"Rex","age":3,"tags":["dog"]}'
    const half = text.slice(0, 12)
    const alone = new Grammars(vocabulary, [EOS])
    const reference = await walk(await alone.matcher(PET), text)
    await alone.close()
    expect(reference.ok).toBe(true)

    const g = new Grammars(vocabulary, [EOS], { compileMs: 150, heapBytes: 512 * 1024 ** 2, cached: 32 })
    const m = await g.matcher(PET)
    const first = await walk(m, half)
    // 256 properties compile for about a second: past 150 ms the thread is replaced.
    const e = await refusal(g.matcher(wide(256)))
    expect(e.code).toBe('invalid_value')
    expect(e.message).toMatch(/took more than 150 ms to compile/)
    expect(g.replacements).toBe(1)
    // The live matcher was rebuilt on the new thread: its masks go on exactly as an undisturbed walk's.
    const rest = await walk(m, text.slice(half.length))
    expect([...first.allowed, ...rest.allowed]).toEqual(reference.allowed)
    await m.next()
    expect(m.terminated).toBe(true)
    // And the new thread compiles a small schema.
    expect((await walk(await g.matcher(PET), text)).ok).toBe(true)
    await g.close()
  }, 60_000)

  it('a heap past its bound replaces the thread with nobody failing', async () => {
    const text = '{"name":"Tom","age":12,"tags":["cat","cat"]}'
    const g = new Grammars(vocabulary, [EOS], { compileMs: 10_000, heapBytes: 1, cached: 32 })
    const a = await g.matcher(PET)
    const first = await walk(a, text.slice(0, 9))
    const b = await g.matcher(wide(8, 'q'))
    expect(g.replacements).toBeGreaterThanOrEqual(1)
    const rest = await walk(a, text.slice(9))
    expect(first.ok && rest.ok).toBe(true)
    await a.next()
    expect(a.terminated).toBe(true)
    expect((await walk(b, '{"q0":1,"q7":-2}')).ok).toBe(true)
    await g.close()
  }, 60_000)
})

describe('an engine while a slow grammar compiles', () => {
  it('a plain request is served before the slow schema has compiled, with the tokens it has alone', async () => {
    const engine = await Engine.load({ modelDir: dir, runtime: 'js' })
    const run = (req: Record<string, unknown>, log: string[], name: string): Promise<SeqEvent[]> =>
      new Promise((resolve) => {
        const events: SeqEvent[] = []
        engine.submit({ model: 'onnxd-tiny', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8, temperature: 0, ...req } as never, (ev) => {
          events.push(ev)
          log.push(`${name}:${ev.type}`)
          if (ev.type === 'done' || ev.type === 'error') resolve(events)
        })
      })
    const text = (evs: SeqEvent[]): string => evs.map((e) => ('text' in e ? e.text : '')).join('')
    const aloneLog: string[] = []
    const alone = text(await run({}, aloneLog, 'plain'))
    const log: string[] = []
    const slow = run({ response_format: { type: 'json_schema', json_schema: { name: 'wide', schema: (wide(256) as { schema: object }).schema } } }, log, 'slow')
    const plain = await run({}, log, 'plain')
    expect(text(plain)).toBe(alone)
    // The schema's compile (about a second) ran on the grammar thread: the plain request finished before it was even
    // accepted into the batch.
    expect(log.indexOf('plain:done')).toBeLessThan(log.indexOf('slow:accepted') === -1 ? Infinity : log.indexOf('slow:accepted'))
    const s = await slow
    expect(s.at(-1)?.type).toBe('done')

    // Again with a constrained request decoding when the compile starts: its masks wait behind the compile, so it
    // sits the steps out; a plain request that comes meanwhile is admitted and served all the same.
    const log2: string[] = []
    const digits = { type: 'json_schema', json_schema: { name: 'digits', schema: { type: 'array', items: { type: 'integer', minimum: 0, maximum: 9 }, minItems: 80, maxItems: 80 } } }
    let tokens = 0
    const long = new Promise<SeqEvent[]>((resolve) => {
      const events: SeqEvent[] = []
      engine.submit({ model: 'onnxd-tiny', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 400, temperature: 0, response_format: digits } as never, (ev) => {
        events.push(ev)
        if (ev.type === 'token' && ++tokens === 3) {
          void run({ response_format: { type: 'json_schema', json_schema: { name: 'wide2', schema: (wide(256, 'w') as { schema: object }).schema } } }, log2, 'slow')
          setTimeout(() => void run({}, log2, 'plain').then((evs) => expect(text(evs)).toBe(alone)), 100)
        }
        if (ev.type === 'done' || ev.type === 'error') resolve(events)
      })
    })
    const l = await long
    expect(l.at(-1)?.type).toBe('done')
    expect(JSON.parse(text(l))).toHaveLength(80)
    await new Promise((r) => setTimeout(r, 200))
    expect(log2).toContain('plain:done')
    expect(log2.indexOf('plain:done')).toBeLessThan(log2.indexOf('slow:accepted') === -1 ? Infinity : log2.indexOf('slow:accepted'))
    await engine.close()
  }, 60_000)
})
