// Fixed-window rate-limit counters in Redis, shared by every facade pointed at it (ONNXD_REDIS_URL): one Lua script
// per hit (INCR, and PEXPIREAT at the window's end on its first count), sent with EVALSHA and, when the server does not
// know the script yet (NOSCRIPT), with EVAL. Windows are aligned to the epoch as in the in-memory store, so the result
// of a hit is the same. When Redis cannot answer, the hit is allowed (fail open), counted in `failures`, and a
// warning is logged at most once a minute. Imports: store interfaces.
import { createHash } from 'node:crypto'
import { setTimeout as delay } from 'node:timers/promises'
import { createClient } from 'redis'
import type { RateLimitHit, RateLimitStore } from './interfaces.js'

const SCRIPT = `
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIREAT', KEYS[1], ARGV[1]) end
return n`
const SHA = createHash('sha1').update(SCRIPT).digest('hex')

export interface RedisRateLimitOptions {
  /** `redis://[user:password@]host:port[/db]` */
  url: string
  /** Key prefix, so that several onnxd fleets can share one Redis (default `onnxd:rl:`). */
  prefix?: string
  /** Longest wait for a hit before it fails open (default 500 ms). */
  timeoutMs?: number
  /** Where fail-open warnings go (default console.warn). At most one a minute. */
  warn?: (message: string) => void
}

export class RedisRateLimitStore implements RateLimitStore {
  private readonly client
  private readonly prefix: string
  private readonly warn: (message: string) => void
  private lastWarnMs = -Infinity
  /** Settles once connected, or `timeoutMs` after opening: hits made before then wait for it, later ones never. */
  private readonly firstConnect: Promise<void>
  /** Hits allowed because Redis could not answer (unreachable, timed out, or an error). */
  failures = 0

  constructor(opts: RedisRateLimitOptions) {
    this.prefix = opts.prefix ?? 'onnxd:rl:'
    this.warn = opts.warn ?? ((m) => console.warn(m))
    const timeoutMs = opts.timeoutMs ?? 500
    this.client = createClient({
      url: opts.url,
      // While disconnected, commands fail at once (and fail open) instead of queueing behind the reconnect.
      disableOfflineQueue: true,
      commandOptions: { timeout: timeoutMs },
      socket: { connectTimeout: 2000, reconnectStrategy: (retries: number) => Math.min(100 * 2 ** retries, 5000) },
    })
    // Connection errors are reported through failing hits; without a listener they would crash the process.
    this.client.on('error', () => undefined)
    this.firstConnect = Promise.race([
      this.client.connect().then(
        () => undefined,
        () => undefined,
      ),
      delay(timeoutMs, undefined, { ref: false }),
    ])
  }

  async hit(bucket: string, limit: number, windowMs: number, nowMs: number): Promise<RateLimitHit> {
    const start = nowMs - (nowMs % windowMs)
    const resetAtMs = start + windowMs
    const key = `${this.prefix}${bucket}:${start}`
    let count: number
    try {
      count = Number(await this.run(key, resetAtMs))
    } catch (e) {
      this.failures++
      const now = Date.now()
      if (now - this.lastWarnMs >= 60_000) {
        this.lastWarnMs = now
        this.warn(`rate limits: Redis did not answer (${(e as Error).message}); allowing requests until it does`)
      }
      return { allowed: true, count: 0, remaining: limit, resetAtMs }
    }
    return { allowed: count <= limit, count, remaining: Math.max(0, limit - count), resetAtMs }
  }

  private async run(key: string, resetAtMs: number): Promise<unknown> {
    if (!this.client.isReady) await this.firstConnect
    const args = { keys: [key], arguments: [String(resetAtMs)] }
    try {
      return await this.client.evalSha(SHA, args)
    } catch (e) {
      if (!(e instanceof Error) || !e.message.startsWith('NOSCRIPT')) throw e
      return await this.client.eval(SCRIPT, args)
    }
  }

  async close(): Promise<void> {
    if (this.client.isReady) await this.client.close().catch(() => undefined)
    else if (this.client.isOpen) this.client.destroy()
  }
}
