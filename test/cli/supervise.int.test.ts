// Processes an operator can supervise (issue #10). The Dockerfile against the code (Docker itself is not needed):
// its ports, health check, listening hosts and volumes are the ones the code serves, and the process its CMD starts
// drains a stream in flight on its STOPSIGNAL and exits 0. `npm start`: the signal npm gets reaches the server, which
// drains and exits 0, and so does npm. The image's /app is assembled from the final stage's COPY lines (dist/ from
// `npm run build`, the rest from the repository); commands run there as they would in the image.
import { spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync } from 'node:fs'
import { createServer, type AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { basename, dirname, join, posix } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { FACADE_ENV, FacadeOptions } from '../../src/facade/options.js'
import { DEFAULT_MODEL_DIR, NODE_ENV, NodeOptions } from '../../src/node/options.js'
import { tinyPlainModelDir } from '../helpers/fixtures.js'
import { alive, runToEnd } from '../helpers/servers.js'

const REPO = join(import.meta.dirname, '../..')

interface Instruction {
  op: string
  args: string
}

/** Instructions in order: continuation lines joined, comments and blank lines dropped, as Docker reads them. */
function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = []
  let cur = ''
  for (const raw of text.split('\n')) {
    const line = raw.trimEnd()
    if (/^\s*#/.test(line) || (cur === '' && line.trim() === '')) continue
    if (line.endsWith('\\')) {
      cur += `${line.slice(0, -1)} `
      continue
    }
    const m = /^\s*(\w+)\s+(.*)$/s.exec(cur + line)
    if (m) out.push({ op: m[1]!.toUpperCase(), args: m[2]!.trim() })
    cur = ''
  }
  return out
}

/** `ENV A=1 B="x y"` or the legacy `ENV A 1`. */
function envOf(args: string): Record<string, string> {
  if (!/^[\w.-]+=/.test(args)) {
    const [k = '', ...v] = args.split(/\s+/)
    return { [k]: v.join(' ') }
  }
  const out: Record<string, string> = {}
  for (const m of args.matchAll(/([\w.-]+)=("([^"]*)"|\S*)/g)) out[m[1]!] = m[3] ?? m[2]!
  return out
}

const all = parseDockerfile(readFileSync(join(REPO, 'Dockerfile'), 'utf8'))
const froms = all.flatMap((ins, i) => (ins.op === 'FROM' ? [i] : []))
const final = all.slice(froms.at(-1))
const one = (op: string): string => {
  const found = final.filter((i) => i.op === op)
  if (found.length !== 1) throw new Error(`Dockerfile: expected one ${op} in the final stage, found ${found.length}`)
  return found[0]!.args
}
const workdirOf = (stage: Instruction[]): string => stage.filter((i) => i.op === 'WORKDIR').at(-1)?.args ?? '/'
/** Where the build stage works: what the final stage copies `--from` it. */
const buildWorkdir = workdirOf(all.slice(froms[0], froms[1]))
const image = {
  env: Object.assign({}, ...final.filter((i) => i.op === 'ENV').map((i) => envOf(i.args))) as Record<string, string>,
  cmd: JSON.parse(one('CMD')) as string[],
  healthcheck: JSON.parse(/\bCMD\s+(\[.*\])$/s.exec(one('HEALTHCHECK'))?.[1] ?? 'null') as string[] | null,
  stopSignal: one('STOPSIGNAL'),
  expose: one('EXPOSE')
    .split(/\s+/)
    .map((p) => Number(p.replace(/\/tcp$/, ''))),
  volumes: JSON.parse(one('VOLUME')) as string[],
  user: one('USER'),
  workdir: workdirOf(final),
}

/** Every COPY of the Dockerfile: its stage (`--from`), sources and destination. */
const copies = all
  .filter((i) => i.op === 'COPY')
  .map((i) => {
    const words = i.args.split(/\s+/)
    const from = words.find((w) => w.startsWith('--from='))?.slice('--from='.length)
    const paths = words.filter((w) => !w.startsWith('--'))
    return { from, srcs: paths.slice(0, -1), dest: paths.at(-1)!, final: final.some((f) => f === i) }
  })

describe('Dockerfile: what it declares', () => {
  it('runs the server process itself: CMD in exec form starting node on bin/onnxd.js serve, stopped by SIGTERM', () => {
    expect(image.cmd).toEqual(['node', 'bin/onnxd.js', 'serve'])
    expect(image.stopSignal).toBe('SIGTERM')
    expect(image.user).not.toMatch(/^(root|0)(:|$)/)
    expect(froms.length).toBeGreaterThanOrEqual(2)
    expect(copies.filter((c) => c.final && c.from !== undefined).map((c) => c.srcs).flat()).toContain(posix.join(buildWorkdir, 'dist'))
  })

  it("exposes the facade's and the node's default ports and listens on every interface", () => {
    const facadePort = FacadeOptions.properties.port.default as number
    const nodePort = NodeOptions.properties.port.default as number
    expect([...image.expose].sort((a, b) => a - b)).toEqual([facadePort, nodePort].sort((a, b) => a - b))
    expect(image.env[FACADE_ENV.host]).toBe('0.0.0.0')
    expect(image.env[NODE_ENV.host]).toBe('0.0.0.0')
    expect(image.env.ONNXRUNTIME_NODE_INSTALL).toBe('skip')
    // The health check asks the node's /health on its default port unless ONNXD_NODE_PORT moves it.
    expect(image.healthcheck?.[0]).toBe('node')
    const script = image.healthcheck!.join(' ')
    expect(script).toContain('/health`')
    expect(script).toContain(`process.env.${NODE_ENV.port} || ${nodePort}`)
  })

  it('keeps the data and model directories in volumes, and the drain within docker stop’s default 10 s', () => {
    const dataDir = FacadeOptions.properties.dataDir.default as string
    expect(image.volumes.sort()).toEqual([posix.join(image.workdir, dataDir), posix.join(image.workdir, dirname(DEFAULT_MODEL_DIR))].sort())
    expect(Number(image.env[NODE_ENV.drainTimeoutMs])).toBeLessThanOrEqual(8000)
  })

  it('.dockerignore lets in everything the Dockerfile copies from the build context, and nothing else by default', () => {
    const lines = readFileSync(join(REPO, '.dockerignore'), 'utf8')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l !== '' && !l.startsWith('#'))
    expect(lines[0]).toBe('*')
    for (const src of copies.filter((c) => c.from === undefined).flatMap((c) => c.srcs)) {
      expect(lines, src).toContain(`!${src.split('/')[0]}`)
      expect(existsSync(join(REPO, src)), src).toBe(true)
    }
  })
})

/** A free TCP port on every interface (bound briefly to learn it). */
async function freePort(): Promise<number> {
  const s = createServer().listen(0, '0.0.0.0')
  await once(s, 'listening')
  const port = (s.address() as AddressInfo).port
  s.close()
  await once(s, 'close')
  return port
}


/** The JSON log lines a process writes to stdout, with a way to wait for one. */
type Log = Record<string, unknown>
function logsOf(child: ChildProcess): { waitFor(msg: string, fields?: Log): Promise<Log> } {
  const lines: Log[] = []
  const waiters: Array<{ match: (l: Log) => boolean; resolve: (l: Log) => void }> = []
  let partial = ''
  child.stdout!.on('data', (b: Buffer) => {
    const parts = (partial + b.toString()).split('\n')
    partial = parts.pop()!
    for (const text of parts) {
      let line: Log
      try {
        line = JSON.parse(text) as Log
      } catch {
        continue
      }
      lines.push(line)
      for (const w of waiters.filter((w) => w.match(line))) w.resolve(line)
    }
  })
  const exited = once(child, 'exit')
  return {
    waitFor: (msg, fields = {}) => {
      const match = (l: Log): boolean => l.msg === msg && Object.entries(fields).every(([k, v]) => l[k] === v)
      const seen = lines.find(match)
      if (seen) return Promise.resolve(seen)
      return Promise.race([
        new Promise<Log>((resolve) => waiters.push({ match, resolve })),
        exited.then(([code]) => Promise.reject(new Error(`the server exited (${String(code)}) before logging '${msg}'`))),
      ])
    },
  }
}

/** This process's environment without onnxd's variables, npm's and tsx's loader: what a shell would pass on. */
const inherited = (): NodeJS.ProcessEnv =>
  Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ONNXD_') && !k.startsWith('npm_') && k !== 'NODE_OPTIONS'))

describe('the built server: the Dockerfile CMD and npm start', () => {
  let root: string
  let app: string
  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'onnxd-image-'))
    app = join(root, 'app')
    // The build stage's `npm run build`, into a directory of our own rather than the checkout's dist/.
    const built = join(root, 'build', 'dist')
    const build = await runToEnd(['npm', 'run', 'build', '--silent', '--', '--outDir', built], { cwd: REPO, env: process.env })
    expect(build.code, build.stdout + build.stderr).toBe(0)
    for (const c of copies.filter((c) => c.final)) {
      for (const src of c.srcs) {
        const rel = c.from !== undefined ? posix.relative(buildWorkdir, src) : src
        const from = c.from !== undefined && rel === 'dist' ? built : join(REPO, rel)
        const to = join(app, c.dest.endsWith('/') || c.dest === '.' || c.dest === './' ? join(c.dest, basename(rel)) : c.dest)
        mkdirSync(dirname(to), { recursive: true })
        // node_modules is linked, not copied (the image has the production subset of the same packages).
        if (rel === 'node_modules') symlinkSync(from, to, 'dir')
        else cpSync(from, to, { recursive: statSync(from).isDirectory() })
      }
    }
  }, 120_000)
  afterAll(() => rmSync(root, { recursive: true, force: true }))

  it('Dockerfile CMD: serves, passes its HEALTHCHECK, and on SIGTERM finishes the stream in flight and exits 0', async () => {
    const facadePort = await freePort()
    const nodePort = await freePort()
    // `docker run -e ...`: ports, the model (a mounted bundle) and the session-token secret production requires.
    const env: NodeJS.ProcessEnv = {
      ...inherited(),
      ...image.env,
      [FACADE_ENV.port]: String(facadePort),
      [NODE_ENV.port]: String(nodePort),
      [NODE_ENV.model]: tinyPlainModelDir(),
      [FACADE_ENV.jwtSecret]: randomBytes(48).toString('base64url'),
    }
    const cli = async (...args: string[]): Promise<Record<string, unknown>> => {
      const r = await runToEnd(['node', 'bin/onnxd.js', ...args], { cwd: app, env })
      expect(r.code, r.stderr).toBe(0)
      return JSON.parse(r.stdout) as Record<string, unknown>
    }
    const account = await cli('account', 'create', 'docker', '--credits', '100')
    const { key } = (await cli('key', 'create', String(account.id))) as { key: string }

    const server = spawn(image.cmd[0]!, image.cmd.slice(1), { cwd: app, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stderr = ''
    server.stderr.on('data', (b: Buffer) => (stderr += b.toString()))
    const exited = once(server, 'exit') as Promise<[number | null, NodeJS.Signals | null]>
    const logs = logsOf(server)
    try {
      // `onnxd serve` has its facade poll the node as it turns ready, before it says so: a completion sent at once
      // is admitted (it used to get 503 no_healthy_node until the facade's next health poll).
      await logs.waitFor('node ready')
      expect((await runToEnd(image.healthcheck!, { cwd: app, env })).code).toBe(0)

      const res = await fetch(`http://127.0.0.1:${facadePort}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'onnxd-tiny',
          messages: [{ role: 'user', content: 'hello' }],
          max_tokens: 1000,
          ignore_eos: true,
          stream: true,
          stream_options: { include_usage: true },
        }),
      })
      expect(res.status).toBe(200)
      const reader = res.body!.getReader()
      const dec = new TextDecoder()
      let text = ''
      while (!text.includes('\n\n')) {
        const { done, value } = await reader.read()
        if (done) break
        text += dec.decode(value, { stream: true })
      }
      expect(server.kill(image.stopSignal as NodeJS.Signals)).toBe(true)
      // `docker stop` sends SIGKILL 10 s after the stop signal.
      const stopTimeout = new Promise<'SIGKILL'>((resolve) => setTimeout(resolve, 10_000, 'SIGKILL').unref())
      for (;;) {
        const { done, value } = await reader.read()
        if (done) break
        text += dec.decode(value, { stream: true })
      }

      const draining = await logs.waitFor('draining')
      expect(draining).toMatchObject({ signal: image.stopSignal, in_flight: 1 })
      expect(text.endsWith('data: [DONE]\n\n')).toBe(true)
      const chunks = text
        .split('\n\n')
        .filter((f) => f.startsWith('data: {'))
        .map((f) => JSON.parse(f.slice('data: '.length)) as { choices: { finish_reason: string | null }[]; usage?: { completion_tokens: number } })
      expect(chunks.flatMap((c) => c.choices.map((ch) => ch.finish_reason)).filter((r) => r !== null)).toEqual(['length'])
      expect(chunks.at(-1)!.usage?.completion_tokens).toBe(1000)
      expect(await logs.waitFor('drained')).toMatchObject({ drained: true, aborted: 0 })

      const exit = await Promise.race([exited, stopTimeout])
      expect(exit, `still running 10 s after ${image.stopSignal}`).not.toBe('SIGKILL')
      const [code, signal] = await exited
      expect({ code, signal }, stderr).toEqual({ code: 0, signal: null })
      // Nothing listens any more: the same health check now fails.
      expect((await runToEnd(image.healthcheck!, { cwd: app, env })).code).toBe(1)
    } finally {
      server.kill('SIGKILL')
    }
  }, 60_000)
  /** Runs `npm start` in the image's /app in a process group of its own; resolves once the server is ready. */
  async function npmStart(): Promise<{ npm: ChildProcess; logs: ReturnType<typeof logsOf>; stderr: () => string; serverPid: number }> {
    const env = {
      ...inherited(),
      [FACADE_ENV.port]: String(await freePort()),
      [NODE_ENV.port]: String(await freePort()),
      [NODE_ENV.model]: tinyPlainModelDir(),
      ONNXD_LOG_LEVEL: 'info',
    }
    const npm = spawn('npm', ['start', '--silent'], { cwd: app, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] })
    let stderr = ''
    npm.stderr!.on('data', (b: Buffer) => (stderr += b.toString()))
    const logs = logsOf(npm)
    const ready = await logs.waitFor('node ready')
    return { npm, logs, stderr: () => stderr, serverPid: ready.pid as number }
  }

  it('npm start: SIGTERM to npm reaches the server itself, which drains and exits 0; then npm exits 0', async () => {
    const { npm, logs, stderr, serverPid } = await npmStart()
    try {
      expect(serverPid).not.toBe(npm.pid) // the server is npm's child, with no shell between (exec)
      const exited = once(npm, 'exit') as Promise<[number | null, NodeJS.Signals | null]>
      npm.kill('SIGTERM')
      expect(await logs.waitFor('draining')).toMatchObject({ signal: 'SIGTERM', pid: serverPid })
      await logs.waitFor('drained')
      expect(await exited, stderr()).toEqual([0, null])
      expect(alive(serverPid)).toBe(false)
    } finally {
      if (alive(serverPid)) process.kill(serverPid, 'SIGKILL')
    }
  }, 60_000)

  it('npm start: Ctrl-C (SIGINT to the whole group, forwarded once more by npm) is one request to drain, exit 0', async () => {
    const { npm, logs, stderr, serverPid } = await npmStart()
    try {
      const exited = once(npm, 'exit') as Promise<[number | null, NodeJS.Signals | null]>
      process.kill(-npm.pid!, 'SIGINT')
      expect(await logs.waitFor('draining')).toMatchObject({ signal: 'SIGINT', pid: serverPid })
      await logs.waitFor('drained')
      expect(await exited, stderr()).toEqual([0, null])
      expect(stderr()).not.toContain('again')
    } finally {
      if (alive(serverPid)) process.kill(serverPid, 'SIGKILL')
    }
  }, 60_000)
})
