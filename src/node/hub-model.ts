// Models by name, as `vllm serve <model>` takes them: `--model onnx-community/SmolLM2-135M-Instruct` (a Hugging Face
// hub id; --revision picks a branch, tag or commit) is fetched before the node loads it. Only the files the chosen
// --dtype needs: the top-level JSON and Jinja files (config, generation config, tokenizer, chat template) and that
// variant's ONNX file with its external data. They land in the Hugging Face cache (HF_HUB_CACHE, else
// $HF_HOME/hub, else ~/.cache/huggingface/hub) in its layout: blobs/<hash>, snapshots/<commit>/<path> as relative
// links to them, refs/<revision> holding the commit, so other Hugging Face tools share it.
//
// Each file is checked against what the hub reports for it: its size, and its hash (the LFS sha256 for large
// files, the git blob sha1 for the others); a mismatch discards the download and fails with both hashes. A download
// goes to blobs/<hash>.incomplete and resumes from there, within a run (an interrupted transfer is retried from
// where it stopped) and across runs (a killed process). Offline (HF_HUB_OFFLINE=1, or the hub cannot be reached)
// a revision fetched before is served from the cache. HF_TOKEN authenticates (private or gated models); HF_ENDPOINT
// names another hub (a mirror). The hub protocol (model info, file listing, resolving and ranged reads) is
// @huggingface/hub's, loaded only when a hub model is asked for. Progress: one line on stderr (redrawn on a
// terminal, every 10% otherwise). Each file is downloaded under a lock (`<blob>.lock`, proper-lockfile), so nodes
// that share a cache fetch it once.
// Imports: shared errors and model names; proper-lockfile; @huggingface/hub (lazily).
import { createHash, type Hash } from 'node:crypto'
import { createReadStream, existsSync, statSync } from 'node:fs'
import { mkdir, open, readFile, readlink, rename, rm, stat, symlink, writeFile } from 'node:fs/promises'
import { homedir } from 'node:os'
import { dirname, join, posix, relative } from 'node:path'
import { lock } from 'proper-lockfile'
import { OnnxdError } from '../shared/errors.js'
import { DEFAULT_MODEL_DIR, DTYPE_FILES, type Dtype } from '../shared/model.js'

/** A hub id as the hub spells them: `owner/name`, each part letters, digits, `-`, `_`, `.` (not `..`). */
const HUB_ID = /^[A-Za-z0-9][\w.-]{0,95}\/[A-Za-z0-9][\w.-]{0,95}$/

/**
 * The hub id `model` names, or null when it names a local bundle: an existing path, or anything that is not an
 * `owner/name` id (absolute or `./` paths, three or more parts), or the embedded default's directory. An
 * `owner/name` that is also a local directory is the directory, as with vLLM.
 */
export function hubModelId(model: string): string | null {
  // The embedded default (models/onnxd-tiny-gqa) is a local bundle even before its first build.
  if (model === DEFAULT_MODEL_DIR || !HUB_ID.test(model) || model.split('/').some((p) => p === '.' || p === '..' || p.endsWith('.'))) return null
  return existsSync(model) ? null : model
}

/** One file of the hub's listing (the tree API's entry). */
export interface HubFile {
  type: string
  path: string
  size: number
  /** The git blob id (sha1 of `blob <size>\0<content>`). */
  oid?: string
  lfs?: { oid: string; size: number }
}

/**
 * The files of a listing that the `dtype` variant needs, small files first and the ONNX file last (its presence in
 * a snapshot then means the whole variant is there): every top-level .json and .jinja file, and the variant's ONNX
 * file (under onnx/ or at the top, as the engine looks for it) with its external data (`<file>_data*`, `<file>.data*`).
 * Fails, listing the variants the repository has, when it has not this one.
 */
export function filesFor(listing: HubFile[], dtype: Dtype, repo: string): HubFile[] {
  const files = listing.filter((f) => f.type === 'file')
  const onnxName = DTYPE_FILES[dtype]
  const onnx = [`onnx/${onnxName}`, onnxName].map((p) => files.find((f) => f.path === p)).find((f) => f !== undefined)
  if (!onnx) {
    const has = (Object.entries(DTYPE_FILES) as [Dtype, string][]).filter(([, n]) => files.some((f) => f.path === `onnx/${n}` || f.path === n)).map(([d]) => d)
    throw new OnnxdError('bad_bundle', `${repo} has no ${onnxName} (dtype ${dtype}) under onnx/ or at its top; its ONNX variants: ${has.length > 0 ? has.join(', ') : 'none'}`)
  }
  const small = files.filter((f) => !f.path.includes('/') && /\.(json|jinja)$/.test(f.path))
  const data = files.filter((f) => f.path.startsWith(`${onnx.path}_data`) || f.path.startsWith(`${onnx.path}.data`))
  return [...small, ...data, onnx]
}

/** The Hugging Face variables a node reads for a hub model (the names huggingface_hub uses). */
export const HUB_ENV = ['HF_TOKEN', 'HF_ENDPOINT', 'HF_HOME', 'HF_HUB_CACHE', 'HF_HUB_OFFLINE'] as const

/** Where the Hugging Face cache is, as huggingface_hub finds it. */
export function hubCacheDir(env: NodeJS.ProcessEnv): string {
  return env.HF_HUB_CACHE || join(env.HF_HOME || join(homedir(), '.cache', 'huggingface'), 'hub')
}

const truthy = (v: string | undefined): boolean => v !== undefined && /^(1|true|yes|on)$/i.test(v.trim())

/** Progress of a fetch, for a progress line. */
export interface HubProgress {
  repo: string
  file: string
  /** Bytes of the files being downloaded in this run (cached ones excluded), and how many of them have arrived. */
  done: number
  total: number
}

export interface HubFetchOptions {
  /** Branch, tag or commit; default `main`. */
  revision?: string
  /** The ONNX variant; default fp32 (`model.onnx`). */
  dtype?: Dtype
  /** HF_TOKEN, HF_ENDPOINT, HF_HUB_CACHE / HF_HOME, HF_HUB_OFFLINE; default process.env. */
  env?: NodeJS.ProcessEnv
  /** Each progress step; default a progress line on stderr. */
  onProgress?: (p: HubProgress) => void
  /** Notes worth an operator's eye (offline use of the cache, a resumed transfer); default a line on stderr. */
  onNote?: (line: string) => void
  /** Tries per file when a transfer breaks off, each resuming where the last stopped; default 4. */
  attempts?: number
}

type HubLib = typeof import('@huggingface/hub')

/** Whether an error means the hub could not be reached at all (so the cache may serve), not that it said no. */
function unreachable(e: unknown): boolean {
  const err = e as { name?: string; statusCode?: number; cause?: { code?: string } }
  if (typeof err.statusCode === 'number') return err.statusCode >= 500
  return err.name === 'TypeError' || err.name === 'AbortError' || typeof err.cause?.code === 'string'
}

/** The hub's answer as a config error an operator can act on. */
function hubRefusal(e: unknown, repo: string, revision: string, endpoint: string, token: boolean): OnnxdError {
  const status = (e as { statusCode?: number }).statusCode
  const where = `${repo} (revision ${revision}) on ${endpoint}`
  if (status === 401 || status === 403) {
    return new OnnxdError('config', `${where}: the hub refused access (${status}): ${token ? 'HF_TOKEN cannot read it' : 'it needs a token: set HF_TOKEN'}`)
  }
  if (status === 404) return new OnnxdError('config', `${where}: no such model or revision (404), and no local directory ${repo}`)
  return new OnnxdError('config', `${where}: ${(e as Error).message}`)
}

/** Expected hash of a file: LFS files by sha256, others by their git blob sha1. */
function expectedHash(f: HubFile): { algo: 'sha256' | 'sha1'; hex: string; size: number } {
  if (f.lfs) return { algo: 'sha256', hex: f.lfs.oid.toLowerCase(), size: f.lfs.size }
  if (f.oid) return { algo: 'sha1', hex: f.oid.toLowerCase(), size: f.size }
  throw new OnnxdError('bad_bundle', `${f.path}: the hub reports no hash for it, so it cannot be verified`)
}

function newHasher(h: { algo: 'sha256' | 'sha1'; size: number }): Hash {
  const hash = createHash(h.algo)
  if (h.algo === 'sha1') hash.update(`blob ${h.size}\0`) // a git blob id hashes its header first
  return hash
}

/** Feeds the first `bytes` of `file` to `hash`. */
async function hashPrefix(file: string, bytes: number, hash: Hash): Promise<void> {
  if (bytes === 0) return
  for await (const chunk of createReadStream(file, { start: 0, end: bytes - 1 })) hash.update(chunk as Buffer)
}

/** The progress line: redrawn in place on a terminal, else printed at every 10%. */
export function progressLine(out: Pick<NodeJS.WriteStream, 'write' | 'isTTY' | 'columns'> = process.stderr): { step: (p: HubProgress) => void; end: () => void } {
  const started = Date.now()
  let lastDecile = -1
  let drawn = false
  const mb = (n: number): string => (n / 1e6).toFixed(1)
  return {
    step(p) {
      const pct = p.total > 0 ? Math.floor((p.done / p.total) * 100) : 100
      const rate = p.done / Math.max((Date.now() - started) / 1000, 0.001)
      const width = 24
      const filled = Math.round((pct / 100) * width)
      const line = `${p.repo} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${String(pct).padStart(3)}% ${mb(p.done)}/${mb(p.total)} MB ${mb(rate)} MB/s ${p.file}`
      if (out.isTTY) {
        out.write(`\r${line.slice(0, (out.columns || 120) - 1).padEnd(Math.min(out.columns || 120, 160) - 1)}`)
        drawn = true
      } else if (Math.floor(pct / 10) > lastDecile) {
        lastDecile = Math.floor(pct / 10)
        out.write(`${line}\n`)
      }
    },
    end() {
      if (drawn) out.write('\n')
    },
  }
}

/** A relative symlink at `link` to `target`, replacing whatever is there. */
async function linkTo(link: string, target: string): Promise<void> {
  await mkdir(dirname(link), { recursive: true })
  const rel = relative(dirname(link), target)
  if ((await readlink(link).catch(() => null)) === rel) return
  await rm(link, { force: true })
  await symlink(rel, link)
}

/** The snapshot of `revision` in the cache when it holds the `dtype` variant; else null. */
async function cachedSnapshot(repoDir: string, revision: string, dtype: Dtype): Promise<string | null> {
  const commit = /^[0-9a-f]{40}$/.test(revision) ? revision : (await readFile(join(repoDir, 'refs', revision), 'utf8').catch(() => '')).trim()
  if (!commit) return null
  const dir = join(repoDir, 'snapshots', commit)
  const onnx = DTYPE_FILES[dtype]
  // filesFor() fetches the ONNX file last: once it is linked, the variant's other files are there too.
  const complete = existsSync(join(dir, 'config.json')) && (existsSync(join(dir, 'onnx', onnx)) || existsSync(join(dir, onnx)))
  return complete ? dir : null
}

/**
 * Fetches the files `repo` needs for `dtype` at `revision` into the Hugging Face cache, verified, and returns the
 * snapshot directory (a bundle the engine reads). Offline, or when the hub cannot be reached, returns the cached
 * snapshot of that revision, or fails saying what is missing.
 */
export async function fetchHubModel(repo: string, opts: HubFetchOptions = {}): Promise<string> {
  const env = opts.env ?? process.env
  const revision = opts.revision ?? 'main'
  const dtype = opts.dtype ?? 'fp32'
  const token = env.HF_TOKEN || undefined
  const endpoint = (env.HF_ENDPOINT || 'https://huggingface.co').replace(/\/+$/, '')
  const note = opts.onNote ?? ((line: string) => process.stderr.write(`${line}\n`))
  if (token !== undefined && !token.startsWith('hf_')) throw new OnnxdError('config', 'HF_TOKEN: a Hugging Face token starts with hf_')
  const hub: HubLib = await import('@huggingface/hub')
  const repoDir = join(hubCacheDir(env), hub.getRepoFolderName({ type: 'model', name: repo }))

  const fromCache = async (why: string): Promise<string> => {
    const dir = await cachedSnapshot(repoDir, revision, dtype)
    if (dir === null) throw new OnnxdError('config', `${repo} (revision ${revision}, dtype ${dtype}): ${why}, and the cache (${repoDir}) does not hold it`)
    note(`${repo}: ${why}; using the cached snapshot ${dir}`)
    return dir
  }
  if (truthy(env.HF_HUB_OFFLINE)) return fromCache('HF_HUB_OFFLINE is set')

  const params = { hubUrl: endpoint, ...(token ? { accessToken: token } : {}) }
  let commit: string
  let listing: HubFile[]
  try {
    const info = await hub.modelInfo({ ...params, name: repo, revision, additionalFields: ['sha'] })
    if (typeof info.sha !== 'string' || !/^[0-9a-f]{40}$/.test(info.sha)) throw new OnnxdError('config', `${repo}: the hub named no commit for revision ${revision}`)
    commit = info.sha
    listing = []
    for await (const f of hub.listFiles({ ...params, repo: { type: 'model', name: repo }, revision: commit, recursive: true })) listing.push(f)
  } catch (e) {
    if (e instanceof OnnxdError) throw e
    if (unreachable(e)) return fromCache(`the hub at ${endpoint} cannot be reached (${(e as Error).message})`)
    throw hubRefusal(e, repo, revision, endpoint, token !== undefined)
  }

  const wanted = filesFor(listing, dtype, repo)
  const snapshot = join(repoDir, 'snapshots', commit)
  const blobs = join(repoDir, 'blobs')
  await mkdir(blobs, { recursive: true })
  if (revision !== commit) {
    await mkdir(join(repoDir, 'refs', ...dirname(revision).split('/').filter((p) => p !== '.')), { recursive: true })
    await writeFile(join(repoDir, 'refs', revision), commit)
  }

  const plan = wanted.map((f) => {
    const h = expectedHash(f)
    const blob = join(blobs, h.hex)
    const have = existsSync(blob) && statSync(blob).size === h.size
    return { f, h, blob, have }
  })
  const total = plan.filter((p) => !p.have).reduce((n, p) => n + p.h.size, 0)
  const bar = opts.onProgress ? null : progressLine()
  const progress = opts.onProgress ?? bar!.step
  let done = 0
  try {
    for (const p of plan) {
      if (!p.have) {
        // One process at a time per file (nodes sharing a cache): a second waits, then finds the blob in place.
        const release = await lock(p.blob, { realpath: false, stale: 30_000, update: 5_000, retries: { retries: 100_000, factor: 1, minTimeout: 200, maxTimeout: 200 } })
        try {
          if (!(existsSync(p.blob) && statSync(p.blob).size === p.h.size)) {
            await downloadBlob(hub, { ...params, repo, commit, file: p.f, hash: p.h, blob: p.blob, attempts: opts.attempts ?? 4, note }, (n) => {
              done += n
              progress({ repo, file: p.f.path, done, total })
            })
          } else {
            done += p.h.size // another process fetched it while this one waited
            progress({ repo, file: p.f.path, done, total })
          }
        } finally {
          await release()
        }
      }
      await linkTo(join(snapshot, ...p.f.path.split(posix.sep)), p.blob)
    }
  } finally {
    bar?.end()
  }
  return snapshot
}

interface BlobJob {
  hubUrl: string
  accessToken?: string
  repo: string
  commit: string
  file: HubFile
  hash: { algo: 'sha256' | 'sha1'; hex: string; size: number }
  blob: string
  attempts: number
  note: (line: string) => void
}

/**
 * Downloads one file into `blob`, through `<blob>.incomplete`: resumes what an earlier run left there, retries a
 * transfer that breaks off from where it stopped, then checks size and hash and renames it into place. A file whose
 * size or hash is not what the hub reported is deleted and fails the fetch.
 */
async function downloadBlob(hub: HubLib, job: BlobJob, onBytes: (n: number) => void): Promise<void> {
  const part = `${job.blob}.incomplete`
  const { size } = job.hash
  let offset = existsSync(part) ? (await stat(part)).size : 0
  if (offset > size) {
    await rm(part, { force: true })
    offset = 0
  }
  let hash = newHasher(job.hash)
  await hashPrefix(part, offset, hash)
  if (offset > 0) {
    job.note(`${job.repo}: ${job.file.path}: resuming at ${offset} of ${size} bytes`)
    onBytes(0)
  }
  // The server may ignore a Range header and send the whole file (200): then the part is started over.
  let rangeIgnored = false
  const fetchWatching: typeof fetch = async (input, init) => {
    const res = await fetch(input, init)
    const range = new Headers(init?.headers).get('range')
    if (range !== null && range !== 'bytes=0-0' && res.status === 200) rangeIgnored = true
    return res
  }
  const remote = await hub.downloadFile({
    repo: { type: 'model', name: job.repo },
    path: job.file.path,
    revision: job.commit,
    hubUrl: job.hubUrl,
    ...(job.accessToken ? { accessToken: job.accessToken } : {}),
    fetch: fetchWatching,
    // Plain ranged HTTP reads of the resolve URL (the hub serves Xet-backed files there too): the path the tests run.
    xet: false,
  })
  if (remote === null) throw new OnnxdError('bad_bundle', `${job.repo}@${job.commit}: ${job.file.path} is listed but cannot be downloaded (404)`)

  const fh = await open(part, offset === 0 ? 'w' : 'a')
  try {
    for (let attempt = 1; offset < size; attempt++) {
      rangeIgnored = false
      let first = true
      try {
        for await (const chunk of remote.slice(offset).stream() as unknown as AsyncIterable<Uint8Array>) {
          if (first && rangeIgnored && offset > 0) {
            await fh.truncate(0)
            onBytes(-offset)
            offset = 0
            hash = newHasher(job.hash)
          }
          first = false
          await fh.write(chunk, 0, chunk.length, offset)
          hash.update(chunk)
          offset += chunk.length
          onBytes(chunk.length)
          if (offset > size) break
        }
        if (offset < size) throw new Error(`the transfer ended at ${offset} of ${size} bytes`)
      } catch (e) {
        const status = (e as { statusCode?: number }).statusCode
        if (e instanceof OnnxdError || attempt >= job.attempts || (status !== undefined && status < 500)) {
          throw new OnnxdError('bad_bundle', `${job.repo}: ${job.file.path}: download failed at ${offset} of ${size} bytes (${(e as Error).message}); run again to resume`)
        }
        job.note(`${job.repo}: ${job.file.path}: interrupted at ${offset} of ${size} bytes (${(e as Error).message}); resuming`)
      }
    }
  } finally {
    await fh.close()
  }
  const hex = hash.digest('hex')
  if (offset !== size || hex !== job.hash.hex) {
    await rm(part, { force: true })
    const what = offset !== size ? `${offset} bytes, the hub reports ${size}` : `${job.hash.algo} ${hex}, the hub reports ${job.hash.hex}`
    throw new OnnxdError('bad_bundle', `${job.repo}@${job.commit}: ${job.file.path} does not match the hub (${what}): the download was discarded`)
  }
  await rename(part, job.blob)
}
