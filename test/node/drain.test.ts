// Graceful drain (what SIGTERM triggers in `onnxd node`): readiness turns `draining`, new completions get 503,
// in-flight ones finish within the grace period, and whatever outlives it is ended with an error.
import { afterEach, describe, expect, it } from 'vitest'
import { completionBody, listen, post, readUntil, sseData, testNode, type TestNode } from './helpers.js'

let node: TestNode | null = null
afterEach(async () => {
  await node?.app.close()
  node = null
})

describe('drain', () => {
  it('turns /health to 503 draining and refuses new completions while an in-flight stream completes', async () => {
    node = testNode({ script: 'manual' })
    const base = await listen(node.app)
    const pending = post(base, completionBody({ stream: true, request_id: 'inflight' }))
    const seq = await node.engine.submission(0)
    seq.accept(3)
    seq.token('before ')
    const res = await pending
    const reader = res.body!.getReader()
    const got = { text: '' }
    await readUntil(reader, got, (t) => t.includes('before '))

    const drained = node.app.node.drain(60_000)
    expect(node.app.node.draining).toBe(true)
    expect(node.engine.drainCalls).toBe(1)

    const health = await fetch(`${base}/health`)
    expect(health.status).toBe(503)
    expect(((await health.json()) as { status: string }).status).toBe('draining')
    expect((await fetch(`${base}/health/live`)).status).toBe(200)

    const refused = await post(base, completionBody({ stream: true }))
    expect(refused.status).toBe(503)
    expect(refused.headers.get('retry-after')).toBe('1')
    expect(await refused.json()).toEqual({
      error: { message: 'The node is not ready to serve requests (loading, draining or unhealthy); retry later', type: 'service_unavailable', code: 503 },
    })
    // Refused before the body is read: even a malformed body gets the 503 that sends the router elsewhere.
    const malformed = await post(base, { bogus: true })
    expect(malformed.status).toBe(503)
    expect(node.engine.submissions).toHaveLength(1) // the refused requests never reached the engine

    // The in-flight stream goes on to its normal end.
    seq.token('after')
    seq.done('stop')
    await readUntil(reader, got, (t) => t.endsWith('data: [DONE]\n\n'))
    expect(
      sseData(got.text)
        .slice(0, -2)
        .map((f) => (JSON.parse(f) as { text: string }).text)
        .join(''),
    ).toBe('before after')
    expect(await drained).toEqual({ drained: true, aborted: 0 })
    expect(node.engine.cancellations).toEqual([])
  })

  it('logs each completion refused while draining as a warning without a stack, not as a failure (issue #32)', async () => {
    node = testNode({ script: 'manual' }, { captureLogs: true })
    const base = await listen(node.app)
    await node.app.node.drain(0)
    for (let i = 0; i < 3; i++) expect((await post(base, completionBody({ stream: i % 2 === 0 }))).status).toBe(503)
    const entries = node.logs.map((l) => JSON.parse(l) as { level: number; msg: string; code?: string; err?: unknown })
    const refused = entries.filter((e) => e.code === 'not_ready')
    expect(refused).toHaveLength(3)
    for (const e of refused) expect(e).toMatchObject({ level: 40, msg: 'The node is draining' })
    expect(entries.filter((e) => e.level >= 50)).toEqual([])
    expect(node.logs.join('\n')).not.toContain('"stack"')
  })

  it('resolves at once when nothing is in flight, and a second drain joins the first', async () => {
    node = testNode()
    const a = node.app.node.drain(60_000)
    const b = node.app.node.drain(0)
    expect(b).toBe(a)
    expect(await a).toEqual({ drained: true, aborted: 0 })
    expect(node.engine.drainCalls).toBe(1)
  })

  it('ends requests that outlive the grace period: SSE gets an error frame and [DONE], JSON a 503', async () => {
    node = testNode({ script: 'manual' })
    const base = await listen(node.app)
    const sse = post(base, completionBody({ stream: true, request_id: 'slow-sse' }))
    const s1 = await node.engine.submission(0)
    s1.accept(3)
    s1.token('x')
    const json = post(base, completionBody({ request_id: 'slow-json' }))
    const s2 = await node.engine.submission(1)
    s2.accept(3)
    const sseRes = await sse
    expect(node.app.node.inFlight()).toBe(2)

    // Neither sequence ever finishes, so the grace period (0 ms here) is what ends them.
    expect(await node.app.node.drain(0)).toEqual({ drained: false, aborted: 2 })
    expect(node.engine.cancellations.sort()).toEqual(['slow-json', 'slow-sse'])

    const frames = sseData(await sseRes.text())
    expect(frames.at(-1)).toBe('[DONE]')
    expect(JSON.parse(frames.at(-2)!)).toMatchObject({ error: { type: 'service_unavailable', code: 503 } })
    const jsonRes = await json
    expect(jsonRes.status).toBe(503)
    expect(jsonRes.headers.get('retry-after')).toBe('1')
  })

  it('app.close() without a drain ends in-flight requests instead of hanging', async () => {
    node = testNode({ script: 'manual' })
    const base = await listen(node.app)
    const sse = post(base, completionBody({ stream: true, request_id: 'closing' }))
    const seq = await node.engine.submission(0)
    seq.accept(1)
    const res = await sse
    await node.app.close()
    expect(node.engine.cancellations).toEqual(['closing'])
    expect(sseData(await res.text()).at(-1)).toBe('[DONE]')
    node = null
  })
})
