import { describe, expect, it } from 'vitest'
import type { CompletionRequest } from '../../src/contract/completions.js'
import type { HealthBody } from '../../src/contract/health.js'
import type { NodeClient, NodeHealth, NodeReply } from '../../src/facade/node-client.js'
import { NodeRouter } from '../../src/facade/router.js'

const health = (over: Partial<HealthBody> = {}): HealthBody => ({
  status: 'ready',
  models: ['m'],
  provider: 'cpu',
  workers: { total: 1, ready: 1 },
  running: 0,
  waiting: 0,
  capacity: 10,
  ...over,
})

/** A NodeClient whose answers the test sets per node URL. */
class ScriptedClient implements NodeClient {
  healths = new Map<string, NodeHealth>()
  replies = new Map<string, NodeReply[]>()
  calls: string[] = []
  async health(url: string): Promise<NodeHealth> {
    return this.healths.get(url) ?? { status: 0, body: null, error: 'ECONNREFUSED' }
  }
  async complete(url: string, body: CompletionRequest): Promise<NodeReply> {
    this.calls.push(url)
    return this.replies.get(url)?.shift() ?? { kind: 'json', body: { id: 'x', model: body.model, text: 'ok', finish_reason: 'stop', usage: { prompt_tokens: 1, completion_tokens: 1 }, timings: { queue_ms: 0, ttft_ms: 0, total_ms: 0 } } }
  }
  async close(): Promise<void> {}
}

const req: CompletionRequest = { model: 'm', messages: [{ role: 'user', content: 'x' }] }
const signal = new AbortController().signal

async function setup(nodes: Record<string, NodeHealth>) {
  const client = new ScriptedClient()
  for (const [url, h] of Object.entries(nodes)) client.healths.set(url, h)
  const router = new NodeRouter(Object.keys(nodes), client, { intervalMs: 1000 })
  await router.refresh()
  return { client, router }
}

describe('NodeRouter', () => {
  it('sends work to the ready node with the most free capacity, counting its own requests in flight', async () => {
    const { router } = await setup({
      a: { status: 200, body: health({ capacity: 3 }) },
      b: { status: 200, body: health({ capacity: 5 }) },
      c: { status: 503, body: health({ status: 'loading', capacity: 50 }) },
    })
    const picks: string[] = []
    const held = []
    for (let i = 0; i < 4; i++) {
      const d = await router.dispatch(req, signal)
      picks.push(d.node.url)
      held.push(d)
    }
    // b (5 free) takes two, then both have 3 free and alternate.
    expect(picks.slice(0, 2)).toEqual(['b', 'b'])
    expect(picks.slice(2).sort()).toEqual(['a', 'b'])
    for (const d of held) d.release()
    expect(router.nodes.map((n) => n.inflight)).toEqual([0, 0, 0])
  })

  it('only picks nodes serving the model', async () => {
    const { router } = await setup({ a: { status: 200, body: health({ models: ['x'] }) }, b: { status: 200, body: health({ models: ['m'], capacity: 1 }) } })
    expect(router.pick('m', new Set())?.url).toBe('b')
    expect(router.pick('y', new Set())).toBeNull()
    expect(router.knowsModel('x')).toBe(true)
    expect(router.knowsModel('y')).toBe(false)
  })

  it('takes an unhealthy or unreachable node out and puts it back once ready', async () => {
    const { client, router } = await setup({ a: { status: 200, body: health() } })
    expect(router.readyModels().map((m) => m.id)).toEqual(['m'])
    client.healths.set('a', { status: 503, body: health({ status: 'unhealthy' }) })
    await router.refresh()
    expect(router.pick('m', new Set())).toBeNull()
    expect(router.readyModels()).toEqual([])
    client.healths.set('a', { status: 0, body: null, error: 'ECONNREFUSED' })
    await router.refresh()
    expect(router.nodes[0]).toMatchObject({ status: 'unreachable', lastError: 'ECONNREFUSED' })
    expect(router.knowsModel('m')).toBeNull() // nobody to ask
    client.healths.set('a', { status: 200, body: health() })
    await router.refresh()
    expect(router.pick('m', new Set())?.url).toBe('a')
  })

  it('a node answering 200 without a health body is unhealthy', async () => {
    const { router } = await setup({ a: { status: 200, body: null } })
    expect(router.nodes[0]!.status).toBe('unhealthy')
  })

  it('shares one poll round between concurrent refreshes', async () => {
    const { client, router } = await setup({ a: { status: 200, body: health() } })
    let polls = 0
    const orig = client.health.bind(client)
    client.health = async (url: string) => {
      polls++
      return orig(url)
    }
    await Promise.all([router.refresh(), router.refresh(), router.refresh()])
    expect(polls).toBe(1)
  })

  it('retries a 500 once on another node, and an unreachable node is marked down and skipped', async () => {
    const { client, router } = await setup({ a: { status: 200, body: health({ capacity: 9 }) }, b: { status: 200, body: health({ capacity: 1 }) } })
    client.replies.set('a', [{ kind: 'error', status: 500, message: 'boom' }])
    expect((await router.dispatch(req, signal)).node.url).toBe('b')
    expect(client.calls).toEqual(['a', 'b'])
    client.calls = []
    client.replies.set('a', [{ kind: 'unreachable', message: 'ECONNREFUSED' }])
    expect((await router.dispatch(req, signal)).node.url).toBe('b')
    expect(router.nodes[0]!.status).toBe('unreachable')
    expect(router.pick('m', new Set())?.url).toBe('b')
  })

  it('after a 503, prefers other nodes until the next poll', async () => {
    const { client, router } = await setup({ a: { status: 200, body: health({ capacity: 9 }) }, b: { status: 200, body: health({ capacity: 5 }) } })
    client.replies.set('a', [{ kind: 'error', status: 503, message: 'queue full', retryAfterS: 2 }])
    expect((await router.dispatch(req, signal)).node.url).toBe('b')
    expect(router.pick('m', new Set())?.url).toBe('b')
    await router.refresh()
    expect(router.pick('m', new Set())?.url).toBe('a')
  })

  it('passes a 4xx through with its status and message, without retrying', async () => {
    const { client, router } = await setup({ a: { status: 200, body: health() }, b: { status: 200, body: health() } })
    client.replies.set('a', [{ kind: 'error', status: 422, message: 'too long' }])
    client.replies.set('b', [{ kind: 'error', status: 422, message: 'too long' }])
    await expect(router.dispatch(req, signal)).rejects.toMatchObject({ code: 'invalid_value', message: 'too long' })
    expect(client.calls).toHaveLength(1)
  })
})
