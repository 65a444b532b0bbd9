// The end-to-end stack of test/e2e: a real worker node (the engine pool over the embedded tiny default model, the
// node's HTTP app) listening on 127.0.0.1, and the real facade in front of it, polling its /health, reached through
// the official `openai` client. Owns only test wiring; imports the node, the engine pool and the facade fixture.
import OpenAI, { APIError } from 'openai'
import { afterAll, beforeAll, expect } from 'vitest'
import type { FastifyInstance } from 'fastify'
import { Agent, fetch as undiciFetch, type RequestInit as UndiciInit } from 'undici'
import { createEnginePool } from '../../src/engine/pool/pool.js'
import type { EngineClient, FinishObservation } from '../../src/engine/index.js'
import { buildNode } from '../../src/node/app.js'
import { readChatTemplate } from '../../src/node/options.js'
import { createMetrics, createRegistry } from '../../src/node/plugins/metrics.js'
import { facadeFixture, type FacadeFixture } from '../helpers/facade.js'
import { tinyPlainModelDir } from '../helpers/fixtures.js'
import { testOptions } from '../node/helpers.js'

export const MODEL = 'onnxd-tiny'
/** How often the facade polls the node's /health in these suites. */
export const HEALTH_INTERVAL_MS = 200

/** Which bundle a real node serves (default: the tiny default model as MODEL). */
export interface Bundle {
  modelDir?: string
  modelId?: string
  /** A chat template file served in place of the bundle's (--chat-template). */
  chatTemplateFile?: string
}

export interface RealNode {
  app: FastifyInstance
  engine: EngineClient
  url: string
  port: number
  /** Every sequence the engine finished (stop, length, abort, error), as its observer saw them. */
  finishes: FinishObservation[]
  /** Closes the app (in-flight requests end with an error) and then the pool. */
  close(): Promise<void>
}

/**
 * Starts a node on `port` (default: any free one). It listens before its model has loaded, as `onnxd node` does;
 * with `ready: false` the caller calls `engine.ready()` itself, and /health says `loading` until then.
 */
export async function startRealNode(o: { port?: number; ready?: boolean } & Bundle = {}): Promise<RealNode> {
  const finishes: FinishObservation[] = []
  const modelDir = o.modelDir ?? tinyPlainModelDir()
  const modelId = o.modelId ?? MODEL
  const metrics = createMetrics(createRegistry(), modelId, 'cpu')
  const engine = createEnginePool(
    { modelDir, modelId, workers: 1, intraOpThreads: 1, ...(o.chatTemplateFile ? { chatTemplate: readChatTemplate(o.chatTemplateFile) } : {}) },
    {
      ...metrics.observer,
      onFinish: (f) => {
        metrics.observer.onFinish?.(f)
        finishes.push(f)
      },
    },
  )
  const app = buildNode(testOptions({ model: modelDir, modelId, ...(o.chatTemplateFile ? { chatTemplate: o.chatTemplateFile } : {}) }), { engine, metrics, modelDir })
  try {
    await app.listen({ port: o.port ?? 0, host: '127.0.0.1' })
  } catch (e) {
    await engine.close()
    throw e
  }
  const addr = app.server.address()
  if (addr === null || typeof addr === 'string') throw new Error('no TCP address')
  if (o.ready !== false) await engine.ready()
  let closed: Promise<void> | null = null
  return {
    app,
    engine,
    url: `http://127.0.0.1:${addr.port}`,
    port: addr.port,
    finishes,
    close: () =>
      (closed ??= (async () => {
        await app.close()
        await engine.close()
      })()),
  }
}

type Fetch = NonNullable<ConstructorParameters<typeof OpenAI>[0]>['fetch']

export interface Stack {
  /** The node behind the facade; a test that replaces it (same port) puts the new one here, to be closed. */
  node: RealNode
  f: FacadeFixture
  /** The facade's /v1 base URL. */
  baseURL: string
  /** The facade's own origin (for its /health). */
  facadeUrl: string
  /** An `openai` client of `apiKey` (default: the fixture's key), with the SDK's retries off. */
  client(apiKey?: string): OpenAI
  close(): Promise<void>
}

/** A stack for one describe block: started before its tests, closed after them; `client` is its default key's. */
export function suiteStack(bundle: Bundle = {}): { readonly s: Stack; readonly client: OpenAI } {
  let s: Stack | undefined
  let client: OpenAI | undefined
  beforeAll(async () => {
    s = await startStack(bundle)
    client = s.client()
  })
  afterAll(() => s?.close())
  return {
    get s(): Stack {
      return s!
    },
    get client(): OpenAI {
      return client!
    },
  }
}

/** A ready real node and a listening facade in front of it that polls its health every HEALTH_INTERVAL_MS. */
export async function startStack(bundle: Bundle = {}): Promise<Stack> {
  const node = await startRealNode(bundle)
  const f = await facadeFixture({
    nodeUrls: [node.url],
    deps: { pollHealth: true },
    options: { healthIntervalMs: HEALTH_INTERVAL_MS, keyRpm: 0, fleetRpm: 0 },
  })
  const facadeUrl = await f.app.listen({ port: 0, host: '127.0.0.1' })
  const baseURL = `${facadeUrl}/v1`
  // The clients' own connections, closed with the stack.
  const clients = new Agent()
  const stack: Stack = {
    node,
    f,
    baseURL,
    facadeUrl,
    client: (apiKey = f.key) =>
      new OpenAI({
        apiKey,
        baseURL,
        maxRetries: 0,
        fetch: ((url: string | URL, init?: RequestInit) => undiciFetch(url, { ...(init as UndiciInit), dispatcher: clients })) as unknown as Fetch,
      }),
    async close() {
      // The clients go first. undici opens a spare connection after an aborted stream, and a connection that has
      // sent no request is not idle to Node's server.close(): the facade's close would wait a minute or more on it.
      await clients.destroy()
      await f.close()
      await stack.node.close()
    },
  }
  return stack
}

/** Polls `cond` until it holds (the facade learns of a node's state only at its next health poll). */
export async function waitFor(cond: () => Promise<boolean> | boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const t0 = Date.now()
  while (!(await cond())) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

/** The APIError `p` rejects with (anything else fails the test). */
export async function apiError(p: Promise<unknown>): Promise<APIError> {
  try {
    await p
  } catch (e) {
    if (e instanceof APIError) return e
    throw e
  }
  throw new Error('expected an APIError')
}

/** POSTs a body to the node's internal completion endpoint directly, bypassing the facade. */
export async function nodeCompletion(node: RealNode, body: Record<string, unknown>): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${node.url}/internal/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, ...body }),
  })
  return { status: res.status, body: (await res.json()) as Record<string, unknown> }
}

/** What the node answers a completion request (the fields the e2e suites compare against). */
export interface NodeAnswer {
  text: string
  finish_reason: 'stop' | 'length'
  usage: { prompt_tokens: number; completion_tokens: number }
}

/** The node's own answer to a request sent to it directly (it must be a 200). */
export async function nodeAnswer(node: RealNode, body: Record<string, unknown>): Promise<NodeAnswer> {
  const r = await nodeCompletion(node, body)
  expect(r.status).toBe(200)
  return r.body as unknown as NodeAnswer
}

/** A weather tool's parameters, as the tool suites give them (bounded, so that a constrained call ends soon). */
export const WEATHER_PARAMETERS = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 20 }, unit: { enum: ['c', 'f'] } },
  required: ['city', 'unit'],
  additionalProperties: false,
} as const

/** The facade's own /health: its status and what it believes of each node. */
export async function facadeHealth(s: Stack): Promise<{ status: number; nodes: { url: string; status: string }[] }> {
  const res = await fetch(`${s.facadeUrl}/health`)
  return { status: res.status, nodes: ((await res.json()) as { nodes: { url: string; status: string }[] }).nodes }
}

/** Micro-units a completion costs at the default price (docs/api.md, "Limits, usage and billing": 0.5 and 1.5 units per 1M prompt and
 * completion tokens, i.e. micro-units per token), rounded up per completion. */
export const defaultCostMicros = (u: { prompt_tokens: number; completion_tokens: number }): number =>
  Math.ceil(u.prompt_tokens * 0.5 + u.completion_tokens * 1.5)

/** The node's sequences aborted so far (take it before a client leaves a stream). */
export const abortCount = (s: Stack): number => s.node.finishes.filter((x) => x.finishReason === 'abort').length

/**
 * After a client of `key` read `read` deltas of one stream and left: waits for the node to abort the sequence and the
 * facade to bill the stream, then checks the bill: the node's prompt, no less than was read, no more than it generated.
 */
export async function expectBilledForWhatWasRead(s: Stack, key: string, read: number, abortsBefore: number): Promise<void> {
  await waitFor(() => abortCount(s) > abortsBefore, 'the node to abort the sequence')
  const aborted = s.node.finishes.filter((x) => x.finishReason === 'abort').at(-1)!
  let billed = { total: { requests: 0, prompt_tokens: 0, completion_tokens: 0 } }
  await waitFor(async () => {
    billed = (await s.client(key).get('/usage')) as typeof billed
    return billed.total.requests === 1
  }, 'the stream to be billed')
  expect(billed.total.prompt_tokens).toBe(aborted.promptTokens)
  expect(billed.total.completion_tokens).toBeGreaterThanOrEqual(read)
  expect(billed.total.completion_tokens).toBeLessThanOrEqual(aborted.completionTokens)
}
