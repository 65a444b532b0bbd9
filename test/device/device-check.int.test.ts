// The device check's dry run (scripts/device/run.sh --dry-run --from-tree): the runner GPU machines get, run here from
// the working tree on the tiny preset over whatever WebGPU adapter this machine has (Mesa's lavapipe on a CPU-only
// one). Every step must end ok, or skipped with its reason; the report names the device, the adapter and each step.
// Skipped, saying why, where WebGPU has no adapter. The runner transpiled as the archive carries it must parse.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import type { DeviceReport } from '../../scripts/device/check.js'
import { transpileRunner } from '../../scripts/device/pack.js'
import { noWebgpu, webgpuTitle } from '../helpers/webgpu.js'

const root = resolve(import.meta.dirname, '../..')
const tmp = mkdtempSync(join(tmpdir(), 'onnxd-device-check-'))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))

/** Runs `cmd`; resolves with its exit code and output. */
async function exec(cmd: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; out: string }> {
  const c = spawn(cmd[0], cmd.slice(1), { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  c.stdout!.on('data', (b: Buffer) => (out += b.toString()))
  c.stderr!.on('data', (b: Buffer) => (out += b.toString()))
  const [code] = (await once(c, 'exit')) as [number | null]
  return { code, out }
}

describe('device check runner', () => {
  it('transpiles to JavaScript that Node parses (what the archive carries as check.mjs)', async () => {
    const file = join(tmp, 'check.mjs')
    writeFileSync(file, transpileRunner(root))
    const r = await exec([process.execPath, '--check', file])
    expect(r.out).toBe('')
    expect(r.code).toBe(0)
  })
})

describe.skipIf(noWebgpu !== null)(webgpuTitle('device check dry run (tiny preset, WebGPU)'), () => {
  it('runs every step, each ok or skipped with a reason, within its budget', async () => {
    const out = join(tmp, 'out')
    const r = await exec(['bash', 'scripts/device/run.sh', out, '--dry-run', '--from-tree'], { DEVICE_WORK: join(tmp, 'work') })
    expect(r.code, r.out).toBe(0)
    const report = JSON.parse(readFileSync(join(out, 'device-check.json'), 'utf8')) as DeviceReport
    expect(report).toMatchObject({ kind: 'onnxd-device-check', dry_run: true, finished: true, mode: 'src' })
    expect(report.steps.map((s) => s.name)).toEqual(['device', 'webgpu', 'build:tiny', 'gguf:tiny', 'greedy:tiny', 'context:tiny', 'serve:tiny', 'capture:tiny'])
    for (const s of report.steps) {
      if (s.status === 'skipped') expect(s.reason, s.name).toMatch(/\w{4}/)
      else expect(s.status, `${s.name}: ${s.error ?? s.reason ?? ''}`).toBe('ok')
      expect(s.seconds, s.name).toBeGreaterThanOrEqual(0)
    }
    // The device as far as this machine tells it: the adapter found, the CPU; nvidia-smi only where there is one.
    expect(report.device.webgpu_adapter).toBe('found')
    expect(report.device.cores).toBeGreaterThan(0)
    const step = (name: string) => report.steps.find((s) => s.name === name)!
    // The tiny preset's float32 graph gives the CPU's greedy tokens on WebGPU.
    expect(step('greedy:tiny').result).toMatchObject({ comparisons: [{ dtype: 'fp32', match: true, tokens: 8 }] })
    // WebGPU's greedy tokens came from the C-API runtime with its cache on the device.
    expect(step('greedy:tiny').result).toMatchObject({ comparisons: [{ webgpu: { runtime: 'capi', device_cache: true } }] })
    // The context sweep on both runtimes: the device cache moves a few bytes per step, the JS API the whole cache.
    const ctx = step('context:tiny').result as { cells: { form: string; runtime: string; ms_per_step: number; mb_per_step: number }[] }
    expect(ctx.cells).toEqual([
      expect.objectContaining({ form: 'gqa', runtime: 'capi', batch: 1, context: 16 }),
      expect.objectContaining({ form: 'gqa', runtime: 'js', batch: 1, context: 16 }),
    ])
    expect(ctx.cells[0].mb_per_step).toBeLessThan(ctx.cells[1].mb_per_step)
    // The serving sweep on webgpu (the node's default runtime there, capi), and ORT alone on webgpu doing the same
    // work through the C API with its cache on the device.
    const serve = step('serve:tiny').result as { provider: string; targets: { name: string; skipped?: string; levels?: { completed: number }[] }[]; ort_ceiling: Record<string, { api?: string }> }
    expect(serve.provider).toBe('webgpu')
    const onnxd = serve.targets.find((t) => t.name === 'onnxd gqa/capi/fp16')!
    expect(onnxd.levels?.[0].completed).toBe(1)
    expect(Object.values(serve.ort_ceiling)[0].api).toMatch(/device memory, on webgpu/)
    // llama.cpp's Vulkan build served the F16 GGUF, or the report says why not (lavapipe is a CPU device).
    const llama = serve.targets.find((t) => t.name.startsWith('llama.cpp'))
    if (llama) expect(llama.skipped ?? llama.levels?.[0].completed).toBeTruthy()
    else expect(report.notes.join(' ')).toMatch(/llama\.cpp left out/)
    // The same sweep with the node's graph capture, its output tok/s set against the serve step's.
    const capture = step('capture:tiny').result as {
      node_args: string[]
      targets: { name: string; levels?: { completed: number; over_serve: number | null; decode_steps: number | null; graph_replays: number | null }[] }[]
    }
    expect(capture.node_args).toEqual(['--graph-capture', '--max-model-len=512'])
    const captured = capture.targets.find((t) => t.name === 'onnxd gqa/capi/fp16')!
    expect(captured.levels?.[0].completed).toBe(1)
    expect(captured.levels?.[0].over_serve).toBeGreaterThan(0)
    // Every decode step of the level ran as the recorded graph, by the node's own count.
    expect(captured.levels?.[0].decode_steps).toBeGreaterThan(0)
    expect(captured.levels?.[0].graph_replays).toBe(captured.levels?.[0].decode_steps)
    // Within its budget: no step was left out for want of time (each runs under its own timeout, which fails it).
    expect(report.steps.filter((s) => /budget/.test(s.reason ?? '')).map((s) => s.name)).toEqual([])
  }, 180_000)
})
