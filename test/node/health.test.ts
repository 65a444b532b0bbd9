// GET /health and /health/live over every pool state, and the node's own draining state.
import { afterEach, describe, expect, it } from 'vitest'
import type { PoolHealth } from '../../src/engine/index.js'
import { testNode, type TestNode } from './helpers.js'
import { tinyPlainModelDir, fixture, haveFixtures } from '../helpers/fixtures.js'

let node: TestNode | null = null
afterEach(async () => {
  await node?.app.close()
  node = null
})

describe('GET /health', () => {
  it('answers 200 with the router-facing body when the pool is ready', async () => {
    node = testNode({
      health: {
        running: 3,
        waiting: 2,
        capacity: 315,
        freeSlots: 59,
        kvUsedBytes: 16 * 1024 * 1024,
        kvBudgetBytes: 64 * 1024 * 1024,
        restarts: 1,
        // Three configured, two serving: the third is being replaced (restarts 1).
        configuredWorkers: 3,
        workers: [
          { threadId: 1, ready: true, heartbeatAgeMs: 3, stats: null },
          { threadId: 2, ready: true, heartbeatAgeMs: 4, stats: null },
        ],
      },
    })
    const res = await node.app.inject({ method: 'GET', url: '/health' })
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({
      status: 'ready',
      models: ['onnxd-tiny'],
      provider: 'cpu',
      runtime: 'capi',
      workers: { total: 3, ready: 2 },
      running: 3,
      waiting: 2,
      capacity: 315,
      free_slots: 59,
      kv_cache: { used_bytes: 16 * 1024 * 1024, budget_bytes: 64 * 1024 * 1024, usage: 0.25, prefix_cache_bytes: 0 },
      restarts: 1,
      context_length: 2048,
    })
  })

  it.each<[PoolHealth['status']]>([['loading'], ['unhealthy'], ['draining']])('answers 503 with status %s when the pool says so', async (status) => {
    node = testNode({ health: { status, contextLength: status === 'loading' ? null : 2048, capacity: 100 } })
    const res = await node.app.inject({ method: 'GET', url: '/health' })
    expect(res.statusCode).toBe(503)
    const body = res.json<{ status: string; capacity: number; free_slots: number; context_length: number | null }>()
    expect(body.status).toBe(status)
    expect(body.capacity).toBe(0) // routers send nothing to a node that is not ready
    expect(body.free_slots).toBe(0)
    if (status === 'loading') expect(body.context_length).toBeNull()
  })

  it('says which provider actually runs', async () => {
    node = testNode({ health: { provider: 'cuda' } })
    expect((await node.app.inject({ method: 'GET', url: '/health' })).json<{ provider: string }>().provider).toBe('cuda')
  })

  it('answers 503 draining once the node drains, even while the pool still reports ready', async () => {
    node = testNode()
    // The fake's drain() would flip its own status; keep it `ready` to prove the node's state decides.
    node.engine.drain = () => {}
    const drained = node.app.node.drain(1000)
    const res = await node.app.inject({ method: 'GET', url: '/health' })
    expect(res.statusCode).toBe(503)
    expect(res.json<{ status: string }>().status).toBe('draining')
    expect(await drained).toEqual({ drained: true, aborted: 0 })
  })

  it('answers 503 unhealthy when the engine health() throws', async () => {
    node = testNode()
    node.engine.health = () => {
      throw new Error('pool gone')
    }
    const res = await node.app.inject({ method: 'GET', url: '/health' })
    expect(res.statusCode).toBe(503)
    expect(res.json()).toMatchObject({ status: 'unhealthy', models: ['onnxd-tiny'], provider: 'cpu', workers: { total: 0, ready: 0 } })
  })
})

describe('GET /health/live', () => {
  it('answers 200 alive whatever the pool state', async () => {
    node = testNode({ health: { status: 'unhealthy' } })
    const res = await node.app.inject({ method: 'GET', url: '/health/live' })
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({ status: 'alive' })
  })
})

describe('GET /health: chat_template', () => {
  const chatTemplate = async (modelDir: string): Promise<unknown> => {
    node = testNode({}, { deps: { modelDir } })
    return (await node.app.inject({ method: 'GET', url: '/health' })).json().chat_template
  }

  it('says whether the served bundle has a chat template (the facade lists chat for it only then)', async () => {
    expect(await chatTemplate(tinyPlainModelDir())).toBe(true)
  })

  it.skipIf(!haveFixtures)('is false for a base model without one (stories260K-hf)', async () => {
    expect(await chatTemplate(fixture('stories260K-hf'))).toBe(false)
  })

  it('is left out when the bundle cannot be read', async () => {
    expect(await chatTemplate('/nonexistent/bundle')).toBeUndefined()
  })
})
