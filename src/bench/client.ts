// One streamed completion as the load generator sees it: sends a request over HTTP (undici) in the node's internal
// contract or the facade's OpenAI chat shape, reads the SSE stream, and times every delta. TTFT is the time to the
// first delta that carries a token; ITL is the gap between consecutive such deltas (vLLM's definitions).
// Imports: undici, contract types, workload types.
import { Agent, request } from 'undici'
import { COMPLETIONS_PATH, type StreamEvent } from '../contract/completions.js'
import type { WorkItem } from './workload.js'

export type Protocol = 'node' | 'openai'

export interface Endpoint {
  /** Base URL, e.g. http://127.0.0.1:8081 (no trailing slash). */
  url: string
  protocol: Protocol
  /** The model id to request. */
  model: string
  apiKey?: string
}

export interface Sampling {
  temperature: number
  ignoreEos: boolean
}

/** How one request went. Times are milliseconds; `startMs` is from the level's start. */
export interface RequestRecord {
  ok: boolean
  /** '200' on success; otherwise the HTTP status, `stream:<code>` for an error event, or `network`. */
  status: string
  /** Cut off by the level's deadline (not an error). */
  cut: boolean
  startMs: number
  /** NaN when no token arrived. */
  ttftMs: number
  itlMs: number[]
  e2eMs: number
  promptTokens: number
  /** Prompt tokens the server's prefix cache gave (usage.prompt_tokens_details.cached_tokens; 0 when not said). */
  cachedTokens: number
  /** From the final usage when there is one; else the tokens counted in deltas (partial for cut requests). */
  outputTokens: number
  error?: string
}

export const CHAT_PATH = '/v1/chat/completions'

/** A connection pool sized for the level's concurrency (plus health checks), one per target. */
export function createAgent(connections: number): Agent {
  return new Agent({ connections: Math.max(1, connections) + 4, keepAliveTimeout: 30_000, headersTimeout: 0, bodyTimeout: 0 })
}

function body(ep: Endpoint, item: WorkItem, s: Sampling, id: string): Record<string, unknown> {
  const sampling = { max_tokens: item.maxTokens, temperature: s.temperature, ...(s.ignoreEos ? { ignore_eos: true } : {}) }
  if (ep.protocol === 'node') return { model: ep.model, ...item.input, ...sampling, stream: true, request_id: id }
  if (!('messages' in item.input)) throw new Error('the OpenAI chat endpoint needs chat messages')
  return { model: ep.model, messages: item.input.messages, ...sampling, stream: true, stream_options: { include_usage: true } }
}

interface Delta {
  tokens: number
  usage?: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens?: number } }
  error?: string
}

/** Tokens in one SSE data payload of either protocol. */
function parseEvent(protocol: Protocol, data: string): Delta {
  const v = JSON.parse(data) as Record<string, unknown>
  if (v.error) {
    const e = v.error as { code?: number; message?: string }
    return { tokens: 0, error: `stream:${e.code ?? 'error'}: ${e.message ?? ''}` }
  }
  if (protocol === 'node') {
    const e = v as StreamEvent & { ids?: number[]; usage?: Delta['usage']; text?: string }
    const tokens = e.ids ? e.ids.length : e.text ? 1 : 0
    return { tokens: 'finish_reason' in e ? 0 : tokens, ...(e.usage ? { usage: e.usage } : {}) }
  }
  const choices = (v.choices ?? []) as { delta?: { content?: string | null } }[]
  const content = choices[0]?.delta?.content
  const usage = v.usage as Delta['usage'] | null | undefined
  return { tokens: content ? 1 : 0, ...(usage ? { usage } : {}) }
}

/**
 * Sends `item` and streams the answer. Never throws: failures come back as records with `ok: false`. `t0` is the
 * level's start (performance.now()); `signal` aborts at the level's deadline, which marks the record `cut`.
 */
export async function sendRequest(agent: Agent, ep: Endpoint, item: WorkItem, s: Sampling, id: string, t0: number, signal: AbortSignal): Promise<RequestRecord> {
  const start = performance.now()
  const promptTokens = 'input_ids' in item.input ? item.input.input_ids.length : 0
  const rec: RequestRecord = { ok: false, status: 'network', cut: false, startMs: start - t0, ttftMs: NaN, itlMs: [], e2eMs: 0, promptTokens, cachedTokens: 0, outputTokens: 0 }
  let last = 0
  let usage: Delta['usage']
  try {
    const res = await request(ep.url + (ep.protocol === 'node' ? COMPLETIONS_PATH : CHAT_PATH), {
      dispatcher: agent,
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...(ep.apiKey ? { authorization: `Bearer ${ep.apiKey}` } : {}) },
      body: JSON.stringify(body(ep, item, s, id)),
      signal,
    })
    rec.status = String(res.statusCode)
    if (res.statusCode !== 200) {
      const text = await res.body.text()
      rec.error = text.slice(0, 200)
      return finish(rec, start)
    }
    let buf = ''
    let done = false
    for await (const chunk of res.body) {
      const now = performance.now()
      buf += (chunk as Buffer).toString('utf8')
      let cut: number
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const frame = buf.slice(0, cut)
        buf = buf.slice(cut + 2)
        const data = frame
          .split('\n')
          .filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(5).trimStart())
          .join('\n')
        if (!data) continue
        if (data === '[DONE]') {
          done = true
          continue
        }
        const d = parseEvent(ep.protocol, data)
        if (d.error) {
          rec.status = d.error.split(':', 2).join(':')
          rec.error = d.error
          return finish(rec, start)
        }
        if (d.usage) usage = d.usage
        if (d.tokens > 0) {
          if (Number.isNaN(rec.ttftMs)) rec.ttftMs = now - start
          else rec.itlMs.push(now - last)
          last = now
          rec.outputTokens += d.tokens
        }
      }
    }
    if (!done) {
      rec.status = 'truncated'
      rec.error = 'stream ended without [DONE]'
      return finish(rec, start)
    }
    if (usage) {
      rec.outputTokens = usage.completion_tokens
      rec.promptTokens = usage.prompt_tokens
      rec.cachedTokens = usage.prompt_tokens_details?.cached_tokens ?? 0
    }
    rec.ok = true
    rec.status = '200'
    return finish(rec, start)
  } catch (e) {
    if (signal.aborted) {
      rec.cut = true
      rec.status = 'cut'
    } else rec.error = (e as Error).message
    return finish(rec, start)
  }
}

function finish(rec: RequestRecord, start: number): RequestRecord {
  rec.e2eMs = performance.now() - start
  return rec
}

/** GET a JSON document (health, model list); null on any failure. */
export async function getJson(agent: Agent, url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: unknown } | null> {
  try {
    const res = await request(url, { dispatcher: agent, headers, signal: AbortSignal.timeout(5000) })
    const text = await res.body.text()
    let parsed: unknown = null
    try {
      parsed = JSON.parse(text)
    } catch {
      parsed = text
    }
    return { status: res.statusCode, body: parsed }
  } catch {
    return null
  }
}
