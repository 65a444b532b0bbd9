// Shutdown never aborts the process: 50 times over, a real node drains with a grace far shorter than its streams
// need and closes its engine pool while the worker is still stepping them (issue #10: "terminate called after
// throwing an instance of 'Napi::Error'", exit 134, when a worker was terminated inside ORT's session.run).
// The cycles run in a child process, because an abort takes the whole process with it.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { tinyPlainModelDir } from '../helpers/fixtures.js'

const CYCLES = 50

describe('drain with streams in flight', () => {
  it(`exits 0 in ${CYCLES} of ${CYCLES} drain-timeout runs`, async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'drain-loop.child.ts'), tinyPlainModelDir(), String(CYCLES), '3', '50'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString()))
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()))
    const [code, signal] = (await once(child, 'exit')) as [number | null, NodeJS.Signals | null]
    const done = stdout.split('\n').filter((l) => l.startsWith('cycle ')).length
    expect({ code, signal, done }, `child stderr: ${stderr.slice(0, 2000)}`).toEqual({ code: 0, signal: null, done: CYCLES })
  }, 120_000)
})
