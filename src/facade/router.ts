// Routing over worker nodes: keeps the node set (URLs, and DNS names re-resolved periodically), polls each node's
// /health, sends work to a ready node serving the model (the home of the prompt's prefix while it has a free slot,
// else the one with the most free capacity), takes failing nodes out (and back in once healthy), and turns node
// failures into the spec's errors: 503 → another node, else 503; 500 → one immediate retry on another node (or the
// same), then 500; 4xx → passed through. Imports: contract, shared errors, node client, affinity, node sources.
import type { FastifyBaseLogger } from 'fastify'
import type { CompletionRequest } from '../contract/completions.js'
import type { HealthStatus } from '../contract/health.js'
import { clip, OnnxdError } from '../shared/errors.js'
import { codeForStatus } from '../shared/http-errors.js'
import { affinityKey, nodeHash, weight, type Key } from './affinity.js'
import type { TokenizeRequest } from '../contract/tokenize.js'
import type { NodeClient, NodeFailure, NodeHealth, NodeReply } from './node-client.js'
import { addressUrl, parseNodeSource, systemResolve, type NodeSource, type Resolve } from './node-sources.js'

export type NodeStatus = HealthStatus | 'unreachable' | 'unknown'

/** A worker node as this facade sees it: its URL, its last reported health, and the requests sent to it. */
export interface RemoteNode {
  readonly url: string
  status: NodeStatus
  models: string[]
  /** Whether its model has a chat template, as its last health said (null: it did not say). */
  chatTemplate: boolean | null
  /** Free capacity (running slots and queue places) the node reported at its last poll. */
  capacity: number
  /** Of which free running slots (its capacity when the node does not say). */
  freeSlots: number
  /** Requests this facade has in flight on the node now, and at the last poll. */
  inflight: number
  inflightAtPoll: number
  lastError: string | null
  checkedAt: number | null
  /** Requests sent here because their prompt's prefix lives here (the rest went by load). */
  affinityRouted: number
  /** nodeHash(url), for rendezvous hashing. */
  readonly hash: number
}

export type Dispatched = {
  reply: Extract<NodeReply, { kind: 'json' | 'stream' }>
  node: RemoteNode
  /** Call once the reply (stream included) is finished with. */
  release(): void
}

export interface RouterOptions {
  intervalMs: number
  /** How often DNS entries are re-resolved (default 10 s). */
  dnsIntervalMs?: number
  /** Requests whose prompts share their first this-many characters go to one node while it has a free slot; 0 = off. */
  affinityPrefixChars?: number
  resolve?: Resolve
  log?: FastifyBaseLogger
  now?: () => number
}

const isFailure = (r: { kind: string }): r is NodeFailure => r.kind === 'error' || r.kind === 'unreachable'

const newNode = (url: string): RemoteNode => ({
  url,
  status: 'unknown',
  models: [],
  chatTemplate: null,
  capacity: 0,
  freeSlots: 0,
  inflight: 0,
  inflightAtPoll: 0,
  lastError: null,
  checkedAt: null,
  affinityRouted: 0,
  hash: nodeHash(url),
})

export class NodeRouter {
  private current: RemoteNode[] = []
  private readonly sources: NodeSource[]
  /** The addresses each DNS entry last resolved to: kept when a lookup fails, so a DNS outage drops no node. */
  private readonly resolved = new Map<string, string[]>()
  private resolvedAt = -Infinity
  private timer: NodeJS.Timeout | null = null
  private polling: Promise<void> | null = null
  private rr = 0
  /** First time each model was seen on a node, unix seconds: the `created` of /v1/models. */
  private readonly firstSeen = new Map<string, number>()
  private readonly now: () => number

  constructor(
    entries: readonly string[],
    private readonly client: NodeClient,
    private readonly opts: RouterOptions,
  ) {
    this.now = opts.now ?? Date.now
    this.sources = entries.map(parseNodeSource)
    this.setUrls(this.urls(), false)
  }

  /** The nodes now: the listed URLs and the addresses their DNS entries last resolved to. */
  get nodes(): readonly RemoteNode[] {
    return this.current
  }

  private urls(): string[] {
    const urls = this.sources.flatMap((s) => (s.kind === 'url' ? [s.url] : (this.resolved.get(s.entry) ?? []).map((a) => addressUrl(s, a))))
    return [...new Set(urls)]
  }

  /** Keeps the state of nodes still listed, adds new ones (unknown until polled) and drops the rest. */
  private setUrls(urls: string[], log = true): void {
    const byUrl = new Map(this.current.map((n) => [n.url, n]))
    const next = urls.map((u) => byUrl.get(u) ?? newNode(u))
    if (log) {
      const kept = new Set(urls)
      const added = urls.filter((u) => !byUrl.has(u))
      const removed = this.current.filter((n) => !kept.has(n.url)).map((n) => n.url)
      if (added.length > 0 || removed.length > 0) this.opts.log?.info({ added, removed }, 'node set changed')
    }
    this.current = next
  }

  /** Re-resolves the DNS entries when due; a failed lookup keeps that entry's last addresses. */
  private async resolveNames(): Promise<void> {
    const names = this.sources.filter((s): s is Extract<NodeSource, { kind: 'dns' }> => s.kind === 'dns')
    if (names.length === 0 || this.now() - this.resolvedAt < (this.opts.dnsIntervalMs ?? 10_000)) return
    this.resolvedAt = this.now()
    const resolve = this.opts.resolve ?? systemResolve
    await Promise.all(
      names.map(async (s) => {
        try {
          this.resolved.set(s.entry, [...new Set(await resolve(s.host))].sort())
        } catch (e) {
          this.opts.log?.warn({ entry: s.entry, error: (e as Error).message }, 'node DNS lookup failed; keeping its last addresses')
        }
      }),
    )
    this.setUrls(this.urls())
  }

  start(): void {
    if (this.timer) return
    this.timer = setInterval(() => void this.refresh(), this.opts.intervalMs)
    this.timer.unref()
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer)
    this.timer = null
  }

  /**
   * Polls every node once and re-resolves DNS entries when due; concurrent callers share the same round. The nodes
   * already known are polled while the lookup runs, so a slow resolver delays only the nodes it adds, which are
   * polled as soon as it answers.
   */
  refresh(): Promise<void> {
    if (!this.polling) {
      const known = new Set(this.current)
      const poll = (nodes: Iterable<RemoteNode>): Promise<unknown> => Promise.all([...nodes].map((n) => this.poll(n)))
      const done = (): void => {
        this.polling = null
      }
      this.polling = Promise.all([poll(known), this.resolveNames().then(() => poll(this.current.filter((n) => !known.has(n))))]).then(done, done)
    }
    return this.polling
  }

  private async poll(node: RemoteNode): Promise<void> {
    const timeout = Math.max(1000, Math.min(this.opts.intervalMs, 5000))
    const h = await this.client.health(node.url, AbortSignal.timeout(timeout))
    this.apply(node, h)
  }

  private apply(node: RemoteNode, h: NodeHealth): void {
    const before = node.status
    node.checkedAt = this.now()
    node.inflightAtPoll = node.inflight
    if (h.body) {
      node.status = h.status === 200 || h.body.status !== 'ready' ? h.body.status : 'unhealthy'
      node.models = Array.isArray(h.body.models) ? h.body.models.filter((m) => typeof m === 'string') : []
      node.capacity = typeof h.body.capacity === 'number' ? h.body.capacity : 0
      node.freeSlots = typeof h.body.free_slots === 'number' ? h.body.free_slots : node.capacity
      node.chatTemplate = typeof h.body.chat_template === 'boolean' ? h.body.chat_template : null
      node.lastError = null
      const s = Math.floor(this.now() / 1000)
      for (const m of node.models) if (!this.firstSeen.has(m)) this.firstSeen.set(m, s)
    } else {
      node.status = h.status === 0 ? 'unreachable' : 'unhealthy'
      node.lastError = h.error ?? `GET /health answered ${h.status} without a health body`
    }
    if (before !== node.status) {
      const level = node.status === 'ready' ? 'info' : 'warn'
      this.opts.log?.[level]({ node: node.url, from: before, to: node.status, error: node.lastError ?? undefined }, 'node status changed')
    }
  }

  /** Takes a node out of rotation until its next successful health poll. */
  markDown(node: RemoteNode, reason: string): void {
    if (node.status !== 'unreachable') this.opts.log?.warn({ node: node.url, reason }, 'node taken out of rotation')
    node.status = 'unreachable'
    node.lastError = reason
  }

  /**
   * Models served by ready nodes, with the time each was first seen and whether it serves chat: false only when
   * every ready node serving it said its model has no chat template.
   */
  readyModels(): { id: string; created: number; chat: boolean }[] {
    const ids = new Map<string, boolean>()
    for (const n of this.nodes) {
      if (n.status !== 'ready') continue
      for (const m of n.models) ids.set(m, (ids.get(m) ?? false) || n.chatTemplate !== false)
    }
    return [...ids.keys()].sort().map((id) => ({ id, created: this.firstSeen.get(id) ?? 0, chat: ids.get(id)! }))
  }

  /**
   * Whether `model` can serve chat: false when every informed node serving it said it has no chat template, true
   * when one has one, null when no node says (the node then answers for itself).
   */
  servesChat(model: string): boolean | null {
    let no = false
    for (const n of this.nodes) {
      if (n.checkedAt === null || n.status === 'unreachable' || !n.models.includes(model)) continue
      if (n.chatTemplate === true) return true
      if (n.chatTemplate === null) return null
      no = true
    }
    return no ? false : null
  }

  /**
   * Whether any node has said which models it has (in any state). Null when no node has answered /health yet:
   * then the facade cannot tell an unknown model from an unreachable one.
   */
  knowsModel(model: string): boolean | null {
    let informed = false
    for (const n of this.nodes) {
      if (n.checkedAt === null || n.status === 'unreachable') continue
      informed = true
      if (n.models.includes(model)) return true
    }
    return informed ? false : null
  }

  /**
   * The ready node serving `model` for a request: with an affinity key, the key's home (highest rendezvous weight)
   * while it has a free running slot, or when no node has one (it would wait anywhere, and waits where its prefix
   * is); otherwise the node with the most free capacity, ties round-robin. Free counts are those of the last poll
   * less what this facade has sent since.
   */
  pick(model: string, exclude: ReadonlySet<RemoteNode>, key: Key | null = null): RemoteNode | null {
    let best: RemoteNode | null = null
    let bestFree = -Infinity
    let home: RemoteNode | null = null
    let homeWeight = -1
    let anySlot = false
    const nodes = this.current
    const n = nodes.length
    const start = this.rr++ % Math.max(1, n)
    for (let i = 0; i < n; i++) {
      const node = nodes[(start + i) % n]!
      if (node.status !== 'ready' || exclude.has(node) || !node.models.includes(model)) continue
      const sent = node.inflight - node.inflightAtPoll
      const free = node.capacity - sent
      if (free > bestFree) {
        best = node
        bestFree = free
      }
      if (key === null) continue
      if (node.freeSlots - sent > 0) anySlot = true
      const w = weight(key, node.hash)
      if (w > homeWeight) {
        home = node
        homeWeight = w
      }
    }
    if (home && (home.freeSlots - (home.inflight - home.inflightAtPoll) > 0 || !anySlot)) {
      home.affinityRouted++
      return home
    }
    return best
  }

  dispatch(body: CompletionRequest, signal: AbortSignal): Promise<Dispatched> {
    return this.send(body.model, affinityKey(body, this.opts.affinityPrefixChars ?? 0), (url) => this.client.complete(url, body, signal))
  }

  /**
   * A prompt's token count from a ready node serving its model (its tokenize endpoint: no sequence runs), with the
   * failover a completion gets; a node's 4xx (a prompt it cannot render, over its byte bound) passes through.
   */
  async countTokens(body: TokenizeRequest, signal: AbortSignal): Promise<number> {
    const d = await this.send(body.model, null, (url) => this.client.tokenize(url, body, signal))
    d.release()
    return d.reply.body.prompt_tokens
  }

  /** Sends a request by `call` to ready nodes serving `model` until one answers it (see the header for the failover). */
  private async send<R extends { kind: 'json' | 'stream' }>(model: string, key: Key | null, call: (url: string) => Promise<R | NodeFailure>): Promise<{ reply: R; node: RemoteNode; release(): void }> {
    const tried = new Set<RemoteNode>()
    let node = this.pick(model, tried, key)
    let retried500 = false
    let retryAfterS = 1
    while (node) {
      const current: RemoteNode = node
      current.inflight++
      let reply: R | NodeFailure
      try {
        reply = await call(current.url)
      } catch (e) {
        current.inflight--
        throw e
      }
      if (!isFailure(reply)) {
        let released = false
        const release = (): void => {
          if (released) return
          released = true
          current.inflight--
        }
        return { reply, node: current, release }
      }
      current.inflight--
      tried.add(current)

      if (reply.kind === 'unreachable') {
        this.markDown(current, reply.message)
        node = this.pick(model, tried, key)
        continue
      }
      if (reply.status === 503) {
        // Full (or draining): prefer other nodes until the next poll says otherwise.
        current.capacity = 0
        current.freeSlots = 0
        current.inflightAtPoll = current.inflight
        retryAfterS = Math.max(retryAfterS, reply.retryAfterS ?? 1)
        node = this.pick(model, tried, key)
        continue
      }
      if (reply.status >= 500) {
        this.opts.log?.warn({ node: current.url, status: reply.status, message: reply.message }, 'node failed a request')
        if (retried500) {
          throw new OnnxdError('internal', 'The inference backend failed to complete the request; it is safe to retry', { expose: true })
        }
        retried500 = true
        // Once, at once: another ready node if there is one, else the same node again.
        node = this.pick(model, tried, key) ?? (current.status === 'ready' ? current : null)
        if (!node) throw new OnnxdError('internal', 'The inference backend failed to complete the request; it is safe to retry', { expose: true })
        continue
      }
      // A client error the node found (e.g. context length): the node's message, in the spec's error object.
      throw new OnnxdError(codeForStatus(reply.status), reply.message, reply.retryAfterS ? { retryAfterS: reply.retryAfterS } : {})
    }
    throw new OnnxdError('no_healthy_node', `No healthy inference node is available for model '${clip(model)}'; retry with backoff`, {
      retryAfterS,
      expose: true,
    })
  }

  /** What the facade's own /health shows. */
  snapshot(): {
    url: string
    status: NodeStatus
    models: string[]
    capacity: number
    free_slots: number
    inflight: number
    affinity_routed: number
    error: string | null
  }[] {
    return this.current.map((n) => ({
      url: n.url,
      status: n.status,
      models: n.models,
      capacity: n.capacity,
      free_slots: n.freeSlots,
      inflight: n.inflight,
      affinity_routed: n.affinityRouted,
      error: n.lastError,
    }))
  }
}
