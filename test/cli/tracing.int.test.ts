// Issue #15, the commands' wiring: `onnxd serve` with OTEL_EXPORTER_OTLP_ENDPOINT set traces the facade (onnxd-facade)
// and the node (onnxd-node), and the spans of the last requests leave at shutdown. The batch delay is set far beyond
// the test, so only the flush on SIGTERM can deliver them.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createApiKey } from '../../src/facade/accounts.js'
import { SqliteStore } from '../../src/store/sqlite.js'
import { tinyPlainModelDir } from '../helpers/fixtures.js'
import { clientTraceparent, startCollector, type Collector } from '../helpers/tracing-collector.js'
import { freePort } from '../helpers/servers.js'

const ENTRY = join(import.meta.dirname, '../helpers/onnxd-src.ts')

let collector: Collector
beforeAll(async () => {
  collector = await startCollector()
})
afterAll(() => collector?.close())

describe('onnxd serve with OTEL_EXPORTER_OTLP_ENDPOINT', () => {
  it('traces a completion through facade and node, and flushes the spans when SIGTERM stops it', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'onnxd-tracing-'))
    const store = new SqliteStore({ file: join(dataDir, 'onnxd.sqlite') })
    const account = await store.createAccount({ name: 'tracing', balanceMicros: 1_000_000_000, subscription: 'active' })
    const key = (await createApiKey(store, account.id, { rpmLimit: null })).key!
    await store.close()

    const [port, nodePort] = [await freePort(), await freePort()]
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ONNXD_') && !k.startsWith('OTEL_')))
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', ENTRY, 'serve', '--port', String(port), '--node-port', String(nodePort), '--model', tinyPlainModelDir(), '--workers', '1'],
      {
        env: { ...env, ONNXD_DATA_DIR: dataDir, ONNXD_LOG_LEVEL: 'warn', ONNXD_MODEL_ID: 'traced-tiny', OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_BSP_SCHEDULE_DELAY: '600000' },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    )
    let stderr = ''
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()))
    const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>
    try {
      // Ready once the facade answers /health with 200 (the node loaded, the facade saw it).
      const t0 = Date.now()
      for (;;) {
        const ok = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.status === 200, () => false)
        if (ok) break
        if (Date.now() - t0 > 60_000 || child.exitCode !== null) throw new Error(`onnxd serve did not become ready: ${stderr}`)
        await new Promise((r) => setTimeout(r, 100))
      }
      const client = clientTraceparent()
      const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, traceparent: client.header },
        body: JSON.stringify({ model: 'traced-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, ignore_eos: true }),
      })
      const answer = await res.text()
      expect(res.status, answer).toBe(200)
      // Nothing yet: the batch waits (OTEL_BSP_SCHEDULE_DELAY) ...
      await new Promise((r) => setTimeout(r, 200))
      expect(collector.trace(client.traceId)).toEqual([])
      // ... until the shutdown flushes it.
      child.kill('SIGTERM')
      const [code] = await exited
      expect(code, stderr).toBe(0)
      const spans = collector.trace(client.traceId)
      expect(spans.map((s) => `${s.service} ${s.name}`).sort()).toEqual(
        [
          'onnxd-facade POST /v1/chat/completions',
          'onnxd-facade POST /internal/v1/completions',
          'onnxd-node POST /internal/v1/completions',
          'onnxd-node decode',
          'onnxd-node prefill',
          'onnxd-node queue',
        ].sort(),
      )
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL')
    }
  })
})
