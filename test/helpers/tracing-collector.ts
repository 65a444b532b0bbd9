// An in-test OpenTelemetry collector: a plain node:http server taking OTLP/HTTP JSON at POST /v1/traces, keeping
// every span it receives in a flat, decoded form. Used by the tracing suites.
import { createServer, type IncomingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'

/** A received span: ids as hex, times as nanoseconds since the epoch, attributes as plain values. */
export interface CollectedSpan {
  service: string
  traceId: string
  spanId: string
  /** '' for a root span. */
  parentSpanId: string
  name: string
  /** OTLP's SpanKind: 1 internal, 2 server, 3 client. */
  kind: number
  start: bigint
  end: bigint
  attributes: Record<string, unknown>
  /** OTLP's status code: 0 unset, 1 ok, 2 error. */
  status: { code: number; message?: string }
}

export const KIND = { internal: 1, server: 2, client: 3 } as const
export const STATUS_ERROR = 2

export interface Collector {
  /** The collector's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it. */
  url: string
  /** Every export request: its path and headers. */
  readonly requests: { path: string; headers: IncomingHttpHeaders }[]
  readonly spans: CollectedSpan[]
  /** The spans of one trace. */
  trace(traceId: string): CollectedSpan[]
  close(): Promise<void>
}

type AnyValue = { stringValue?: string; intValue?: number | string; boolValue?: boolean; doubleValue?: number; arrayValue?: { values?: AnyValue[] } }

function value(v: AnyValue): unknown {
  if (v.stringValue !== undefined) return v.stringValue
  if (v.intValue !== undefined) return Number(v.intValue)
  if (v.boolValue !== undefined) return v.boolValue
  if (v.doubleValue !== undefined) return v.doubleValue
  if (v.arrayValue !== undefined) return (v.arrayValue.values ?? []).map(value)
  return undefined
}

const attributes = (kvs: { key: string; value: AnyValue }[] | undefined): Record<string, unknown> =>
  Object.fromEntries((kvs ?? []).map((kv) => [kv.key, value(kv.value)]))

interface OtlpSpan {
  traceId: string
  spanId: string
  parentSpanId?: string
  name: string
  kind: number
  startTimeUnixNano: string | number
  endTimeUnixNano: string | number
  attributes?: { key: string; value: AnyValue }[]
  status?: { code?: number; message?: string }
}

interface OtlpBody {
  resourceSpans?: { resource?: { attributes?: { key: string; value: AnyValue }[] }; scopeSpans?: { spans?: OtlpSpan[] }[] }[]
}

export async function startCollector(): Promise<Collector> {
  const requests: Collector['requests'] = []
  const spans: CollectedSpan[] = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      requests.push({ path: req.url ?? '', headers: req.headers })
      if (req.method !== 'POST' || req.url !== '/v1/traces' || !/json/.test(req.headers['content-type'] ?? '')) {
        res.writeHead(400).end()
        return
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as OtlpBody
      for (const rs of body.resourceSpans ?? []) {
        const service = String(attributes(rs.resource?.attributes)['service.name'])
        for (const ss of rs.scopeSpans ?? []) {
          for (const s of ss.spans ?? []) {
            spans.push({
              service,
              traceId: s.traceId,
              spanId: s.spanId,
              parentSpanId: s.parentSpanId ?? '',
              name: s.name,
              kind: s.kind,
              start: BigInt(s.startTimeUnixNano),
              end: BigInt(s.endTimeUnixNano),
              attributes: attributes(s.attributes),
              status: { code: s.status?.code ?? 0, ...(s.status?.message ? { message: s.status.message } : {}) },
            })
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    spans,
    trace: (traceId) => spans.filter((s) => s.traceId === traceId),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

/** A fresh W3C trace context, as a client would send it (sampled). */
export function clientTraceparent(): { traceId: string; spanId: string; header: string } {
  const hex = (n: number): string => Array.from({ length: n }, () => Math.floor(Math.random() * 16).toString(16)).join('')
  const traceId = hex(32)
  const spanId = hex(16)
  return { traceId, spanId, header: `00-${traceId}-${spanId}-01` }
}

/** Polls `cond` until it holds (spans arrive after the answers that made them). */
export async function until(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const t0 = Date.now()
  while (!(await cond())) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

/** The spans of `traceId` once `n` have arrived, flushing the exporters (`flush`) as it waits. */
export async function arrived(collector: Collector, traceId: string, n: number, flush: () => Promise<unknown>): Promise<CollectedSpan[]> {
  await until(async () => {
    await flush()
    return collector.trace(traceId).length >= n
  }, `${n} spans of the trace`)
  return collector.trace(traceId)
}
