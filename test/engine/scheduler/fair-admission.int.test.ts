// Issue #32, part 6: the batcher admits waiting sequences tenant by tenant in turn, so one tenant's burst waits behind
// its own requests. One running slot makes the order of admission the order of completion.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Engine } from '../../../src/engine/engine.js'
import type { SeqEvent } from '../../../src/engine/types.js'
import { tinyPlainModelDir } from '../../helpers/fixtures.js'

describe('fair admission across tenants', () => {
  let engine: Engine
  beforeAll(async () => {
    engine = await Engine.load({ modelDir: tinyPlainModelDir(), maxRunning: 1 })
  })
  afterAll(() => engine.close())

  /** Submits every request in one go (before the step loop runs again) and returns their names in order of finishing. */
  async function finishOrder(reqs: Array<{ name: string; tenant?: string }>): Promise<string[]> {
    const order: string[] = []
    await Promise.all(
      reqs.map(
        ({ name, tenant }, i) =>
          new Promise<void>((resolve) => {
            // Distinct prompts: none waits for another's prefix to be cached.
            engine.submit({ model: engine.model.id, request_id: name, tenant, input_ids: [1 + i, 2 + i, 3 + i], max_tokens: 2, temperature: 0, ignore_eos: true }, (e: SeqEvent) => {
              if (e.type === 'error') throw new Error(`${name}: ${e.error.message}`)
              if (e.type === 'done') {
                order.push(name)
                resolve()
              }
            })
          }),
      ),
    )
    return order
  }

  it("takes one tenant's burst in turn with the others, not all of it first", async () => {
    const order = await finishOrder([
      { name: 'a1', tenant: 'a' },
      { name: 'a2', tenant: 'a' },
      { name: 'a3', tenant: 'a' },
      { name: 'a4', tenant: 'a' },
      { name: 'b1', tenant: 'b' },
      { name: 'c1', tenant: 'c' },
      { name: 'b2', tenant: 'b' },
    ])
    expect(order).toEqual(['a1', 'b1', 'c1', 'a2', 'b2', 'a3', 'a4'])
  })

  it('is first come first served for requests without a tenant', async () => {
    expect(await finishOrder([{ name: 'x1' }, { name: 'x2' }, { name: 'x3' }])).toEqual(['x1', 'x2', 'x3'])
  })
})
