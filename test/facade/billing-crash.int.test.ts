// Issue #10: "SIGKILL loses in-flight billing". A real `onnxd facade` process serves 16 streams from a paced node;
// it is SIGKILLed mid-stream and started again on the same data directory. What each client received must then be
// billed (usage and debit), less at most one save interval of tokens (billingFlushTokens), never more. Also with a
// client that has stopped reading, whose frames wait in the facade's own buffer when the kill lands: those are never
// sent, and never billed.
import { spawn, type ChildProcess } from 'node:child_process'
import { request, type IncomingMessage } from 'node:http'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import { createApiKey } from '../../src/facade/accounts.js'
import { SqliteStore } from '../../src/store/sqlite.js'
import { startFakeNode, type FakeNode } from '../helpers/fake-node.js'
import { deferred } from '../helpers/deferred.js'
import { bearer, MODEL } from '../helpers/facade.js'

const STREAMS = 16
const FLUSH_TOKENS = 8
/** Each stream has received at least this many chunks when the facade is killed. */
const BEFORE_KILL = 40
const CREDITS = 10_000_000

const CLI = pathToFileURL(resolve('src/cli.ts')).href

interface Facade {
  child: ChildProcess
  url: string
  /** Resolves with the `completions` of each 'settled completions left in flight' log line, summed, once it reaches `n`. */
  settled(n: number): Promise<void>
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
}

/** `onnxd facade` in its own process (TypeScript through tsx), listening on a free port of its choosing. */
function startFacade(dataDir: string, nodeUrl: string): Promise<Facade> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', '-e', `import(${JSON.stringify(CLI)}).then((m) => m.main(process.argv.slice(1)))`, 'facade', '--port', '0', '--nodes', nodeUrl, '--data-dir', dataDir],
    {
      env: {
        ...process.env,
        ONNXD_BILLING_FLUSH_TOKENS: String(FLUSH_TOKENS),
        ONNXD_BILLING_FLUSH_MS: '250', // the lease runs out 5 intervals (1.25 s) after the last save
        ONNXD_HEALTH_INTERVAL_MS: '100',
        ONNXD_LOG_LEVEL: 'info',
        ONNXD_JWT_SECRET: 'crash-test-secret-crash-test-secret-0123',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  )
  const listening = deferred<string>()
  let settledSoFar = 0
  const waiters: { n: number; resolve: () => void }[] = []
  let stderr = ''
  let buf = ''
  child.stdout!.on('data', (d: Buffer) => {
    buf += d.toString()
    let nl
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl)
      buf = buf.slice(nl + 1)
      let entry: { msg?: string; url?: string; completions?: number }
      try {
        entry = JSON.parse(line)
      } catch {
        continue
      }
      if (entry.msg === 'facade listening' && entry.url) listening.resolve(entry.url)
      if (entry.msg?.startsWith('settled completions left in flight')) settledSoFar += entry.completions ?? 0
      for (const w of waiters) if (settledSoFar >= w.n) w.resolve()
    }
  })
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()))
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) =>
    child.on('exit', (code, signal) => {
      listening.reject(new Error(`facade exited (${code ?? signal}) before listening: ${stderr}`))
      done({ code, signal })
    }),
  )
  return listening.promise.then((url) => ({
    child,
    url,
    exited,
    settled: (n) => {
      if (settledSoFar >= n) return Promise.resolve()
      const d = deferred()
      waiters.push({ n, resolve: () => d.resolve() })
      return d.promise
    },
  }))
}

interface Stream {
  /** Content chunks received. */
  chunks: number
  /** Resolves when the connection ends, however it ends. */
  ended: Promise<void>
}

/** A streamed chat completion read with node:http, which hands over every byte received before the connection broke. */
function openStream(url: string, key: string, onChunk: () => void, onResponse?: (res: IncomingMessage) => void, maxTokens = 4000): Stream {
  const ended = deferred()
  const s: Stream = { chunks: 0, ended: ended.promise }
  const req = request(`${url}/v1/chat/completions`, { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' } }, (res) => {
    expect(res.statusCode).toBe(200)
    onResponse?.(res)
    let buf = ''
    res.on('data', (d: Buffer) => {
      buf += d.toString()
      let end
      while ((end = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, end)
        buf = buf.slice(end + 2)
        if (!event.startsWith('data: {')) continue
        const content = (JSON.parse(event.slice(6)) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content
        if (content) {
          s.chunks++
          onChunk()
        }
      }
    })
    res.on('close', () => ended.resolve())
    res.on('error', () => ended.resolve())
  })
  req.on('error', () => ended.resolve())
  req.end(JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: maxTokens, stream: true }))
  return s
}

describe('billing survives a crash (issue #10)', () => {
  let node: FakeNode
  const children: ChildProcess[] = []
  afterAll(async () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL')
    await node?.close()
  })

  it('SIGKILL mid-stream, restart: usage and debit equal what the clients received, within one save interval', async () => {
    node = await startFakeNode({ tokens: Array.from({ length: 4000 }, (_, i) => ` t${i}`), paceMs: 4 })
    const dataDir = mkdtempSync(join(tmpdir(), 'onnxd-crash-'))
    const store = new SqliteStore({ dataDir })
    const account = await store.createAccount({ name: 'crash', balanceMicros: CREDITS })
    // One key per stream, so /v1/usage shows each stream's own usage.
    const keys: string[] = []
    for (let i = 0; i < STREAMS; i++) keys.push((await createApiKey(store, account.id)).key!)
    await store.close()

    const first = await startFacade(dataDir, node.url)
    children.push(first.child)
    const healthy = await fetch(`${first.url}/health`)
    expect(healthy.status).toBe(200)

    // Kill once every stream has received BEFORE_KILL chunks: all of them mid-stream (each would run 4000).
    const allStarted = deferred()
    const streams: Stream[] = []
    const check = (): void => {
      if (streams.length === STREAMS && streams.every((s) => s.chunks >= BEFORE_KILL)) allStarted.resolve()
    }
    for (const k of keys) streams.push(openStream(first.url, k, check))
    await allStarted.promise
    first.child.kill('SIGKILL')
    expect(await first.exited).toEqual({ code: null, signal: 'SIGKILL' })
    await Promise.all(streams.map((s) => s.ended))
    const received = streams.map((s) => s.chunks)
    expect(received.every((n) => n >= BEFORE_KILL && n < 4000)).toBe(true)

    // The next start settles what the dead process left in flight, once its lease has run out.
    const second = await startFacade(dataDir, node.url)
    children.push(second.child)
    await second.settled(STREAMS)

    let billed = 0
    for (let i = 0; i < STREAMS; i++) {
      const res = await fetch(`${second.url}/v1/usage`, { headers: bearer(keys[i]!) })
      expect(res.status).toBe(200)
      const { total } = (await res.json()) as { total: { requests: number; prompt_tokens: number; completion_tokens: number; cost_micros: number } }
      expect(total.requests).toBe(1)
      // Never more than was delivered; less by at most what one save interval holds.
      expect(total.completion_tokens).toBeLessThanOrEqual(received[i]!)
      expect(received[i]! - total.completion_tokens).toBeLessThan(FLUSH_TOKENS)
      // The prompt is billed too (the node reports it with every delta), at the default price.
      expect(total.prompt_tokens).toBe(4)
      expect(total.cost_micros).toBe(Math.ceil((4 * 500 + total.completion_tokens * 1500) / 1000))
      billed += total.cost_micros
    }
    const after = new SqliteStore({ dataDir })
    try {
      expect((await after.getAccount(account.id))!.balanceMicros).toBe(CREDITS - billed)
      expect(after.db.prepare('SELECT count(*) AS n FROM inflight WHERE settled_at IS NULL').get()).toEqual({ n: 0 })
    } finally {
      await after.close()
    }

    second.child.kill('SIGTERM')
    expect((await second.exited).code).toBe(0)
  })

  it("SIGKILL while a client has stopped reading: the frames still in the facade's own buffer are not billed", async () => {
    // Enough tokens, all at once, to fill the client's socket buffers and then the facade's response buffer.
    node = await startFakeNode({ tokens: Array.from({ length: 40_000 }, (_, i) => ` t${i}`) })
    const dataDir = mkdtempSync(join(tmpdir(), 'onnxd-crash-'))
    const store = new SqliteStore({ dataDir })
    const account = await store.createAccount({ name: 'stalled', balanceMicros: CREDITS })
    const key = (await createApiKey(store, account.id)).key!
    await store.close()
    const first = await startFacade(dataDir, node.url)
    children.push(first.child)

    // The client stops reading after BEFORE_KILL chunks: the kernel's buffers fill, then the facade's.
    let res: IncomingMessage | null = null
    const stream = openStream(first.url, key, () => {
      if (stream.chunks === BEFORE_KILL) res?.pause()
    }, (r) => (res = r), 40_000)
    // The saved in-flight count stops growing once the facade waits for the socket to drain.
    const saved = new SqliteStore({ dataDir })
    let last = -1
    for (let still = 0; still < 4; ) {
      await new Promise((r) => setTimeout(r, 300))
      const rows = saved.db.prepare('SELECT completion_tokens FROM inflight').all() as { completion_tokens: number }[]
      const now = rows.reduce((m, r) => Math.max(m, r.completion_tokens), 0)
      still = now > 0 && now === last ? still + 1 : 0
      last = now
    }
    await saved.close()
    first.child.kill('SIGKILL')
    await first.exited
    // Everything that left the facade's process reaches the client.
    res!.resume()
    await stream.ended
    expect(stream.chunks).toBeGreaterThan(BEFORE_KILL)
    expect(stream.chunks).toBeLessThan(40_000)

    const second = await startFacade(dataDir, node.url)
    children.push(second.child)
    await second.settled(1)
    const usage = await fetch(`${second.url}/v1/usage`, { headers: bearer(key) })
    const { total } = (await usage.json()) as { total: { completion_tokens: number } }
    // Billed: what the last save before the kill held, which never counts a frame that had not left the process.
    expect(total.completion_tokens).toBe(last)
    expect(total.completion_tokens).toBeLessThanOrEqual(stream.chunks)
    second.child.kill('SIGTERM')
    expect((await second.exited).code).toBe(0)
  })
})
