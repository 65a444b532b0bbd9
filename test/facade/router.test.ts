import { describe, expect, it } from 'vitest'
import type { CompletionRequest } from '../../src/contract/completions.js'
import type { HealthBody } from '../../src/contract/health.js'
import type { NodeClient, NodeHealth, NodeReply, TokenizeReply } from '../../src/facade/node-client.js'
import { NodeRouter, type RouterOptions } from '../../src/facade/router.js'
import { affinityKey } from '../../src/facade/affinity.js'
import { parseNodeSource } from '../../src/facade/node-sources.js'

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
  /** Tokenize answers per node URL (default: a count of 7). */
  tokenizeReplies = new Map<string, TokenizeReply[]>()
  async tokenize(url: string, body: { model: string }): Promise<TokenizeReply> {
    this.calls.push(url)
    return this.tokenizeReplies.get(url)?.shift() ?? { kind: 'json', body: { model: body.model, prompt_tokens: 7 } }
  }
  async close(): Promise<void> {}
}

const req: CompletionRequest = { model: 'm', messages: [{ role: 'user', content: 'x' }] }
const signal = new AbortController().signal

async function setup(nodes: Record<string, NodeHealth>, opts: Partial<RouterOptions> = {}) {
  const client = new ScriptedClient()
  for (const [url, h] of Object.entries(nodes)) client.healths.set(url, h)
  const router = new NodeRouter(Object.keys(nodes), client, { intervalMs: 1000, ...opts })
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

  it('counts a prompt on a node serving its model, with the failover of a completion, and holds no slot after', async () => {
    const { client, router } = await setup({ a: { status: 200, body: health({ capacity: 9 }) }, b: { status: 200, body: health({ capacity: 5 }) }, c: { status: 200, body: health({ models: ['other'], capacity: 50 }) } })
    client.tokenizeReplies.set('a', [{ kind: 'error', status: 503, message: 'draining', retryAfterS: 1 }])
    client.tokenizeReplies.set('b', [{ kind: 'json', body: { model: 'm', prompt_tokens: 12 } }])
    expect(await router.countTokens({ model: 'm', prompt: 'x' }, signal)).toBe(12)
    expect(client.calls).toEqual(['a', 'b'])
    expect(router.nodes.map((n) => n.inflight)).toEqual([0, 0, 0])
    client.tokenizeReplies.set('b', [{ kind: 'error', status: 422, message: 'bad template' }])
    await router.refresh()
    client.calls = []
    client.tokenizeReplies.set('a', [{ kind: 'unreachable', message: 'ECONNREFUSED' }])
    await expect(router.countTokens({ model: 'm', prompt: 'x' }, signal)).rejects.toMatchObject({ code: 'invalid_value', message: 'bad template' })
    expect(client.calls).toEqual(['a', 'b'])
    await expect(router.countTokens({ model: 'nope', prompt: 'x' }, signal)).rejects.toMatchObject({ code: 'no_healthy_node' })
  })
})

const ready = (over: Partial<HealthBody> = {}): NodeHealth => ({ status: 200, body: health(over) })
/** A chat request whose system prompt (shared by a group) is long and whose user turn is its own. */
const chat = (system: string, user: string): CompletionRequest => ({
  model: 'm',
  messages: [
    { role: 'system', content: system },
    { role: 'user', content: user },
  ],
})
const SYSTEM = (i: number): string => `You are assistant number ${i}. ${'Answer briefly and precisely. '.repeat(60)}`

describe('prefix affinity', () => {
  it('keys a request by the first N characters of its prompt as the template meets them, and short prompts not at all', () => {
    const a = affinityKey(chat(SYSTEM(1), 'hello'), 1024)
    expect(a).not.toBeNull()
    expect(affinityKey(chat(SYSTEM(1), 'something else entirely'), 1024)).toEqual(a)
    expect(affinityKey(chat(SYSTEM(2), 'hello'), 1024)).not.toEqual(a)
    expect(affinityKey({ ...chat(SYSTEM(1), 'hello'), model: 'other' }, 1024)).not.toEqual(a)
    // Tools come first in the rendered prompt, so they are part of the prefix.
    const tools = [{ type: 'function' as const, function: { name: 'f', parameters: { type: 'object' } } }]
    expect(affinityKey({ ...chat(SYSTEM(1), 'hello'), tools }, 1024)).not.toEqual(a)
    expect(affinityKey(chat('short', 'hello'), 1024)).toBeNull()
    expect(affinityKey(chat(SYSTEM(1), 'hello'), 0)).toBeNull()
    const p = 'x'.repeat(1024)
    expect(affinityKey({ model: 'm', prompt: p + 'a' }, 1024)).toEqual(affinityKey({ model: 'm', prompt: p + 'b' }, 1024))
    expect(affinityKey({ model: 'm', prompt: p.slice(1) }, 1024)).toBeNull()
    expect(affinityKey({ model: 'm', input_ids: Array.from({ length: 256 }, (_, i) => i) }, 1024)).not.toBeNull()
    expect(affinityKey({ model: 'm', input_ids: [1, 2, 3] }, 1024)).toBeNull()
  })

  it('sends requests sharing a prefix to one node while it has free slots, and spreads different prefixes', async () => {
    const nodes = { a: ready({ capacity: 100, free_slots: 50 }), b: ready({ capacity: 100, free_slots: 50 }), c: ready({ capacity: 100, free_slots: 50 }) }
    const { router } = await setup(nodes, { affinityPrefixChars: 1024 })
    const homes = new Map<number, string>()
    for (let g = 0; g < 12; g++) {
      const picked = new Set<string>()
      for (let i = 0; i < 4; i++) {
        const d = await router.dispatch(chat(SYSTEM(g), `question ${i}`), signal)
        picked.add(d.node.url)
        d.release()
      }
      expect(picked.size).toBe(1) // one home per prefix
      homes.set(g, [...picked][0]!)
    }
    expect(new Set(homes.values()).size).toBeGreaterThan(1) // and the prefixes are spread over the nodes
    expect(router.snapshot().reduce((s, n) => s + n.affinity_routed, 0)).toBe(48)

    // A second facade with the nodes listed in another order picks the same homes.
    const other = await setup({ c: nodes.c, a: nodes.a, b: nodes.b }, { affinityPrefixChars: 1024 })
    for (const [g, url] of homes) expect((await other.router.dispatch(chat(SYSTEM(g), 'again'), signal)).node.url).toBe(url)
  })

  it('falls back to the least-loaded node once the home has no free slot, and back home when all are busy', async () => {
    const { router } = await setup({ a: ready({ capacity: 40, free_slots: 2 }), b: ready({ capacity: 40, free_slots: 2 }) }, { affinityPrefixChars: 1024 })
    const held = []
    const urls: string[] = []
    for (let i = 0; i < 6; i++) {
      const d = await router.dispatch(chat(SYSTEM(7), `q${i}`), signal)
      held.push(d)
      urls.push(d.node.url)
    }
    const home = urls[0]!
    const away = home === 'a' ? 'b' : 'a'
    // Two fit at home; the next two go where slots are free; with every slot taken, home again (it queues where its prefix is).
    expect(urls).toEqual([home, home, away, away, home, home])
    for (const d of held) d.release()
    // Without affinity the same requests alternate by load.
    const plain = await setup({ a: ready({ capacity: 40, free_slots: 2 }), b: ready({ capacity: 40, free_slots: 2 }) }, { affinityPrefixChars: 0 })
    const spread = new Set<string>()
    for (let i = 0; i < 2; i++) spread.add((await plain.router.dispatch(chat(SYSTEM(7), `q${i}`), signal)).node.url)
    expect(spread.size).toBe(2)
  })

  it("moves a prefix off a failed home to the key's next node, and only the keys of a node that leaves", async () => {
    const { client, router } = await setup({ a: ready(), b: ready(), c: ready() }, { affinityPrefixChars: 1024 })
    const homes = new Map<number, string>()
    for (let g = 0; g < 30; g++) homes.set(g, (await router.pick('m', new Set(), affinityKey(chat(SYSTEM(g), 'x'), 1024)))!.url)
    const gone = homes.get(0)!
    client.healths.set(gone, { status: 0, body: null, error: 'ECONNREFUSED' })
    await router.refresh()
    for (const [g, url] of homes) {
      const now = router.pick('m', new Set(), affinityKey(chat(SYSTEM(g), 'x'), 1024))!.url
      if (url === gone) expect(now).not.toBe(gone)
      else expect(now).toBe(url) // the others keep their homes
    }
  })
})

describe('nodes from DNS', () => {
  it('resolves dns+ entries to one node per address, re-resolves them, and keeps the last addresses when a lookup fails', async () => {
    let answer: string[] | Error = ['10.0.0.2', '10.0.0.1', 'fd00::5']
    const lookups: string[] = []
    const resolve = async (host: string): Promise<string[]> => {
      lookups.push(host)
      if (answer instanceof Error) throw answer
      return answer
    }
    let t = 0
    const client = new ScriptedClient()
    const router = new NodeRouter(['dns+http://onnxd-node.svc:8081', 'http://static:8081'], client, { intervalMs: 1000, dnsIntervalMs: 5000, resolve, now: () => t })
    for (const url of ['http://10.0.0.1:8081', 'http://10.0.0.2:8081', 'http://[fd00::5]:8081', 'http://static:8081', 'http://10.0.0.3:8081']) {
      client.healths.set(url, ready())
    }
    expect(router.nodes).toEqual([expect.objectContaining({ url: 'http://static:8081' })])
    await router.refresh()
    expect(lookups).toEqual(['onnxd-node.svc'])
    expect(router.nodes.map((n) => n.url)).toEqual(['http://10.0.0.1:8081', 'http://10.0.0.2:8081', 'http://[fd00::5]:8081', 'http://static:8081'])
    expect(router.nodes.every((n) => n.status === 'ready')).toBe(true)

    // Within the interval no lookup; after it, a pod gone and one new: the kept node keeps its state.
    const kept = router.nodes[1]!
    const d = await router.dispatch(req, signal)
    answer = ['10.0.0.2', '10.0.0.3']
    t = 1000
    await router.refresh()
    expect(lookups).toHaveLength(1)
    t = 6000
    await router.refresh()
    expect(router.nodes.map((n) => n.url)).toEqual(['http://10.0.0.2:8081', 'http://10.0.0.3:8081', 'http://static:8081'])
    expect(router.nodes[0]).toBe(kept)
    expect(router.nodes[1]!.status).toBe('ready') // polled in the same round it joined
    d.release() // a request on a node that left finishes normally

    // DNS down: the nodes stay.
    answer = new Error('ENOTFOUND')
    t = 12_000
    await router.refresh()
    expect(lookups).toHaveLength(3)
    expect(router.nodes.map((n) => n.url)).toEqual(['http://10.0.0.2:8081', 'http://10.0.0.3:8081', 'http://static:8081'])
  })

  it('polls the nodes it knows while a slow DNS lookup runs, and the nodes the lookup adds as soon as it answers', async () => {
    let answer: (addresses: string[]) => void = () => {}
    const resolve = (): Promise<string[]> => new Promise((r) => (answer = r))
    const client = new ScriptedClient()
    client.healths.set('http://static:8081', ready())
    client.healths.set('http://10.0.0.1:8081', ready())
    const router = new NodeRouter(['dns+http://onnxd-node.svc:8081', 'http://static:8081'], client, { intervalMs: 1000, resolve })
    const round = router.refresh()
    // The lookup has not answered: the static node is polled and serves already.
    await new Promise((r) => setTimeout(r, 20))
    expect(router.nodes.map((n) => [n.url, n.status])).toEqual([['http://static:8081', 'ready']])
    const d = await router.dispatch(req, signal)
    expect(d.node.url).toBe('http://static:8081')
    d.release()
    answer(['10.0.0.1'])
    await round
    expect(router.nodes.map((n) => [n.url, n.status])).toEqual([
      ['http://10.0.0.1:8081', 'ready'],
      ['http://static:8081', 'ready'],
    ])
  })

  it('reads dns+ entries: default ports, paths, and bracketed IPv6 literals', () => {
    expect(parseNodeSource('dns+http://onnxd-node')).toMatchObject({ kind: 'dns', host: 'onnxd-node', port: '80', path: '' })
    expect(parseNodeSource('dns+https://n.svc/base/')).toMatchObject({ kind: 'dns', scheme: 'https', host: 'n.svc', port: '443', path: '/base' })
    expect(parseNodeSource('dns+http://[::1]:8081')).toMatchObject({ kind: 'dns', host: '::1', port: '8081' })
    expect(parseNodeSource('http://10.0.0.1:8081')).toEqual({ kind: 'url', url: 'http://10.0.0.1:8081' })
  })

  it('resolves a real name through the system resolver', async () => {
    const client = new ScriptedClient()
    const router = new NodeRouter(['dns+http://localhost:9/x/'], client, { intervalMs: 1000 })
    await router.refresh()
    expect(router.nodes.length).toBeGreaterThan(0)
    for (const n of router.nodes) expect(n.url).toMatch(/^http:\/\/(127\.0\.0\.1|\[::1\]):9\/x$/)
  })
})
