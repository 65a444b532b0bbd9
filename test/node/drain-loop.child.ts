// Run by drain-loop.int.test.ts in a process of its own (node --import tsx): CYCLES times, a real node over a fresh
// engine pool starts STREAMS long streaming completions, drains with a grace far shorter than they need, then
// closes the app and the pool while the worker is still stepping them. Prints `cycle N` after each; exits 0 when
// all are done. A shutdown that aborts the process (a native exception while a session is released) never prints
// the last lines, and exits with the abort's code instead.
// argv: MODEL_DIR [CYCLES=50] [STREAMS=3] [GRACE_MS=50]
import { buildNode } from '../../src/node/app.js'
import { loadNodeOptions } from '../../src/node/options.js'
import { createMetrics, createRegistry } from '../../src/node/plugins/metrics.js'
import { createEnginePool } from '../../src/engine/pool/pool.js'

const [modelDir, cyclesArg = '50', streamsArg = '3', graceArg = '50'] = process.argv.slice(2)
if (!modelDir) throw new Error('usage: drain-loop.child.ts MODEL_DIR [CYCLES] [STREAMS] [GRACE_MS]')
const cycles = Number(cyclesArg)
const streams = Number(streamsArg)
const graceMs = Number(graceArg)

const opts = loadNodeOptions({}, { logLevel: 'silent', model: modelDir, modelId: 'onnxd-tiny' }, {}, { totalMemBytes: 8 * 1024 ** 3 })

/** Starts a long stream and resolves once its first token arrived, with the promise of its end (error or not). */
async function startStream(base: string): Promise<{ ended: Promise<void> }> {
  const res = await fetch(`${base}/internal/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'onnxd-tiny', prompt: 'hello', max_tokens: 1500, ignore_eos: true, stream: true }),
  })
  if (res.status !== 200) throw new Error(`stream refused: ${res.status} ${await res.text()}`)
  const reader = res.body!.getReader()
  const first = await reader.read()
  if (first.done) throw new Error('stream ended before its first token')
  const ended = (async () => {
    try {
      while (!(await reader.read()).done);
    } catch {
      // The drain ends what outlives the grace; how the stream ends is drain.test.ts's business.
    }
  })()
  return { ended }
}

for (let i = 1; i <= cycles; i++) {
  const metrics = createMetrics(createRegistry(), 'onnxd-tiny', 'cpu')
  const engine = createEnginePool({ modelDir, modelId: 'onnxd-tiny', workers: 1, intraOpThreads: 1 }, metrics.observer)
  const app = buildNode(opts, { engine, metrics })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const addr = app.server.address()
  if (addr === null || typeof addr === 'string') throw new Error('no TCP address')
  const base = `http://127.0.0.1:${addr.port}`
  await engine.ready()

  const running = await Promise.all(Array.from({ length: streams }, () => startStream(base)))
  const result = await app.node.drain(graceMs)
  if (result.drained) throw new Error(`cycle ${i}: the streams finished within ${graceMs} ms; nothing was in flight at close`)
  await app.close()
  await engine.close()
  await Promise.all(running.map((r) => r.ended))
  process.stdout.write(`cycle ${i}\n`)
}
