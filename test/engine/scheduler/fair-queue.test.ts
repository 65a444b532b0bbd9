// Issue #32, part 6: the batcher's waiting queue takes tenants in turn, so one tenant's burst cannot starve the others.
import { describe, expect, it } from 'vitest'
import { FairQueue } from '../../../src/engine/scheduler/fair-queue.js'

interface Item {
  tenant: string
  name: string
}
const item = (name: string): Item => ({ tenant: name.replace(/\d+$/, ''), name })

function queueOf(...names: string[]): FairQueue<Item> {
  const q = new FairQueue<Item>()
  for (const n of names) q.push(item(n))
  return q
}

function drain(q: FairQueue<Item>): string[] {
  const out: string[] = []
  for (let s = q.shift(); s; s = q.shift()) out.push(s.name)
  return out
}

describe('FairQueue', () => {
  it('takes tenants in turn, each first come first served, whatever order they arrived in', () => {
    // One tenant's burst of 6 arrives before two others' requests.
    const q = queueOf('a1', 'a2', 'a3', 'a4', 'a5', 'a6', 'b1', 'c1', 'b2')
    expect(q.length).toBe(9)
    expect(q.peek()?.name).toBe('a1')
    expect(drain(q)).toEqual(['a1', 'b1', 'c1', 'a2', 'b2', 'a3', 'a4', 'a5', 'a6'])
    expect(q.length).toBe(0)
    expect(q.peek()).toBeUndefined()
  })

  it('is first come first served with one tenant (requests without a tenant share one)', () => {
    expect(drain(queueOf('1', '2', '3'))).toEqual(['1', '2', '3'])
  })

  it('gives a tenant that arrives later its turn after one turn of each tenant waiting, not after their whole queues', () => {
    const q = queueOf('a1', 'a2', 'a3')
    expect(q.shift()?.name).toBe('a1')
    q.push(item('b1'))
    expect(drain(q)).toEqual(['a2', 'b1', 'a3'])
  })

  it('puts back what it gave out first of its tenant, and that tenant next', () => {
    const q = queueOf('a1', 'a2', 'b1', 'b2', 'c1')
    const a1 = q.shift()!
    const b1 = q.shift()!
    const c1 = q.shift()!
    expect([a1.name, b1.name, c1.name]).toEqual(['a1', 'b1', 'c1'])
    // a1 and c1 were not kept: they come back in the order given, before the rest; then turns go on as before.
    q.unshift(a1, c1)
    expect(q.length).toBe(4)
    expect(drain(q)).toEqual(['a1', 'c1', 'b2', 'a2'])
  })

  it('removes items where asked, the others keeping their places', () => {
    const q = queueOf('a1', 'a2', 'b1', 'c1', 'c2')
    const dropped = q.removeWhere((s) => s.name === 'a1' || s.tenant === 'b')
    expect(dropped.map((s) => s.name).sort()).toEqual(['a1', 'b1'])
    expect(q.length).toBe(3)
    expect([...q].map((s) => s.name)).toEqual(['a2', 'c1', 'c2'])
    expect(drain(q)).toEqual(['a2', 'c1', 'c2'])
  })

  it('clears', () => {
    const q = queueOf('a1', 'b1')
    q.clear()
    expect(q.length).toBe(0)
    expect(drain(q)).toEqual([])
  })
})
