// GroupCommit: what the PostgreSQL store's key lookups and usage writes rely on, without a server.
import { describe, expect, it } from 'vitest'
import { fulfilled, GroupCommit, rejected } from '../../src/store/group-commit.js'

/** A run that doubles each number, fails odd ones alone, and records the batches it got; it answers when released. */
function doubling(maxBatch: number) {
  const batches: number[][] = []
  const gates: (() => void)[] = []
  const g = new GroupCommit(async (items: readonly number[]) => {
    batches.push([...items])
    await new Promise<void>((r) => gates.push(r))
    if (items.includes(-1)) throw new Error('statement failed')
    return items.map((n) => (n % 2 ? rejected(new Error(`odd ${n}`)) : fulfilled(n * 2)))
  }, maxBatch)
  const release = async () => {
    while (gates.length === 0) await new Promise((r) => setImmediate(r))
    gates.shift()!()
  }
  return { g, batches, release }
}

describe('GroupCommit', () => {
  it('sends a lone item at once and the items that come meanwhile together in the next batch, each its own outcome', async () => {
    const { g, batches, release } = doubling(3)
    const first = g.push(2)
    const rest = Promise.allSettled([4, 5, 6, 8, 10].map((n) => g.push(n)))
    await release()
    await release()
    await release()
    expect(await first).toBe(4)
    expect(await rest).toEqual([
      { status: 'fulfilled', value: 8 },
      { status: 'rejected', reason: new Error('odd 5') },
      { status: 'fulfilled', value: 12 },
      { status: 'fulfilled', value: 16 },
      { status: 'fulfilled', value: 20 },
    ])
    expect(batches).toEqual([[2], [4, 5, 6], [8, 10]])
    await g.idle()
    // Idle again: the next item goes out at once.
    const later = g.push(12)
    await release()
    expect(await later).toBe(24)
    expect(batches.at(-1)).toEqual([12])
  })

  it('fails every item of a batch whose run threw, and goes on with the next batch', async () => {
    const { g, release } = doubling(8)
    const a = g.push(2)
    const failed = Promise.allSettled([4, -1].map((n) => g.push(n)))
    await release()
    await release()
    expect(await a).toBe(4)
    expect(await failed).toEqual([
      { status: 'rejected', reason: new Error('statement failed') },
      { status: 'rejected', reason: new Error('statement failed') },
    ])
    const next = g.push(6)
    await release()
    expect(await next).toBe(12)
  })

  it('fails an item its run gave no outcome for', async () => {
    const g = new GroupCommit(async (items: readonly number[]) => items.slice(1).map(fulfilled), 4)
    const first = Promise.allSettled([g.push(1)])
    const both = Promise.allSettled([g.push(2), g.push(3)])
    expect((await first)[0]).toMatchObject({ status: 'rejected', reason: { message: expect.stringMatching(/no outcome/) } })
    expect((await both).map((r) => r.status)).toEqual(['fulfilled', 'rejected'])
  })
})
