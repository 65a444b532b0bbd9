// `onnxd node --provider webgpu` (issue #33) in a process of its own, from src/ under tsx: where WebGPU has an adapter
// the node serves a completion and /health and onnxd_info name webgpu (the C-API runtime with its cache on the device
// for a GroupQueryAttention graph or a plain one, the JS API, saying why, for a stacked cache); where it has none (here: Vulkan pointed at no
// driver, VK_DRIVER_FILES) start-up stops with one line saying so, or with --allow-cpu-fallback runs on CPU and says
// cpu. The no-adapter cases need no GPU and run everywhere; the first is skipped, saying why, without an adapter.
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { fixture, haveFixtures, tinyPlainModelDir, tinyGqaModelDir } from '../helpers/fixtures.js'
import { freePort } from '../helpers/servers.js'
import { noWebgpu, webgpuTitle } from '../helpers/webgpu.js'
import { completionBody, post } from './helpers.js'

const ENTRY = join(import.meta.dirname, '../helpers/onnxd-src.ts')
/** A Vulkan driver list naming no driver: Dawn finds no adapter, on any machine. */
const NO_DRIVER = { VK_DRIVER_FILES: join(tmpdir(), 'onnxd-no-such-vulkan-driver.json') }

let child: ChildProcess | null = null
afterEach(async () => {
  if (child && child.exitCode === null && child.signalCode === null) {
    child.kill('SIGKILL')
    await once(child, 'exit')
  }
  child = null
})

/** Starts `onnxd node <argv>` on a free port with no ONNXD_* variables of ours; `exited` resolves with its exit. */
async function startNode(argv: string[], env: Record<string, string> = {}, model = tinyPlainModelDir()): Promise<{ url: string; stderr: () => string; exited: Promise<number | null> }> {
  const port = await freePort()
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ONNXD_') && k !== 'VK_ICD_FILENAMES'))
  const c = spawn(process.execPath, ['--import', 'tsx', ENTRY, 'node', '--port', String(port), '--model', model, '--workers', '1', ...argv], {
    env: { ...base, ONNXD_DATA_DIR: mkdtempSync(join(tmpdir(), 'onnxd-webgpu-')), ONNXD_LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  child = c
  let stderr = ''
  c.stderr!.on('data', (b: Buffer) => (stderr += b.toString()))
  const exited = once(c, 'exit').then(([code]) => code as number | null)
  return { url: `http://127.0.0.1:${port}`, stderr: () => stderr, exited }
}

/** Polls /health until ready; throws with the node's stderr if it exits first. */
async function ready(n: { url: string; stderr: () => string; exited: Promise<number | null> }): Promise<Record<string, unknown>> {
  let gone = false
  void n.exited.then(() => (gone = true))
  for (;;) {
    if (gone) throw new Error(`the node exited before it was ready:\n${n.stderr()}`)
    const res = await fetch(`${n.url}/health`).catch(() => null)
    if (res?.status === 200) return (await res.json()) as Record<string, unknown>
    await new Promise((r) => setTimeout(r, 100))
  }
}

describe('onnxd node --provider webgpu', () => {
  it.skipIf(noWebgpu !== null)(webgpuTitle('on a plain graph, serves a completion from the C-API runtime, its cache on the device; /health and onnxd_info say webgpu'), { timeout: 300_000 }, async () => {
    // 8 rows: the worker's warm-up steps up to --max-running rows, and a plain graph's step attends over each slot's
    // whole length (2,048 here), which takes lavapipe about 0.7 s a step at 64 rows.
    const n = await startNode(['--provider', 'webgpu', '--max-running', '8'])
    expect(await ready(n)).toMatchObject({ status: 'ready', provider: 'webgpu', runtime: 'capi' })
    const res = await post(n.url, completionBody({ max_tokens: 4, ignore_eos: true, temperature: 0 }))
    expect(res.status).toBe(200)
    const body = (await res.json()) as { output_ids: number[]; usage: { completion_tokens: number } }
    expect(body.output_ids).toHaveLength(4)
    expect(body.usage.completion_tokens).toBe(4)
    const metrics = await (await fetch(`${n.url}/metrics`)).text()
    expect(metrics).toMatch(/onnxd_info\{model_name="onnxd-tiny",provider="webgpu",runtime="capi"\} 1/)
  })

  it.skipIf(noWebgpu !== null)(webgpuTitle('on a GroupQueryAttention graph, serves from the C-API runtime with its cache on the device'), { timeout: 300_000 }, async () => {
    const n = await startNode(['--provider', 'webgpu'], {}, tinyGqaModelDir())
    expect(await ready(n)).toMatchObject({ status: 'ready', provider: 'webgpu', runtime: 'capi' })
    // The worker warmed its step shapes up before it said ready (Engine.warmUp); /metrics counts none of those steps.
    expect(await (await fetch(`${n.url}/metrics`)).text()).not.toMatch(/onnxd_iteration_tokens_count\{model_name="onnxd-tiny-gqa",phase="decode"\} [1-9]/)
    const res = await post(n.url, completionBody({ model: 'onnxd-tiny-gqa', max_tokens: 6, ignore_eos: true, temperature: 0 }))
    expect(res.status).toBe(200)
    expect(((await res.json()) as { output_ids: number[] }).output_ids).toHaveLength(6)
    // The worker posts a request's step observations right after its last step, apart from its response: they may
    // reach /metrics a moment after it.
    const decodeSteps = (m: string): number => Number(/onnxd_iteration_tokens_count\{model_name="onnxd-tiny-gqa",phase="decode"\} (\d+)/.exec(m)?.[1] ?? 0)
    let metrics = await (await fetch(`${n.url}/metrics`)).text()
    for (const until = Date.now() + 2000; decodeSteps(metrics) < 5 && Date.now() < until; ) {
      await new Promise((r) => setTimeout(r, 50))
      metrics = await (await fetch(`${n.url}/metrics`)).text()
    }
    expect(metrics).toMatch(/onnxd_info\{model_name="onnxd-tiny-gqa",provider="webgpu",runtime="capi"\} 1/)
    // Decode steps hand ORT a few bytes, not the cache: well under a kilobyte each at batch 1.
    const decodeIn = Number(/onnxd_step_io_bytes_total\{model_name="onnxd-tiny-gqa",phase="decode",direction="in"\} (\d+)/.exec(metrics)?.[1])
    const steps = decodeSteps(metrics)
    // The completion's own steps only: its first token comes from the prompt's step, the other 5 from decode steps.
    expect(steps).toBe(5)
    expect(decodeIn / steps).toBeLessThan(64)
  })

  it.skipIf(noWebgpu !== null)(webgpuTitle("with --graph-capture, serves the CPU's tokens from the captured decode step and counts its replays"), { timeout: 300_000 }, async () => {
    const body = completionBody({ model: 'onnxd-tiny-gqa', max_tokens: 8, ignore_eos: true, temperature: 0 })
    const cpu = await startNode([], {}, tinyGqaModelDir())
    await ready(cpu)
    const want = ((await (await post(cpu.url, body)).json()) as { output_ids: number[] }).output_ids
    cpu.exited.catch(() => {})
    child!.kill('SIGKILL')
    await cpu.exited
    const n = await startNode(['--provider', 'webgpu', '--graph-capture', '--max-running', '4'], {}, tinyGqaModelDir())
    expect(await ready(n)).toMatchObject({ status: 'ready', provider: 'webgpu', runtime: 'capi' })
    const res = await post(n.url, body)
    expect(res.status).toBe(200)
    expect(((await res.json()) as { output_ids: number[] }).output_ids).toEqual(want)
    // The warm-up captured the step before ready (not counted); the completion's 7 decode steps replayed it.
    const replays = (m: string): number => Number(/onnxd_graph_replays_total\{model_name="onnxd-tiny-gqa"\} (\d+)/.exec(m)?.[1] ?? -1)
    let metrics = await (await fetch(`${n.url}/metrics`)).text()
    for (const until = Date.now() + 2000; replays(metrics) < 7 && Date.now() < until; ) {
      await new Promise((r) => setTimeout(r, 50))
      metrics = await (await fetch(`${n.url}/metrics`)).text()
    }
    expect(replays(metrics)).toBe(7)
  })

  it.skipIf(noWebgpu !== null || !haveFixtures)(webgpuTitle('on a graph whose cache cannot stay on the device (a stacked one), runs the JS API and says why at start'), { timeout: 300_000 }, async () => {
    const n = await startNode(['--provider', 'webgpu'], {}, fixture('tiny-random-gpt2-fp16'))
    expect(await ready(n)).toMatchObject({ status: 'ready', provider: 'webgpu', runtime: 'js' })
    expect(n.stderr()).toMatch(/runtime 'capi' cannot keep the KV cache on webgpu: .*past\.onnx has a stacked cache .*; its steps run through the JS API/)
  })

  it('without an adapter, stops start-up with one line naming webgpu and the way out, exit 1', { timeout: 120_000 }, async () => {
    const n = await startNode(['--provider', 'webgpu'], NO_DRIVER)
    expect(await n.exited).toBe(1)
    // Above it, the Vulkan loader and Dawn write their own warnings to stderr.
    const last = n.stderr().trimEnd().split('\n').at(-1)
    expect(last).toMatch(/^onnxd node: execution provider 'webgpu' has no GPU adapter \(No supported adapters\): .*Vulkan.* ONNXD_ALLOW_CPU_FALLBACK=1\.$/)
  })

  it('without an adapter and with --allow-cpu-fallback, runs on CPU and /health says cpu', { timeout: 120_000 }, async () => {
    const n = await startNode(['--provider', 'webgpu', '--allow-cpu-fallback'], NO_DRIVER)
    expect(await ready(n)).toMatchObject({ status: 'ready', provider: 'cpu' })
    const res = await post(n.url, completionBody({ max_tokens: 2 }))
    expect(res.status).toBe(200)
  })

  it('without an adapter, --graph-capture and --allow-cpu-fallback run on CPU without it; --graph-capture on cpu is refused', { timeout: 120_000 }, async () => {
    const n = await startNode(['--provider', 'webgpu', '--allow-cpu-fallback', '--graph-capture'], NO_DRIVER, tinyGqaModelDir())
    expect(await ready(n)).toMatchObject({ status: 'ready', provider: 'cpu' })
    expect((await post(n.url, completionBody({ model: 'onnxd-tiny-gqa', max_tokens: 2 }))).status).toBe(200)
    child!.kill('SIGKILL')
    await n.exited
    const c = await startNode(['--graph-capture'], {}, tinyGqaModelDir())
    expect(await c.exited).toBe(1)
    expect(c.stderr().trimEnd().split('\n').at(-1)).toMatch(/^onnxd node: --graph-capture cannot run on provider cpu \(it is WebGPU's\)/)
  })

  it('refuses --device-id other than 0: the webgpu provider picks its own adapter', { timeout: 120_000 }, async () => {
    const n = await startNode(['--provider', 'webgpu', '--device-id', '1'], NO_DRIVER)
    expect(await n.exited).toBe(1)
    expect(n.stderr()).toMatch(/^onnxd node: deviceId applies to cuda and tensorrt: .*Given: 1\n$/m)
  })
})
