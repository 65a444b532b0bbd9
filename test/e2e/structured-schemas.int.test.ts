// End to end, issue #34 item 4: the JSON Schemas TypeScript clients send for structured outputs, written from real
// zod 4 schemas by each writer (zod's own z.toJSONSchema, the openai client's zodResponseFormat, the AI SDK's
// zodSchema, LangChain's toJsonSchema), sent as response_format through the real facade and node on the tiny model
// (random weights: only the grammar makes its answers JSON). Each distinct schema gets 50 seeded samples at
// temperature 1; every one must end by itself, parse, validate under the schema as sent (ajv with ajv-formats) and
// under the zod schema it came from (what the AI SDK checks).
import { toJsonSchema } from '@langchain/core/utils/json_schema'
import { zodSchema } from 'ai'
import { Ajv, type ValidateFunction } from 'ajv'
import { Ajv2020 } from 'ajv/dist/2020.js'
import addFormatsModule from 'ajv-formats'
import type OpenAI from 'openai'
import { zodResponseFormat } from 'openai/helpers/zod'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { MODEL, startStack, type Stack } from './stack.js'

// ajv-formats is CommonJS: its function is the default export's `default` under Node's ESM.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as (ajv: Ajv | Ajv2020) => unknown

/** One zod schema per feature of item 4 (strings bounded: a random model left free writes until max_tokens). */
const ZOD: Record<string, z.ZodObject> = {
  numbers: z.object({ x: z.number(), count: z.int(), big: z.number().int(), price: z.number().min(0.5).max(99.5), ratio: z.number().gt(0).lt(1), temp: z.number().gte(-40.5) }),
  'discriminated union': z.object({
    shape: z.discriminatedUnion('kind', [z.object({ kind: z.literal('circle'), r: z.number().positive().max(10) }), z.object({ kind: z.literal('rect'), w: z.int().min(1).max(9), h: z.int().min(1).max(9) })]),
  }),
  record: z.object({ scores: z.record(z.string().max(8), z.int().min(0).max(100)) }),
  'enum-keyed record': z.object({ flags: z.record(z.enum(['read', 'write']), z.boolean()) }),
  formats: z.object({ email: z.email().max(40), id: z.uuid(), day: z.iso.date(), at: z.iso.datetime(), site: z.url().max(60) }),
  pattern: z.object({ code: z.string().regex(/^[A-Z]{3}-\d{2}$/), slug: z.string().regex(/^[a-z]+(-[a-z]+)*$/).max(20) }),
}

type Writer = (s: z.ZodObject) => Promise<Record<string, unknown>>
const WRITERS: Record<string, Writer> = {
  'zod z.toJSONSchema': async (s) => z.toJSONSchema(s) as Record<string, unknown>,
  'openai zodResponseFormat': async (s) => zodResponseFormat(s, 'answer').json_schema.schema!,
  'AI SDK zodSchema': async (s) => (await zodSchema(s).jsonSchema) as Record<string, unknown>,
  'LangChain toJsonSchema': async (s) => toJsonSchema(s) as Record<string, unknown>,
}

const SAMPLES = 50
const PER_REQUEST = 10

interface Row {
  feature: string
  writers: string[]
  schema: Record<string, unknown>
}

/** The distinct schemas the writers produce (several write the same text), and the pairs a writer refuses. */
async function table(): Promise<{ rows: Row[]; refused: string[] }> {
  const rows = new Map<string, Row>()
  const refused: string[] = []
  for (const [feature, s] of Object.entries(ZOD))
    for (const [writer, write] of Object.entries(WRITERS)) {
      let schema: Record<string, unknown>
      try {
        schema = await write(s)
      } catch {
        // zodResponseFormat refuses records (strict mode wants additionalProperties: false): nothing is sent.
        refused.push(`${writer}: ${feature}`)
        continue
      }
      const key = `${feature} ${JSON.stringify(schema)}`
      const row = rows.get(key) ?? { feature, writers: [], schema }
      row.writers.push(writer)
      rows.set(key, row)
    }
  return { rows: [...rows.values()], refused }
}

function validator(schema: Record<string, unknown>): ValidateFunction {
  const draft2020 = String(schema.$schema ?? '').includes('2020-12')
  const ajv = draft2020 ? new Ajv2020({ strict: false }) : new Ajv({ strict: false })
  addFormats(ajv)
  return ajv.compile(schema)
}

describe('structured outputs for the schemas TypeScript clients send (tiny model, 50 samples each at temperature 1)', () => {
  let s: Stack
  let client: OpenAI
  let rows: Row[] = []
  let refused: string[] = []
  beforeAll(async () => {
    s = await startStack()
    client = s.client()
    ;({ rows, refused } = await table())
  })
  afterAll(() => s?.close())

  const sample = async (schema: Record<string, unknown>, seed: number): Promise<{ text: string; finish: string }[]> => {
    const r = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Answer as JSON.' }],
      max_tokens: 500,
      temperature: 1,
      seed,
      n: PER_REQUEST,
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } },
    })
    return r.choices.map((c) => ({ text: c.message.content ?? '', finish: c.finish_reason }))
  }

  it('every writer covers every feature but the records zodResponseFormat refuses to write', () => {
    expect(refused).toEqual(['openai zodResponseFormat: record', 'openai zodResponseFormat: enum-keyed record'])
    expect(new Set(rows.map((r) => r.feature))).toEqual(new Set(Object.keys(ZOD)))
    // The writers differ (JSON Schema drafts, oneOf or anyOf): more than one schema per feature somewhere.
    expect(rows.length).toBeGreaterThan(Object.keys(ZOD).length)
  })

  it('all samples of every schema end, parse, and validate under the schema sent and the zod schema', async () => {
    const bad: string[] = []
    let total = 0
    // One row at a time, its requests at once (50 sequences, under the key's 64): the node batches them.
    const queue = [...rows]
    const worker = async (): Promise<void> => {
      for (let row = queue.shift(); row; row = queue.shift()) {
        const validate = validator(row.schema)
        const zod = ZOD[row.feature]!
        const batches = await Promise.all(Array.from({ length: SAMPLES / PER_REQUEST }, (_, b) => sample(row!.schema, 7000 + b * PER_REQUEST)))
        for (const { text, finish } of batches.flat()) {
          total++
          const where = `${row.feature} (${row.writers.join(', ')}): ${text}`
          if (finish !== 'stop') {
            bad.push(`${where}: finish_reason ${finish}`)
            continue
          }
          let value: unknown
          try {
            value = JSON.parse(text)
          } catch {
            bad.push(`${where}: does not parse`)
            continue
          }
          if (!validate(value)) bad.push(`${where}: ${JSON.stringify(validate.errors)}`)
          const parsed = zod.safeParse(value)
          if (!parsed.success) bad.push(`${where}: zod says ${parsed.error.message.slice(0, 300)}`)
        }
      }
    }
    await worker()
    expect(bad).toEqual([])
    expect(total).toBe(rows.length * SAMPLES)
  }, 900_000)

  it("issue #34's reproduction: an unbounded number parses to a finite double, an unbounded integer to an exact one", async () => {
    const schema = { type: 'object', properties: { x: { type: 'number' }, i: { type: 'integer' } }, required: ['x', 'i'], additionalProperties: false }
    const out = (await Promise.all([0, 1, 2, 3, 4].map((b) => sample(schema, 100 + b * PER_REQUEST)))).flat()
    expect(out).toHaveLength(SAMPLES)
    for (const { text } of out) {
      const v = JSON.parse(text) as { x: number; i: number }
      expect(Number.isFinite(v.x), text).toBe(true)
      expect(Number.isSafeInteger(v.i), text).toBe(true)
    }
  })
})
