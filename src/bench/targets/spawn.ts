// Child processes the benchmark starts and stops: an onnxd node (src/node/server.ts, as `onnxd node` runs it) or the
// transformers.js peer, each on a free loopback port, ready once GET /health answers 200 "ready".
// Imports: node only, client (health polling).
import { spawn, type ChildProcess } from 'node:child_process'
import { createServer } from 'node:net'
import { fileURLToPath } from 'node:url'
import type { Agent } from 'undici'
import { getJson } from '../client.js'

/** A sibling module to run as a process: the compiled .js in production; under tsx/vitest the .ts through tsx. */
export function entryOf(relative: string): { file: string; execArgv: string[] } {
  const fromTs = import.meta.url.endsWith('.ts')
  return {
    file: fileURLToPath(new URL(`${relative}.${fromTs ? 'ts' : 'js'}`, import.meta.url)),
    execArgv: fromTs ? ['--import', 'tsx'] : [],
  }
}

/** A free TCP port on 127.0.0.1 (asked of the OS, then released for the child to take). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const a = s.address()
      const port = typeof a === 'object' && a ? a.port : 0
      s.close(() => resolve(port))
    })
  })
}

export interface Child {
  url: string
  proc: ChildProcess
  /** Seconds from the spawn to its /health saying ready: loading the model, and a GPU node's warm-up. */
  readyS: number
  /** The last lines the child wrote (stdout and stderr), for error messages. */
  tail(): string
  stop(): Promise<void>
}

export interface SpawnOptions {
  /** Module under src/bench/targets/ (or ../peer/server), without extension. */
  entry: string
  args: string[]
  env?: NodeJS.ProcessEnv
  /** What the child is, for messages. */
  what: string
  /** Seconds to wait for readiness (model load and warm-up). */
  readyTimeoutS: number
  agent: Agent
}

export async function spawnTarget(opts: SpawnOptions & { port: number }): Promise<Child> {
  const { file, execArgv } = entryOf(opts.entry)
  const proc = spawn(process.execPath, [...execArgv, file, ...opts.args], {
    env: { ...process.env, ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const lines: string[] = []
  const keep = (b: Buffer): void => {
    lines.push(...b.toString('utf8').split('\n').filter(Boolean))
    if (lines.length > 40) lines.splice(0, lines.length - 40)
  }
  proc.stdout!.on('data', keep)
  proc.stderr!.on('data', keep)
  const started = performance.now()
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)))
  const url = `http://127.0.0.1:${opts.port}`
  const child: Child = {
    url,
    proc,
    readyS: 0,
    tail: () => lines.join('\n'),
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return
      proc.kill('SIGTERM')
      const t = setTimeout(() => proc.kill('SIGKILL'), 15_000)
      await exited
      clearTimeout(t)
    },
  }
  const until = Date.now() + opts.readyTimeoutS * 1000
  let gone = false
  void exited.then(() => (gone = true))
  while (Date.now() < until) {
    if (gone) throw new Error(`${opts.what} exited (code ${proc.exitCode}) before it was ready:\n${child.tail()}`)
    const h = await getJson(opts.agent, `${url}/health`)
    if (h && h.status === 200 && (h.body as { status?: string }).status === 'ready') {
      child.readyS = (performance.now() - started) / 1000
      return child
    }
    await new Promise((r) => setTimeout(r, 200))
  }
  await child.stop()
  throw new Error(`${opts.what} was not ready after ${opts.readyTimeoutS} s:\n${child.tail()}`)
}
