// Shared set-up for the node's HTTP tests: an app over a fake engine, its options, a listening server, SSE parsing,
// the error object's check.
import type { FastifyInstance } from 'fastify'
import { expect } from 'vitest'
import { buildNode, type NodeDeps } from '../../src/node/app.js'
import { DEFAULT_MODEL_DIR, loadNodeOptions, type NodeOptions } from '../../src/node/options.js'
import { createMetrics, createRegistry, type NodeMetrics } from '../../src/node/plugins/metrics.js'
import { fakeEngine, type FakeEngine, type FakeEngineOptions } from '../helpers/fake-engine.js'

export const URL_PATH = '/internal/v1/completions'

export function testOptions(flags: Partial<Record<keyof NodeOptions, unknown>> = {}): NodeOptions {
  // The embedded default model (served as onnxd-tiny); the fake engine loads nothing.
  return loadNodeOptions({}, { logLevel: 'silent', model: DEFAULT_MODEL_DIR, ...flags }, {}, { totalMemBytes: 8 * 1024 ** 3 })
}

export interface TestNode {
  app: FastifyInstance
  engine: FakeEngine
  metrics: NodeMetrics
  /** Log lines written by the app (JSON strings), when built with `captureLogs`. */
  logs: string[]
}

/** An app over a fake engine whose observer feeds the app's metrics, as the CLI wires the real pool. */
export function testNode(
  engineOpts: FakeEngineOptions = {},
  o: { options?: Partial<Record<keyof NodeOptions, unknown>>; captureLogs?: boolean; deps?: Partial<NodeDeps> } = {},
): TestNode {
  const metrics = createMetrics(createRegistry(), 'onnxd-tiny', 'cpu')
  const engine = fakeEngine({ observer: metrics.observer, ...engineOpts })
  const logs: string[] = []
  const options = testOptions({ ...(o.captureLogs ? { logLevel: 'info' } : {}), ...o.options })
  const app = buildNode(options, {
    engine,
    metrics,
    // A fake engine serves no bundle: /health cannot tell whether it has a chat template (unless a test gives one).
    modelDir: '/nonexistent/onnxd-test-bundle',
    ...(o.captureLogs ? { logStream: { write: (line: string) => void logs.push(line) } } : {}),
    ...o.deps,
  })
  return { app, engine, metrics, logs }
}

/** Listens on an ephemeral port of 127.0.0.1 and returns the base URL. */
export async function listen(app: FastifyInstance): Promise<string> {
  await app.listen({ port: 0, host: '127.0.0.1' })
  const addr = app.server.address()
  if (addr === null || typeof addr === 'string') throw new Error('no TCP address')
  return `http://127.0.0.1:${addr.port}`
}

/** The `data:` payloads of an SSE body, in order (`[DONE]` kept as the string). */
export function sseData(body: string): string[] {
  return body
    .split('\n\n')
    .filter((f) => f !== '')
    .map((f) => {
      if (!f.startsWith('data: ')) throw new Error(`not an SSE data frame: ${JSON.stringify(f)}`)
      return f.slice('data: '.length)
    })
}

/** Reads a streamed body chunk by chunk until `until` holds for the text so far. */
export async function readUntil(reader: ReadableStreamDefaultReader<Uint8Array>, sofar: { text: string }, until: (text: string) => boolean): Promise<void> {
  const dec = new TextDecoder()
  while (!until(sofar.text)) {
    const { done, value } = await reader.read()
    if (done) throw new Error(`stream ended before the expected text; got ${JSON.stringify(sofar.text)}`)
    sofar.text += dec.decode(value, { stream: true })
  }
}

export function completionBody(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: 'onnxd-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, ...extra }
}

/** POSTs a JSON body to the node's completion endpoint. */
export const post = (base: string, body: unknown): Promise<Response> =>
  fetch(`${base}${URL_PATH}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })

/** An injected error answer's error object, checked to be the spec's: `{"error":{…}}` alone, its code the status. */
export function errorOf(res: { statusCode: number; json(): unknown }): { message: string; type: string; code: number } {
  const body = res.json() as { error: { message: string; type: string; code: number } }
  expect(Object.keys(body)).toEqual(['error'])
  expect(body.error.code).toBe(res.statusCode)
  return body.error
}
