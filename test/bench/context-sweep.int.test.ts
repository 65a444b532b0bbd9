// `onnxd bench context` (src/bench/context.ts) on the tiny preset at tiny contexts, through the command's own flags:
// every cell is there with a positive step time, the JSON report is written, and runtime 'capi' moves fewer bytes
// than 'js' on the GroupQueryAttention graph (its presents are the cache itself, counted from what it bound), where
// 'js' fetches every present in full.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { readFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { contextOptions, formatSweep, runContextCommand, type SweepReport } from '../../src/bench/context.js'

const FORMS = ['plain', 'gqa'] as const
const RUNTIMES = ['js', 'capi'] as const
let root: string
let report: SweepReport
let path: string
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'onnxd-sweep-'))
  const o = contextOptions(['--preset', 'tiny', '--contexts', '16,32', '--batches', '1,2', '--steps', '2', '--threads', '1', '--models-dir', root, '--out', join(root, 'out')])
  ;({ report, path } = await runContextCommand({ ...o!, log: () => {} }))
}, 60_000)
afterAll(async () => {
  await rm(root, { recursive: true, force: true })
})

describe('onnxd bench context (tiny preset)', () => {
  it('has every cell, with positive times and bytes, and writes the report', () => {
    expect(report.options).toMatchObject({ forms: [...FORMS], runtimes: [...RUNTIMES], contexts: [16, 32], batches: [1, 2], provider: 'cpu' })
    expect(report.cells).toHaveLength(FORMS.length * RUNTIMES.length * 2 * 2)
    for (const form of FORMS)
      for (const runtime of RUNTIMES)
        for (const batch of [1, 2])
          for (const context of [16, 32]) {
            const c = report.cells.find((x) => x.form === form && x.runtime === runtime && x.batch === batch && x.context === context)
            expect(c, `${form} ${runtime} ${batch} ${context}`).toBeDefined()
            expect(c!.steps).toBe(2)
            expect(c!.msPerStep).toBeGreaterThan(0)
            expect(c!.bytes.fed).toBeGreaterThan(0)
            // The ids fed are counted by name, whatever else the graph takes.
            expect(Object.keys(c!.fedByName)).toContain('input_ids')
            expect(c!.mbPerStep).toBeGreaterThan(0)
            expect(c!.minMs).toBeGreaterThan(0)
          }
    expect(report.growth).toHaveLength(FORMS.length * RUNTIMES.length * 2)
    expect(report.system.cores).toBeGreaterThan(0)
    expect(formatSweep(report)).toContain('step(hi)/step(lo)')
    expect(path).toMatch(/context-[^/]+\.json$/)
    expect(JSON.parse(readFileSync(path, 'utf8'))).toEqual(JSON.parse(JSON.stringify(report)))
  })

  it('capi moves fewer bytes than js on the GQA graph, its presents written into the cache', () => {
    for (const batch of [1, 2]) {
      const at = (runtime: string) => report.cells.find((x) => x.form === 'gqa' && x.runtime === runtime && x.batch === batch && x.context === 32)!
      expect(at('capi').presentsShared).toBe(true)
      expect(at('js').presentsShared).toBe(false)
      // No present crosses on capi; js fetches each in full.
      expect(Object.keys(at('capi').fetchedByName).some((n) => n.startsWith('present'))).toBe(false)
      expect(Object.keys(at('js').fetchedByName).filter((n) => n.startsWith('present')).length).toBeGreaterThan(0)
      expect(at('capi').mbPerStep).toBeLessThan(at('js').mbPerStep)
    }
  })

  it('refuses bad flags, naming each', () => {
    expect(() => contextOptions(['--forms', 'plain,flash', '--contexts', '1,x'])).toThrow(/--forms must be .*plain, gqa[\s\S]*--contexts must be/)
    expect(contextOptions(['--help'])).toBeNull()
    // capi runs on cpu and webgpu (its cache on the device there); cuda runs js only: capi asked for there is
    // refused, and left out by default.
    expect(() => contextOptions(['--provider', 'cuda', '--runtimes', 'js,capi'])).toThrow(/--runtimes capi runs on the cpu and webgpu providers only/)
    expect(contextOptions(['--provider', 'cuda'])).toMatchObject({ provider: 'cuda', runtimes: ['js'] })
    expect(contextOptions(['--provider', 'webgpu'])).toMatchObject({ provider: 'webgpu', runtimes: [...RUNTIMES] })
    expect(contextOptions([])).toMatchObject({ provider: 'cpu', runtimes: [...RUNTIMES] })
    expect(() => contextOptions(['--provider', 'metal'])).toThrow(/--provider must be .*cpu, webgpu/)
  })
})
