// A port that is already taken stops `onnxd node`, `onnxd facade` and `onnxd serve` with exit 1 and one stderr line
// naming the port (issue #10: a raw stack trace, or an abort with exit 134).
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync } from 'node:fs'
import { createServer, type AddressInfo, type Server } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { tinyPlainModelDir } from '../helpers/fixtures.js'
import { freePort } from '../helpers/servers.js'

const ENTRY = join(import.meta.dirname, '../helpers/onnxd-src.ts')

let held: Server
let busy: number
beforeAll(async () => {
  held = createServer()
  held.listen(0, '127.0.0.1')
  await once(held, 'listening')
  busy = (held.address() as AddressInfo).port
})
afterAll(() => held.close())

/** Runs `onnxd <argv>` in its own process with no ONNXD_* variables of ours; resolves with its exit and output. */
async function onnxd(argv: string[]): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }> {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ONNXD_')))
  const child = spawn(process.execPath, ['--import', 'tsx', ENTRY, ...argv], {
    env: { ...env, ONNXD_DATA_DIR: mkdtempSync(join(tmpdir(), 'onnxd-port-')), ONNXD_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  let stderr = ''
  child.stderr.on('data', (b: Buffer) => (stderr += b.toString()))
  const [code, signal] = (await once(child, 'exit')) as [number | null, NodeJS.Signals | null]
  return { code, signal, stderr }
}

const inUse = (command: string): RegExp => new RegExp(`^onnxd ${command}: port ${busy} on 127\\.0\\.0\\.1 is already in use\\b[^\\n]*\\n$`)

describe('a port already in use', () => {
  it('onnxd node: one line naming the port, exit 1', async () => {
    const r = await onnxd(['node', '--port', String(busy), '--model', tinyPlainModelDir()])
    expect(r.stderr).toMatch(inUse('node'))
    expect(r).toMatchObject({ code: 1, signal: null })
  })

  it('onnxd facade: one line naming the port, exit 1', async () => {
    const r = await onnxd(['facade', '--port', String(busy), '--nodes', `http://127.0.0.1:${await freePort()}`])
    expect(r.stderr).toMatch(inUse('facade'))
    expect(r).toMatchObject({ code: 1, signal: null })
  })

  it("onnxd serve: the node's port taken, one line naming it, exit 1", async () => {
    const r = await onnxd(['serve', '--node-port', String(busy), '--port', String(await freePort()), '--model', tinyPlainModelDir()])
    expect(r.stderr).toMatch(inUse('serve'))
    expect(r).toMatchObject({ code: 1, signal: null })
  })

  it("onnxd serve: the facade's port taken while the node's model loads, one line naming it, exit 1", async () => {
    const r = await onnxd(['serve', '--port', String(busy), '--node-port', String(await freePort()), '--model', tinyPlainModelDir()])
    expect(r.stderr).toMatch(inUse('serve'))
    expect(r).toMatchObject({ code: 1, signal: null })
  })
})
