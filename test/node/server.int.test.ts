// src/node/server.ts in process, on the tiny default model: serveNode listens before the model has loaded (so
// /health says `loading` to whoever starts beside it), answers ready, and on the shutdown promise drains and
// resolves 0 with the port released. A bundle that cannot load, or a port in use, rejects with the port released.
import { mkdtempSync } from 'node:fs'
import { createServer, type Server } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { freePort } from '../../src/bench/targets/spawn.js'
import { serveNode } from '../../src/node/server.js'
import { deferred } from '../helpers/deferred.js'
import { tinyPlainModelDir } from '../helpers/fixtures.js'
import { completionBody, post, testOptions } from './helpers.js'

/** Resolves once something can listen on `port` again (the node released it), then lets it go. */
function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s: Server = createServer()
    s.once('error', () => resolve(false))
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)))
  })
}

async function waitReady(url: string): Promise<void> {
  for (;;) {
    const res = await fetch(`${url}/health`)
    const body = (await res.json()) as { status: string }
    if (res.status === 200 && body.status === 'ready') return
    await new Promise((r) => setTimeout(r, 20))
  }
}

describe('serveNode (src/node/server.ts)', () => {
  it('listens before the model loads, serves once ready, and drains on shutdown: resolves 0, port released', async () => {
    const port = await freePort()
    const opts = testOptions({ model: tinyPlainModelDir(), modelId: 'onnxd-tiny', port, host: '127.0.0.1', workers: 1, intraOpThreads: 1 })
    const shutdown = deferred<NodeJS.Signals>()
    const listening = deferred<{ url: string; live: number; health: string }>()
    const drained = deferred()
    const running = serveNode(opts, shutdown.promise, {
      onListening: async (url) => {
        const health = await fetch(`${url}/health`)
        const status = ((await health.json()) as { status: string }).status
        listening.resolve({ url, live: (await fetch(`${url}/health/live`)).status, health: `${health.status} ${status}` })
      },
      onDrained: async () => drained.resolve(),
    })
    const url = `http://127.0.0.1:${port}`
    // The workers start only after the hook (engine.ready()), so the model is still loading then.
    expect(await listening.promise).toEqual({ url, live: 200, health: '503 loading' })
    await waitReady(url)

    const res = await post(url, completionBody({ max_tokens: 2 }))
    expect(res.status).toBe(200)
    expect(((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBeGreaterThan(0)

    shutdown.resolve('SIGTERM')
    await expect(running).resolves.toBe(0)
    expect(drained.settled).toBe(true)
    expect(await canListen(port)).toBe(true)
  })

  it('a bundle that cannot load rejects, with the port and the workers released', async () => {
    const port = await freePort()
    const empty = mkdtempSync(join(tmpdir(), 'onnxd-server-'))
    const opts = testOptions({ model: empty, port, host: '127.0.0.1', workers: 1, intraOpThreads: 1 })
    await expect(serveNode(opts, new Promise(() => {}))).rejects.toThrow()
    expect(await canListen(port)).toBe(true)
  })

  it('a port in use rejects with the listen error, before any worker starts', async () => {
    const busy = createServer()
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', r))
    const port = (busy.address() as { port: number }).port
    try {
      const opts = testOptions({ model: tinyPlainModelDir(), modelId: 'onnxd-tiny', port, host: '127.0.0.1', workers: 1 })
      await expect(serveNode(opts, new Promise(() => {}))).rejects.toMatchObject({ code: 'EADDRINUSE', syscall: 'listen' })
    } finally {
      await new Promise((r) => busy.close(r))
    }
  })
})
