// Both servers' /metrics through the real tools an operator runs (issue #35): Debian's `promtool check metrics` on
// a real node's and a real facade's output, and a real Prometheus scraping both every second under a light mixed
// load (chat, streamed, completions, a tool call, a json_schema answer, cancelled streams, refused requests), asked
// through its HTTP API for every expression of deploy/grafana/onnxd-dashboard.json, each of which must return data;
// the outcome counts it reads back are the load's. Each suite reports as skipped, with its reason, where its tool is
// absent; .ci/run installs Debian's prometheus package (both tools).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DEPRECATED_METRICS } from '../../src/node/plugins/metrics.js'
import { apiError, MODEL, suiteStack, waitFor, type Stack } from './stack.js'

const REPO = join(import.meta.dirname, '../..')

/** The tool's version line, or why it cannot run here. */
function tool(cmd: string): { version: string | null; reason: string } {
  const r = spawnSync(cmd, ['--version'], { encoding: 'utf8' })
  if (r.error || r.status !== 0) return { version: null, reason: `${cmd} is not installed (Debian: apt-get install prometheus)` }
  return { version: (r.stdout || r.stderr).trim().split('\n')[0]!, reason: '' }
}
const promtool = tool('promtool')
const prometheus = tool('prometheus')

/** What one round of load sends, by how the facade should count it. */
const ROUND = { ok: 6, client_gone: 1, client_error: 2 }

const WEATHER: OpenAI.ChatCompletionTool = {
  type: 'function',
  function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'], additionalProperties: false } },
}

/**
 * One round of a light mixed load through the facade: a chat answer, a streamed one, a legacy completion, a forced
 * tool call, a json_schema answer, a second chat (ok: 6); a stream the client leaves after three deltas
 * (client_gone: 1); a wrong key and an unknown model (client_error: 2).
 */
async function round(s: Stack, client: OpenAI, i: number): Promise<void> {
  const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: `Say something about the number ${i}` }]
  await Promise.all([
    client.chat.completions.create({ model: MODEL, messages, max_tokens: 8 }),
    (async () => {
      const stream = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 8, stream: true })
      for await (const chunk of stream) void chunk
    })(),
    client.completions.create({ model: MODEL, prompt: `Once upon a time ${i}`, max_tokens: 8 }),
    client.chat.completions.create({ model: MODEL, messages, tools: [WEATHER], tool_choice: 'required', max_tokens: 60 }),
    client.chat.completions.create({
      model: MODEL,
      messages,
      max_tokens: 60,
      response_format: { type: 'json_schema', json_schema: { name: 'n', strict: true, schema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false } } },
    }),
  ])
  await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4 })
  // A client that leaves: onnxd's ignore_eos keeps the stream going until it does.
  const long = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 1500, stream: true, ...({ ignore_eos: true } as object) })
  let read = 0
  for await (const chunk of long) if (chunk.choices[0]?.delta.content && ++read === 3) break
  expect((await apiError(s.client('sk-not-a-key').chat.completions.create({ model: MODEL, messages, max_tokens: 4 }))).status).toBe(401)
  expect((await apiError(client.chat.completions.create({ model: 'no-such-model', messages, max_tokens: 4 }))).status).toBe(422)
}

const text = async (url: string): Promise<string> => {
  const res = await fetch(url)
  expect(res.status).toBe(200)
  return res.text()
}

/** `promtool check metrics` on a text: its exit code and the problems it lists, one a line. */
function promtoolCheck(metrics: string): { code: number | null; problems: string[] } {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: metrics, encoding: 'utf8' })
  return { code: r.status, problems: `${r.stdout}\n${r.stderr}`.split('\n').map((l) => l.trim()).filter(Boolean) }
}

/** The text without the families of these metric names (HELP, TYPE and samples). */
function withoutFamilies(metrics: string, names: string[]): string {
  const family = (line: string): string | undefined => /^(?:# (?:HELP|TYPE) )?([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(line)?.[1]
  return metrics
    .split('\n')
    .filter((l) => {
      const f = family(l)
      return f === undefined || !names.some((n) => f === n || (f.startsWith(n) && /^_(bucket|sum|count)$/.test(f.slice(n.length))))
    })
    .join('\n')
}

const neither = promtool.version === null && prometheus.version === null
describe.skipIf(neither)(`both servers' /metrics through Prometheus's own tools${neither ? ` (skipped: ${prometheus.reason})` : ''}`, () => {
  const stack = suiteStack()
  let rounds = 0
  const load = async (n: number, gapMs = 0): Promise<void> => {
    for (let i = 0; i < n; i++) {
      if (i > 0 && gapMs > 0) await new Promise((r) => setTimeout(r, gapMs))
      await round(stack.s, stack.client, rounds++)
    }
  }

  describe.skipIf(promtool.version === null)(`promtool check metrics (${promtool.version ?? `skipped: ${promtool.reason}`})`, () => {
    it('accepts every name the facade exports, process metrics included', async () => {
      await load(1)
      const metrics = await text(`${stack.s.facadeUrl}/metrics`)
      expect(metrics).toContain('onnxd_facade_requests_total{')
      expect(metrics).toContain('process_cpu_seconds_total ')
      expect(promtoolCheck(metrics)).toEqual({ code: 0, problems: [] })
    })

    it("accepts every name the node exports but the deprecated ones kept for one release, and only complains of those", async () => {
      const metrics = await text(`${stack.s.node.url}/metrics`)
      expect(metrics).toContain('nodejs_eventloop_lag_seconds ')
      const all = promtoolCheck(metrics)
      expect(all.problems.sort()).toEqual(DEPRECATED_METRICS.map((d) => `${d.name} non-counter metrics should not have "_total" suffix`).sort())
      expect(promtoolCheck(withoutFamilies(metrics, DEPRECATED_METRICS.map((d) => d.name)))).toEqual({ code: 0, problems: [] })
    })
  })

  describe.skipIf(prometheus.version === null)(`a real Prometheus (${prometheus.version ?? `skipped: ${prometheus.reason}`})`, () => {
    let dir: string
    let proc: ChildProcess | null = null
    let api: string
    const query = async (q: string): Promise<{ metric: Record<string, string>; value: [number, string] }[]> => {
      const res = await fetch(`${api}/api/v1/query?query=${encodeURIComponent(q)}`)
      const body = (await res.json()) as { status: string; error?: string; data?: { result: { metric: Record<string, string>; value: [number, string] }[] } }
      if (body.status !== 'success') throw new Error(`${q}: ${body.error}`)
      return body.data!.result
    }
    const scalar = async (q: string): Promise<number> => Number((await query(q))[0]?.value[1] ?? NaN)

    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), 'onnxd-prometheus-'))
      const port = await freePort()
      api = `http://127.0.0.1:${port}`
      const hostOf = (url: string): string => new URL(url).host
      writeFileSync(
        join(dir, 'prometheus.yml'),
        [
          'global: { scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s }',
          'scrape_configs:',
          `  - { job_name: onnxd-node, static_configs: [{ targets: ['${hostOf(stack.s.node.url)}'] }] }`,
          `  - { job_name: onnxd-facade, static_configs: [{ targets: ['${hostOf(stack.s.facadeUrl)}'] }] }`,
          '',
        ].join('\n'),
      )
      proc = spawn('prometheus', [`--config.file=${join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'], {
        stdio: ['ignore', 'ignore', 'pipe'],
      })
      let log = ''
      proc.stderr!.on('data', (b: Buffer) => (log += b.toString()))
      await waitFor(async () => {
        if (proc!.exitCode !== null) throw new Error(`prometheus exited (${proc!.exitCode}): ${log}`)
        return (await fetch(`${api}/-/ready`).catch(() => null))?.status === 200
      }, 'Prometheus to be ready')
      // Both targets scraped twice before the load, so that every counter's increase shows in rate().
      await waitFor(async () => (await query('up == 1')).length === 2 && (await scalar('min(count_over_time(up[1m]))')) >= 2, 'both targets to be scraped twice')
      // Three rounds a scrape or so apart, then until Prometheus has scraped after the last (a stream's hang-up is
      // counted as its response closes).
      await load(3, 1100)
      await waitFor(async () => (await scalar('sum(onnxd_facade_requests_total{outcome="client_gone"})')) === rounds * ROUND.client_gone, 'the hang-ups to be scraped')
      await waitFor(async () => (await scalar('sum(onnxd_request_failures_total{outcome="client_gone"})')) === rounds * ROUND.client_gone, "the node's hang-ups to be scraped")
      // Then a scrape of both targets that began after this moment. The scrape the waits above saw came after the last
      // hang-up, not necessarily after the last count: a refusal answered after a round's hang-ups was once missing
      // (7 client errors of 8). By now every count is in (each response was sent before load() returned, and the
      // hang-ups were just seen), so a later scrape has them all.
      const after = Date.now() / 1000
      await waitFor(async () => (await scalar('min(timestamp(up))')) > after, 'a scrape of both targets after the load')
    })
    afterAll(async () => {
      if (proc && proc.exitCode === null) {
        proc.kill('SIGTERM')
        await once(proc, 'exit')
      }
      if (dir) rmSync(dir, { recursive: true, force: true })
    })

    it('counts the load as it went: what was answered, refused and left by its client, with no error of the service', async () => {
      expect(rounds).toBeGreaterThanOrEqual(3)
      const v1 = (outcome: string): Promise<number> => scalar(`sum(onnxd_facade_requests_total{endpoint=~"/v1/.*", outcome="${outcome}"}) or vector(0)`)
      expect(await v1('ok')).toBe(rounds * ROUND.ok)
      expect(await v1('client_error')).toBe(rounds * ROUND.client_error)
      expect(await v1('server_error')).toBe(0)
      expect(await scalar('sum(onnxd_request_failures_total{outcome="server_error"}) or vector(0)')).toBe(0)
      // The deprecated names still carry the same values as the new ones.
      expect(await scalar('sum(onnxd_iteration_tokens_total_count)')).toBe(await scalar('sum(onnxd_iteration_tokens_count)'))
      expect(await scalar('sum(process_resident_memory_bytes)')).toBeGreaterThan(0)
    })

    it('answers every expression of the Grafana dashboard with data', async () => {
      const dashboard = JSON.parse(readFileSync(join(REPO, 'deploy/grafana/onnxd-dashboard.json'), 'utf8')) as Dashboard
      const panels = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])])
      const exprs = panels.flatMap((p) => (p.targets ?? []).map((t) => ({ where: `panel "${p.title}" ${t.refId}`, expr: t.expr ?? '' })))
      expect(exprs.length).toBeGreaterThan(40)
      const grafana = (e: string): string => e.replaceAll('$__rate_interval', '1m').replaceAll('$model_name', '.*').replaceAll('$instance', '.*')
      const problems: string[] = []
      const shown: string[] = []
      for (const { where, expr } of exprs) {
        const result = await query(grafana(expr))
        if (result.length === 0) problems.push(`${where}: no series: ${expr}`)
        else if (!result.some((r) => Number.isFinite(Number(r.value[1])))) problems.push(`${where}: only NaN: ${expr}`)
        // What the latency and batch panels read on the tiny model (printed, not asserted).
        if (/End-to-end|Batch size|Facade request duration/.test(where)) shown.push(`${where}: ${result.map((r) => `${r.metric.phase ?? ''} ${Number(r.value[1]).toPrecision(3)}`.trim()).join(', ')}`)
      }
      console.log(`[prometheus] what the dashboard reads on the tiny model:\n  ${shown.join('\n  ')}`)
      // The variables: Grafana's label_values(selector, label), as Prometheus's label-values API answers it.
      for (const v of dashboard.templating.list.filter((x) => x.type === 'query')) {
        const m = /^label_values\((.*), *(\w+)\)$/.exec(v.definition ?? '')
        if (!m) {
          problems.push(`variable ${v.name}: not label_values(...): ${v.definition}`)
          continue
        }
        const res = await fetch(`${api}/api/v1/label/${m[2]}/values?match[]=${encodeURIComponent(grafana(m[1]!))}`)
        const values = ((await res.json()) as { data: string[] }).data
        if (values.length === 0) problems.push(`variable ${v.name}: no values: ${v.definition}`)
      }
      expect(problems).toEqual([])
    })
  })
})

interface Panel {
  title?: string
  targets?: { expr?: string; refId?: string }[]
  panels?: Panel[]
}
interface Dashboard {
  panels: Panel[]
  templating: { list: { name: string; type: string; definition?: string }[] }
}

async function freePort(): Promise<number> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const addr = server.address()
  server.close()
  await once(server, 'close')
  if (addr === null || typeof addr === 'string') throw new Error('no TCP address')
  return addr.port
}
