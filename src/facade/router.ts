// Routing over worker nodes: polls each node's /health, sends work to a ready node serving the model with the most
// free capacity, takes failing nodes out (and back in once healthy), and turns node failures into the spec's
// errors: 503 → another node, else 503; 500 → one immediate retry on another node (or the same), then 500;
// 4xx → passed through. Imports: contract, shared errors, node client.
import type { FastifyBaseLogger } from 'fastify'
import type { CompletionRequest } from '../contract/completions.js'
import type { HealthStatus } from '../contract/health.js'
import { clip, OnnxdError } from '../shared/errors.js'
import { codeForStatus } from '../shared/http-errors.js'
import type { NodeClient, NodeHealth, NodeReply } from './node-client.js'

export type NodeStatus = HealthStatus | 'unreachable' | 'unknown'

/** A worker node as this facade sees it: its URL, its last reported health, and the requests sent to it. */
export interface RemoteNode {
  readonly url: string
  status: NodeStatus
  models: string[]
  /** Whether its model has a chat template, as its last health said (null: it did not say). */
  chatTemplate: boolean | null
  /** Free capacity the node reported at its last poll. */
  capacity: number
  /** Requests this facade has in flight on the node now, and at the last poll. */
  inflight: number
  inflightAtPoll: number
  lastError: string | null
  checkedAt: number | null
}

export type Dispatched = {
  reply: Extract<NodeReply, { kind: 'json' | 'stream' }>
  node: RemoteNode
  /** Call once the reply (stream included) is finished with. */
  release(): void
}

export interface RouterOptions {
  intervalMs: number
  log?: FastifyBaseLogger
  now?: () => number
}

export class NodeRouter {
  readonly nodes: RemoteNode[]
  private timer: NodeJS.Timeout | null = null
  private polling: Promise<void> | null = null
  private rr = 0
  /** First time each model was seen on a node, unix seconds: the `created` of /v1/models. */
  private readonly firstSeen = new Map<string, number>()
  private readonly now: () => number

  constructor(
    urls: readonly string[],
    private readonly client: NodeClient,
    private readonly opts: RouterOptions,
  ) {
    this.now = opts.now ?? Date.now
    this.nodes = urls.map((url) => ({
      url,
      status: 'unknown',
      models: [],
      chatTemplate: null,
      capacity: 0,
      inflight: 0,
      inflightAtPoll: 0,
      lastError: null,
      checkedAt: null,
    }))
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

  /** Polls every node once; concurrent callers share the same round. */
  refresh(): Promise<void> {
    this.polling ??= Promise.all(this.nodes.map((n) => this.poll(n))).then(
      () => {
        this.polling = null
      },
      () => {
        this.polling = null
      },
    )
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

  /** The ready node serving `model` with the most free capacity; ties go round-robin. */
  pick(model: string, exclude: ReadonlySet<RemoteNode>): RemoteNode | null {
    let best: RemoteNode | null = null
    let bestFree = -Infinity
    const n = this.nodes.length
    const start = this.rr++ % Math.max(1, n)
    for (let i = 0; i < n; i++) {
      const node = this.nodes[(start + i) % n]!
      if (node.status !== 'ready' || exclude.has(node) || !node.models.includes(model)) continue
      const free = node.capacity - (node.inflight - node.inflightAtPoll)
      if (free > bestFree) {
        best = node
        bestFree = free
      }
    }
    return best
  }

  async dispatch(body: CompletionRequest, signal: AbortSignal): Promise<Dispatched> {
    const model = body.model
    const tried = new Set<RemoteNode>()
    let node = this.pick(model, tried)
    let retried500 = false
    let retryAfterS = 1
    while (node) {
      const current: RemoteNode = node
      current.inflight++
      let reply: NodeReply
      try {
        reply = await this.client.complete(current.url, body, signal)
      } catch (e) {
        current.inflight--
        throw e
      }
      if (reply.kind === 'json' || reply.kind === 'stream') {
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
        node = this.pick(model, tried)
        continue
      }
      if (reply.status === 503) {
        // Full (or draining): prefer other nodes until the next poll says otherwise.
        current.capacity = 0
        current.inflightAtPoll = current.inflight
        retryAfterS = Math.max(retryAfterS, reply.retryAfterS ?? 1)
        node = this.pick(model, tried)
        continue
      }
      if (reply.status >= 500) {
        this.opts.log?.warn({ node: current.url, status: reply.status, message: reply.message }, 'node failed a completion')
        if (retried500) {
          throw new OnnxdError('internal', 'The inference backend failed to complete the request; it is safe to retry', { expose: true })
        }
        retried500 = true
        // Once, at once: another ready node if there is one, else the same node again.
        node = this.pick(model, tried) ?? (current.status === 'ready' ? current : null)
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
  snapshot(): { url: string; status: NodeStatus; models: string[]; capacity: number; inflight: number; error: string | null }[] {
    return this.nodes.map((n) => ({
      url: n.url,
      status: n.status,
      models: n.models,
      capacity: n.capacity,
      inflight: n.inflight,
      error: n.lastError,
    }))
  }
}
