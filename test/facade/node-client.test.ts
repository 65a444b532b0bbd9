import { describe, expect, it } from 'vitest'
import { sseData } from '../../src/facade/node-client.js'

async function collect(chunks: (string | Buffer)[]): Promise<string[]> {
  async function* gen() {
    for (const c of chunks) yield c
  }
  const out: string[] = []
  for await (const d of sseData(gen())) out.push(d)
  return out
}

describe('sseData', () => {
  it('splits events across arbitrary chunk boundaries, CRLF included', async () => {
    expect(await collect(['data: {"a"', ':1}\n', '\ndata: [DO', 'NE]\r\n\r\n'])).toEqual(['{"a":1}', '[DONE]'])
  })
  it('joins multi-line data, ignores comments and other fields, and accepts `data:` without a space', async () => {
    expect(await collect([': comment\n\nevent: x\ndata:one\ndata: two\nid: 3\n\n'])).toEqual(['one\ntwo'])
  })
  it('decodes UTF-8 split inside a character', async () => {
    const bytes = Buffer.from('data: "é€"\n\n')
    expect(await collect([bytes.subarray(0, 8), bytes.subarray(8, 10), bytes.subarray(10)])).toEqual(['"é€"'])
  })
})
