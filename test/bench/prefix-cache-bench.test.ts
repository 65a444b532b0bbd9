// bench/prefix-cache.bench.ts on a small cache shape: every whole block of every prompt is cached (its prompts share
// none), each round on a new prefix cache, and bad arguments get the usage line.
import { execFileSync } from 'node:child_process'
import { describe, expect, it } from 'vitest'

const bench = (args: string[]): string => execFileSync(process.execPath, ['--import', 'tsx', 'bench/prefix-cache.bench.ts', ...args], { encoding: 'utf8', stdio: 'pipe' })

describe('bench/prefix-cache.bench.ts', () => {
  it('caches every whole block of prompts that share none, on a new cache each round', () => {
    const out = bench(['--prompts', '6', '--prompt-len', '40', '--group', '3', '--layers', '2', '--kv-heads', '2', '--head-dim', '4', '--rounds', '2'])
    const rounds = out.trim().split('\n')
    expect(rounds).toHaveLength(2)
    // 40 tokens hold 2 whole blocks of 16; a block of 2 layers x (keys, values) x 2 heads x 16 x 4 floats is 2 KiB.
    for (const line of rounds) expect(line).toMatch(/^round \d: 6 prompts of 40, 12 blocks, 0 MB: \d+ ms wall, \d+ ms CPU \(every thread\), \d+ collections, \d+ ms in them$/)
  }, 60_000)

  it('refuses arguments that are not positive integers', () => {
    expect(() => bench(['--prompts', '0'])).toThrow(/usage:/)
  }, 60_000)
})
