// Throwaway PostgreSQL and Redis servers for the shared-store suites: the server named by ONNXD_TEST_DATABASE_URL /
// ONNXD_TEST_REDIS_URL when set, else one started in a temp dir on a free loopback port when the binaries exist, else
// null with the reason (the suite then reports as skipped). PostgreSQL refuses to run as root: as root, it runs as
// the `postgres` (or `nobody`) user via runuser. A run killed before its afterAll leaves its servers running: each
// temp dir names the process that owns it, and starting a server first stops those whose owner is gone.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export interface TestServer {
  url: string
  stop(): Promise<void>
  /**
   * An outage: the server stops (PostgreSQL: `pg_ctl stop -m fast`, which ends every session) until `up` starts it
   * again on the same port and data (`up` on a running server does nothing). Only on servers started here, not on
   * one named by the environment.
   */
  down?(): Promise<void>
  up?(): Promise<void>
}

export type Started = { server: TestServer; reason: null } | { server: null; reason: string }

/** The file in each server's temp dir holding the pid of the process that started it. */
const OWNER = 'owner.pid'

/** True while a process with this pid exists (EPERM: it does, someone else's). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/** A temp dir for a server, named `prefix…`, owned by this process; first stops the servers of dead owners. */
function serverDir(prefix: string, stop: (dir: string) => void): string {
  for (const name of readdirSync(tmpdir())) {
    if (!name.startsWith(prefix)) continue
    const dir = join(tmpdir(), name)
    let owner: number
    try {
      owner = Number(readFileSync(join(dir, OWNER), 'utf8'))
    } catch {
      continue
    }
    if (!Number.isInteger(owner) || owner <= 0 || alive(owner)) continue
    stop(dir)
    rmSync(dir, { recursive: true, force: true })
  }
  const dir = mkdtempSync(join(tmpdir(), prefix))
  writeFileSync(join(dir, OWNER), String(process.pid))
  return dir
}

/** A loopback port nobody listens on (briefly bound to learn it). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port
      s.close(() => resolve(port))
    })
  })
}

function onPath(bin: string): string | null {
  const r = spawnSync('sh', ['-c', `command -v ${bin}`], { encoding: 'utf8' })
  return r.status === 0 ? r.stdout.trim() : null
}

function pgBinDir(): string | null {
  const fromPath = onPath('pg_ctl')
  if (fromPath) return join(fromPath, '..')
  const root = '/usr/lib/postgresql'
  if (!existsSync(root)) return null
  const versions = readdirSync(root).sort((a, b) => Number(b) - Number(a))
  for (const v of versions) if (existsSync(join(root, v, 'bin', 'pg_ctl'))) return join(root, v, 'bin')
  return null
}

/** The user PostgreSQL runs as, when we are root: a prefix for the command. */
function asUser(): string[] {
  if (process.getuid?.() !== 0) return []
  const user = spawnSync('id', ['postgres']).status === 0 ? 'postgres' : 'nobody'
  return ['runuser', '-u', user, '--']
}

function run(cmd: string[]): { ok: boolean; out: string } {
  const r = spawnSync(cmd[0]!, cmd.slice(1), { encoding: 'utf8', timeout: 60_000 })
  return { ok: r.status === 0, out: `${r.stdout}${r.stderr}`.trim().slice(-500) }
}

/** `own`: start a server here even when ONNXD_TEST_DATABASE_URL names one (a test that stops and starts it). */
export async function startPostgres(o: { own?: boolean } = {}): Promise<Started> {
  const given = process.env.ONNXD_TEST_DATABASE_URL
  if (given && !o.own) return { server: { url: given, stop: async () => undefined }, reason: null }
  const bin = pgBinDir()
  if (!bin) return { server: null, reason: 'no PostgreSQL binaries (initdb, pg_ctl) and ONNXD_TEST_DATABASE_URL is unset' }
  const user = asUser()
  const pgStop = (data: string): void => void run([...user, join(bin, 'pg_ctl'), '-D', data, '-m', 'immediate', 'stop'])
  const dir = serverDir('onnxd-pg-', (d) => pgStop(join(d, 'data')))
  chmodSync(dir, 0o777)
  const data = join(dir, 'data')
  const init = run([...user, join(bin, 'initdb'), '-D', data, '-U', 'onnxd', '--auth=trust', '--locale=C', '-E', 'UTF8'])
  if (!init.ok) return { server: null, reason: `initdb failed: ${init.out}` }
  const port = await freePort()
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off`
  const pgStart = () => run([...user, join(bin, 'pg_ctl'), '-D', data, '-o', opts, '-l', join(dir, 'log'), '-w', 'start'])
  const start = pgStart()
  if (!start.ok) return { server: null, reason: `pg_ctl start failed: ${start.out}` }
  return {
    server: {
      url: `postgres://onnxd@127.0.0.1:${port}/postgres`,
      stop: async () => {
        pgStop(data)
        rmSync(dir, { recursive: true, force: true })
      },
      down: async () => {
        const r = run([...user, join(bin, 'pg_ctl'), '-D', data, '-m', 'fast', '-w', 'stop'])
        if (!r.ok) throw new Error(`pg_ctl stop failed: ${r.out}`)
      },
      up: async () => {
        if (run([...user, join(bin, 'pg_ctl'), '-D', data, 'status']).ok) return
        const r = pgStart()
        if (!r.ok) throw new Error(`pg_ctl start failed: ${r.out}`)
      },
    },
    reason: null,
  }
}

export async function startRedis(): Promise<Started> {
  const given = process.env.ONNXD_TEST_REDIS_URL
  if (given) return { server: { url: given, stop: async () => undefined }, reason: null }
  const bin = onPath('redis-server')
  if (!bin) return { server: null, reason: 'no redis-server binary and ONNXD_TEST_REDIS_URL is unset' }
  const dir = serverDir('onnxd-redis-', (d) => {
    // The pid redis-server wrote, if that process is still a redis-server (not a reused pid).
    try {
      const pid = Number(readFileSync(join(d, 'redis.pid'), 'utf8'))
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('redis-server')) process.kill(pid, 'SIGKILL')
    } catch {
      // Gone already, or no /proc: nothing to stop.
    }
  })
  const port = await freePort()
  const child: ChildProcess = spawn(
    bin,
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no', '--dir', dir, '--pidfile', join(dir, 'redis.pid')],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  )
  const ready = await new Promise<string | null>((resolve) => {
    let out = ''
    child.stdout!.on('data', (b: Buffer) => {
      out += b.toString()
      if (out.includes('Ready to accept connections')) resolve(null)
    })
    child.once('exit', (code) => resolve(`redis-server exited (${code}): ${out.slice(-300)}`))
    child.once('error', (e) => resolve(`redis-server failed: ${e.message}`))
  })
  if (ready) return { server: null, reason: ready }
  return {
    server: {
      url: `redis://127.0.0.1:${port}`,
      stop: async () => {
        if (child.exitCode === null) {
          const exited = new Promise((r) => child.once('exit', r))
          child.kill('SIGTERM')
          await exited
        }
        rmSync(dir, { recursive: true, force: true })
      },
    },
    reason: null,
  }
}

/** A new, empty database on the PostgreSQL server at `serverUrl`; its URL. */
export async function freshDatabase(serverUrl: string, prefix = 'onnxd_t_'): Promise<string> {
  const { default: pg } = await import('pg')
  const name = `${prefix}${randomBytes(6).toString('hex')}`
  const admin = new pg.Client({ connectionString: serverUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  await admin.end()
  const u = new URL(serverUrl)
  u.pathname = `/${name}`
  return u.toString()
}

/** Runs a command to its end (argv[0] with the rest as its arguments); resolves with its exit code and output. */
export async function runToEnd(argv: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(argv[0]!, argv.slice(1), { ...opts, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (b: Buffer) => (stdout += b.toString()))
  child.stderr.on('data', (b: Buffer) => (stderr += b.toString()))
  const [code] = (await once(child, 'exit')) as [number | null]
  return { code, stdout, stderr }
}
