// Fixed-window rate-limit counters in Redis, shared by every facade pointed at it (ONNXD_REDIS_URL): one Lua script
// per request, whatever its buckets (per bucket in order: INCR, PEXPIREAT at the window's end on its first count, and
// a stop after the first over its limit), sent with EVALSHA and, when the server does not know the script yet
// (NOSCRIPT), with EVAL. The buckets' keys may lie in different slots: a single Redis (or a primary), not a Cluster. Windows are aligned to the epoch as in the in-memory store, so the result
// of a hit is the same. When Redis cannot answer, or has not within `timeoutMs` (sent or not: a stalled server too), the request is allowed (fail open), counted in `failures`, and a
// warning is logged at most once a minute. Imports: store interfaces.
import { createHash } from 'node:crypto'
import { setTimeout as delay } from 'node:timers/promises'
import { createClient } from 'redis'
import type { RateLimitCheck, RateLimitHit, RateLimitStore } from './interfaces.js'

const SCRIPT = `
local counts = {}
for i, key in ipairs(KEYS) do
  local n = redis.call('INCR', key)
  if n == 1 then redis.call('PEXPIREAT', key, ARGV[1]) end
  counts[i] = n
  if n > tonumber(ARGV[i + 1]) then break end
end
return counts`
const SHA = createHash('sha1').update(SCRIPT).digest('hex')

export interface RedisRateLimitOptions {
  /** `redis://[user:password@]host:port[/db]` */
  url: string
  /** Key prefix, so that several onnxd fleets can share one Redis (default `onnxd:rl:`). */
  prefix?: string
  /** Longest wait for a hit, sent or not, before it fails open (default 500 ms). */
  timeoutMs?: number
  /** Where fail-open warnings go (default console.warn). At most one a minute. */
  warn?: (message: string) => void
}

export class RedisRateLimitStore implements RateLimitStore {
  private readonly client
  private readonly prefix: string
  private readonly warn: (message: string) => void
  private lastWarnMs = -Infinity
  private readonly timeoutMs: number
  /** Settles once connected, or `timeoutMs` after opening: hits made before then wait for it, later ones never. */
  private readonly firstConnect: Promise<void>
  /** Hits allowed because Redis could not answer (unreachable, timed out, or an error). */
  failures = 0

  constructor(opts: RedisRateLimitOptions) {
    this.prefix = opts.prefix ?? 'onnxd:rl:'
    this.warn = opts.warn ?? ((m) => console.warn(m))
    this.timeoutMs = opts.timeoutMs ?? 500
    this.client = createClient({
      url: opts.url,
      // While disconnected, commands fail at once (and fail open) instead of queueing behind the reconnect.
      disableOfflineQueue: true,
      // The client's own per-command timeout (5 s unless set; 0 turns it off) is not used: it gives up only on
      // commands not yet written, so a Redis that stalls would hold every request; and it costs each command an
      // AbortSignal.timeout whose timer fires, answered or not. `run` times each hit instead.
      commandOptions: { timeout: 0 },
      socket: { connectTimeout: 2000, reconnectStrategy: (retries: number) => Math.min(100 * 2 ** retries, 5000) },
    })
    // Connection errors are reported through failing hits; without a listener they would crash the process.
    this.client.on('error', () => undefined)
    this.firstConnect = Promise.race([
      this.client.connect().then(
        () => undefined,
        () => undefined,
      ),
      delay(this.timeoutMs, undefined, { ref: false }),
    ])
  }

  async hits(checks: readonly RateLimitCheck[], windowMs: number, nowMs: number): Promise<RateLimitHit[]> {
    if (checks.length === 0) return []
    const start = nowMs - (nowMs % windowMs)
    const resetAtMs = start + windowMs
    let counts: number[]
    try {
      const keys = checks.map((c) => `${this.prefix}${c.bucket}:${start}`)
      counts = ((await this.run(keys, [String(resetAtMs), ...checks.map((c) => String(c.limit))])) as unknown[]).map(Number)
    } catch (e) {
      this.failures++
      const now = Date.now()
      if (now - this.lastWarnMs >= 60_000) {
        this.lastWarnMs = now
        this.warn(`rate limits: Redis did not answer (${(e as Error).message}); allowing requests until it does`)
      }
      return checks.map((c) => ({ allowed: true, count: 0, remaining: c.limit, resetAtMs }))
    }
    return counts.map((count, i) => {
      const limit = checks[i]!.limit
      return { allowed: count <= limit, count, remaining: Math.max(0, limit - count), resetAtMs }
    })
  }

  /** The script's answer, or a rejection once `timeoutMs` has passed (the command may still run later). */
  private async run(keys: string[], args: string[]): Promise<unknown> {
    let timer: NodeJS.Timeout | undefined
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${this.timeoutMs} ms`)), this.timeoutMs)
    })
    const answer = this.eval(keys, args)
    // A command that answers after its timeout (or fails then) is nobody's concern any more.
    answer.catch(() => undefined)
    try {
      return await Promise.race([answer, late])
    } finally {
      clearTimeout(timer)
    }
  }

  private async eval(keys: string[], args: string[]): Promise<unknown> {
    if (!this.client.isReady) await this.firstConnect
    const options = { keys, arguments: args }
    try {
      return await this.client.evalSha(SHA, options)
    } catch (e) {
      if (!(e instanceof Error) || !e.message.startsWith('NOSCRIPT')) throw e
      return await this.client.eval(SCRIPT, options)
    }
  }

  async close(): Promise<void> {
    if (this.client.isReady) await this.client.close().catch(() => undefined)
    else if (this.client.isOpen) this.client.destroy()
  }
}
