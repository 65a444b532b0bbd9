// The usage spool (issue #32): records kept on disk until the store takes them; read back by the next process on the
// same data directory, a line a crash cut short skipped; files of live facades left alone, of dead ones adopted.
import { spawnSync } from 'node:child_process'
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { hostname, tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { SPOOL_DIR, UsageSpool, type SpooledUsage } from '../../src/facade/billing/spool.js'

const HOST = hostname().replace(/[^A-Za-z0-9_-]/g, '_') || 'host'
const dataDir = (): string => mkdtempSync(join(tmpdir(), 'onnxd-spool-'))
const usage = (id: string, completionTokens = 3): SpooledUsage => ({
  id,
  accountId: 'acct_a',
  keyId: 'key_a',
  model: 'm',
  promptTokens: 2,
  completionTokens,
  costMicros: 7,
  at: Date.UTC(2025, 0, 1),
  touchKey: true,
  inFlightId: id,
})

/** A pid no process has (a child that has exited). */
function deadPid(): number {
  return Number(spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' }).stdout)
}

describe('UsageSpool', () => {
  it('keeps records on disk until they are done, then removes its file; a new process reads back what was left', async () => {
    const dir = dataDir()
    const s = new UsageSpool(dir)
    expect(s.load()).toBe(0)
    expect(existsSync(join(dir, SPOOL_DIR))).toBe(false) // nothing is created before there is something to keep
    await Promise.all([s.add(usage('a')), s.add(usage('b')), s.add(usage('c'))])
    expect(s.size).toBe(3)
    await s.done('b')
    await s.done('b') // twice: no-op
    const lines = readFileSync(s.file, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as unknown)
    expect(lines).toEqual([{ usage: usage('a') }, { usage: usage('b') }, { usage: usage('c') }, { done: 'b' }])
    await s.close()

    // The same pid again (a restarted container): its own file is read back, compacted.
    const again = new UsageSpool(dir)
    expect(again.load()).toBe(2)
    expect(again.pending().map((u) => u.id)).toEqual(['a', 'c'])
    expect(readFileSync(again.file, 'utf8').trim().split('\n')).toHaveLength(2)
    await again.done('a')
    await again.done('c')
    expect(readdirSync(join(dir, SPOOL_DIR))).toEqual([])
    await again.close()
  })

  it('skips a line a crash cut short and lines that are not records', async () => {
    const dir = dataDir()
    mkdirSync(join(dir, SPOOL_DIR))
    const file = join(dir, SPOOL_DIR, `${HOST}.${deadPid()}.jsonl`)
    writeFileSync(file, `${JSON.stringify({ usage: usage('a') })}\n${JSON.stringify({ usage: { id: 'x', model: 3 } })}\nnot json\n`)
    appendFileSync(file, JSON.stringify({ usage: usage('b') }).slice(0, 40)) // torn
    const s = new UsageSpool(dir)
    expect(s.load()).toBe(1)
    expect(s.pending()).toEqual([usage('a')])
    // The adopted file is gone; its record lives on in this process's file.
    expect(readdirSync(join(dir, SPOOL_DIR))).toEqual([s.file.split('/').pop()])
    await s.close()
  })

  it("adopts the files of this host's facades that are gone, never those of a live one or of another host", async () => {
    const dir = dataDir()
    mkdirSync(join(dir, SPOOL_DIR))
    const put = (name: string, ...ids: string[]) =>
      writeFileSync(join(dir, SPOOL_DIR, name), ids.map((id) => `${JSON.stringify({ usage: usage(id) })}\n`).join(''))
    const dead = deadPid()
    put(`${HOST}.${dead}.jsonl`, 'd1', 'd2')
    put(`${HOST}.${process.ppid}.jsonl`, 'live') // the parent process runs
    put(`other-host.${dead}.jsonl`, 'elsewhere')
    const s = new UsageSpool(dir)
    expect(s.load()).toBe(2)
    expect(s.pending().map((u) => u.id)).toEqual(['d1', 'd2'])
    expect(readdirSync(join(dir, SPOOL_DIR)).sort()).toEqual([`${HOST}.${process.pid}.jsonl`, `${HOST}.${process.ppid}.jsonl`, `other-host.${dead}.jsonl`].sort())
    await s.close()
  })
})
