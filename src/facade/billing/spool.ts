// The usage spool: completions' usage records that the store did not accept (an outage), kept until it does, in
// memory and on the facade's disk, so that neither an outage nor a restart during one loses a bill. One append-only
// JSON-lines file per facade process, `<dataDir>/usage-spool/<host>.<pid>.jsonl`: `{"usage":{…}}` when a record is
// kept (fsynced before `add` resolves), `{"done":"<id>"}` when the store took it (not synced: a record sent again is
// billed once, the store ignoring a completion id it has). The file goes when nothing is left in it. At start, `load`
// adopts the files of this host's facades that are gone (their pid no longer runs, or is this process's own: a
// container restarted), so facades sharing a data directory never take each other's records.
// Imports: store interfaces and group commit.
import { existsSync, fsyncSync, openSync, closeSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { mkdir, open, rm, type FileHandle } from 'node:fs/promises'
import { hostname } from 'node:os'
import { join } from 'node:path'
import { fulfilled, GroupCommit } from '../../store/group-commit.js'
import type { CompletionUsage } from '../../store/interfaces.js'

/** A usage record with the completion id that makes sending it twice harmless. */
export type SpooledUsage = CompletionUsage & { id: string }

/** The spool's directory under the facade's data directory. */
export const SPOOL_DIR = 'usage-spool'

/** Most lines one write (and one fsync) carries. */
const MAX_WRITE_BATCH = 1024

/** A line of the file, as written. */
type Op = { usage: SpooledUsage } | { done: string }

/** This host's name as a file name part: no dots, so `<host>.<pid>.jsonl` splits one way. */
const HOST = hostname().replace(/[^A-Za-z0-9_-]/g, '_') || 'host'

/** `<host>.<pid>.jsonl` → its host and pid; null for any other name. */
function ownerOf(name: string): { host: string; pid: number } | null {
  const m = /^([A-Za-z0-9_-]+)\.([0-9]+)\.jsonl$/.exec(name)
  return m ? { host: m[1]!, pid: Number(m[2]) } : null
}

/** True while a process with this pid runs on this host (EPERM: it does, someone else's). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM'
  }
}

const isCount = (v: unknown): boolean => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0

/** A spooled record as read back, or null when the line is not one (torn by a crash, or not ours). */
function asUsage(v: unknown): SpooledUsage | null {
  const u = v as Partial<SpooledUsage> | null
  if (u === null || typeof u !== 'object') return null
  const strings = [u.id, u.accountId, u.keyId, u.model].every((s) => typeof s === 'string')
  const counts = [u.promptTokens, u.completionTokens, u.costMicros, u.at].every(isCount)
  const optional = (u.inFlightId === undefined || typeof u.inFlightId === 'string') && (u.touchKey === undefined || typeof u.touchKey === 'boolean')
  return strings && counts && optional ? (u as SpooledUsage) : null
}

/** Syncs a directory, so that a file created or renamed in it is there after a crash. */
function syncDir(dir: string): void {
  const fd = openSync(dir, 'r')
  try {
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
}

export class UsageSpool {
  readonly #dir: string
  readonly #file: string
  /** Every record kept and not yet taken by the store, by completion id; the file catches up in order. */
  readonly #pending = new Map<string, SpooledUsage>()
  #fh: FileHandle | null = null
  readonly #writes = new GroupCommit<Op, void>((ops) => this.#write(ops), MAX_WRITE_BATCH)

  constructor(dataDir: string) {
    this.#dir = join(dataDir, SPOOL_DIR)
    this.#file = join(this.#dir, `${HOST}.${process.pid}.jsonl`)
  }

  /** The file this process writes. */
  get file(): string {
    return this.#file
  }

  /** Records kept, waiting for the store. */
  get size(): number {
    return this.#pending.size
  }

  /** The records kept, oldest first. */
  pending(): SpooledUsage[] {
    return [...this.#pending.values()]
  }

  /**
   * Adopts the records of this host's facades that are gone (see the header), before anything is added; returns how
   * many are kept. They are written to this process's file first, then the adopted files removed, so that a crash
   * in between leaves each record in one file or two, never in none. Creates nothing when there is nothing to adopt.
   */
  load(): number {
    if (!existsSync(this.#dir)) return 0
    const adopted: string[] = []
    for (const name of readdirSync(this.#dir).sort()) {
      const owner = ownerOf(name)
      if (!owner || owner.host !== HOST || (owner.pid !== process.pid && alive(owner.pid))) continue
      adopted.push(join(this.#dir, name))
      for (const line of readFileSync(join(this.#dir, name), 'utf8').split('\n')) {
        let entry: { usage?: unknown; done?: unknown }
        try {
          entry = JSON.parse(line) as typeof entry
        } catch {
          continue // a line a crash cut short, or an empty one
        }
        const usage = asUsage(entry?.usage)
        if (usage) this.#pending.set(usage.id, usage)
        else if (typeof entry?.done === 'string') this.#pending.delete(entry.done)
      }
    }
    if (this.#pending.size > 0) {
      const tmp = `${this.#file}.tmp`
      writeFileSync(tmp, this.pending().map((u) => `${JSON.stringify({ usage: u } satisfies Op)}\n`).join(''))
      const fd = openSync(tmp, 'r+')
      try {
        fsyncSync(fd)
      } finally {
        closeSync(fd)
      }
      renameSync(tmp, this.#file)
      syncDir(this.#dir)
    }
    for (const f of adopted) if (f !== this.#file || this.#pending.size === 0) rmSync(f, { force: true })
    return this.#pending.size
  }

  /** Keeps `u` (at once in memory); resolves once it is on disk. */
  add(u: SpooledUsage): Promise<void> {
    this.#pending.set(u.id, u)
    return this.#writes.push({ usage: u })
  }

  /** The store took the record of `id`: it is no longer kept. */
  done(id: string): Promise<void> {
    if (!this.#pending.delete(id)) return Promise.resolve()
    return this.#writes.push({ done: id })
  }

  /** Waits for the writes under way and closes the file (the records stay on disk for the next start). */
  async close(): Promise<void> {
    await this.#writes.idle()
    await this.#fh?.close()
    this.#fh = null
  }

  /** One batch of lines: one write and, when it keeps a record, one fsync. */
  async #write(ops: readonly Op[]): Promise<PromiseSettledResult<void>[]> {
    if (this.#pending.size === 0) {
      // Every record ever added is done (adds enter #pending before they are queued): the file goes.
      await this.#fh?.close()
      this.#fh = null
      await rm(this.#file, { force: true })
    } else {
      if (!this.#fh) {
        await mkdir(this.#dir, { recursive: true })
        this.#fh = await open(this.#file, 'a')
        syncDir(this.#dir)
      }
      await this.#fh.write(ops.map((op) => `${JSON.stringify(op)}\n`).join(''))
      if (ops.some((op) => 'usage' in op)) await this.#fh.sync()
    }
    return ops.map(() => fulfilled(undefined))
  }
}
