// Models by hub id (issue #35): `--model owner/name` fetched into the Hugging Face cache, verified, resumable,
// usable offline, with HF_TOKEN. This machine reaches no hub, so a local server answers the hub's routes that
// @huggingface/hub uses (model info, the recursive tree listing, `resolve` with ranges) for a bundle the builder
// makes, and can cut a transfer off mid-file, report a wrong hash, or require a token.
import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest'
import { buildModel } from '../../src/builder/index.js'
import { run as generate } from '../../src/cli/generate.js'
import { readBundle } from '../../src/engine/model/bundle.js'
import { fetchHubModel, filesFor, hubModelId, progressLine, type HubFile, type HubProgress } from '../../src/node/hub-model.js'
import { loadNodeOptions, servedModelId } from '../../src/node/options.js'
import { serveNode } from '../../src/node/server.js'
import { freePort } from '../helpers/servers.js'
import { deferred } from '../helpers/deferred.js'
import { completionBody, post, testOptions } from './helpers.js'
import { DEFAULT_MODEL_DIR } from '../../src/shared/model.js'

const REPO_ID = 'onnxd-test/tiny-chat'
const COMMIT = 'a1b2c3d4e5f60718293a4b5c6d7e8f9012345678'
const TOKEN = 'hf_testtoken0123456789'

const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex')
const gitOid = (b: Buffer): string => createHash('sha1').update(`blob ${b.length}\0`).update(b).digest('hex')

interface Request {
  method: string
  path: string
  range: string | null
  auth: string | null
}

/** A hub with one repository: the files of `dir`, at one commit that `main` points to. */
class FakeHub {
  server!: Server
  url = ''
  requests: Request[] = []
  /** Paths whose next full or ranged read is cut off half-way (the probe of byte 0 is answered). */
  cutOnce = new Set<string>()
  /** Paths the listing reports with another sha256. */
  wrongHash = new Set<string>()
  /** Paths whose ranged reads (other than the probe of byte 0) are answered with the whole file, 200. */
  ignoreRange = new Set<string>()
  /** When set, every route wants `Authorization: Bearer <token>` (a private repository). */
  token: string | null = null
  constructor(readonly files: Map<string, Buffer>) {}

  async start(): Promise<void> {
    this.server = createServer((req, res) => this.answer(req, res))
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r))
    this.url = `http://127.0.0.1:${(this.server.address() as { port: number }).port}`
  }
  async stop(): Promise<void> {
    this.server.closeAllConnections()
    await new Promise<void>((r) => this.server.close(() => r()))
  }
  fileReads(path: string): Request[] {
    return this.requests.filter((r) => r.path === `/${REPO_ID}/resolve/${COMMIT}/${path}` && r.range !== 'bytes=0-0')
  }

  private json(res: ServerResponse, status: number, body: unknown): void {
    res.writeHead(status, { 'content-type': 'application/json' })
    res.end(JSON.stringify(body))
  }

  private answer(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url!, 'http://x')
    const path = decodeURIComponent(url.pathname)
    this.requests.push({ method: req.method!, path, range: req.headers.range ?? null, auth: req.headers.authorization ?? null })
    if (this.token !== null && req.headers.authorization !== `Bearer ${this.token}`) return this.json(res, 401, { error: 'Invalid credentials in Authorization header' })
    const revisionOk = (rev: string) => rev === 'main' || rev === COMMIT
    let m = new RegExp(`^/api/models/${REPO_ID}/revision/([^/]+)$`).exec(path)
    if (m) {
      if (!revisionOk(m[1]!)) return this.json(res, 404, { error: `Invalid rev id: ${m[1]}` })
      return this.json(res, 200, { _id: '65f0', id: REPO_ID, sha: COMMIT, private: this.token !== null, gated: false, downloads: 0, likes: 0, lastModified: '2026-11-27T00:00:00.000Z', pipeline_tag: 'text-generation' })
    }
    m = new RegExp(`^/api/models/${REPO_ID}/tree/([^/]+)$`).exec(path)
    if (m) {
      if (!revisionOk(m[1]!) || url.searchParams.get('recursive') !== 'true') return this.json(res, 404, { error: 'not found' })
      const dirs = [...new Set([...this.files.keys()].filter((p) => p.includes('/')).map((p) => p.slice(0, p.lastIndexOf('/'))))]
      const entries = [
        ...dirs.map((d) => ({ type: 'directory', oid: '0'.repeat(40), size: 0, path: d })),
        ...[...this.files].map(([p, b]) => {
          const lfs = p.endsWith('.onnx') || p.includes('.onnx_data')
          const oid = this.wrongHash.has(p) ? '0'.repeat(64) : sha256(b)
          return lfs ? { type: 'file', oid: gitOid(Buffer.from(`pointer ${p}`)), size: b.length, path: p, lfs: { oid, size: b.length, pointerSize: 130 } } : { type: 'file', oid: gitOid(b), size: b.length, path: p }
        }),
      ]
      return this.json(res, 200, entries)
    }
    m = new RegExp(`^/${REPO_ID}/resolve/([^/]+)/(.+)$`).exec(path)
    if (m) {
      const body = this.files.get(m[2]!)
      if (!revisionOk(m[1]!) || !body) {
        res.writeHead(404, { 'x-error-code': 'EntryNotFound' })
        return void res.end()
      }
      const headers = { etag: `"${sha256(body)}"`, 'x-repo-commit': COMMIT, 'accept-ranges': 'bytes', 'content-type': 'application/octet-stream' }
      const ranged = req.headers.range === 'bytes=0-0' || !this.ignoreRange.has(m[2]!)
      const r = ranged ? /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '') : null
      const start = r ? Number(r[1]) : 0
      const end = r && r[2] ? Number(r[2]) : body.length - 1
      const slice = body.subarray(start, end + 1)
      res.writeHead(r ? 206 : 200, { ...headers, 'content-length': slice.length, ...(r ? { 'content-range': `bytes ${start}-${end}/${body.length}` } : {}) })
      if (req.headers.range !== 'bytes=0-0' && this.cutOnce.delete(m[2]!)) {
        // Half of what was promised, then the connection drops.
        res.write(slice.subarray(0, Math.floor(slice.length / 2)), () => res.socket?.destroy())
        return
      }
      return void res.end(slice)
    }
    this.json(res, 404, { error: `no route ${path}` })
  }
}

/** The files of a bundle directory as a repository holds them. */
function repoFiles(dir: string): Map<string, Buffer> {
  const out = new Map<string, Buffer>()
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name)
      if (e.isDirectory()) walk(p)
      else out.set(relative(dir, p).split('\\').join('/'), readFileSync(p))
    }
  }
  walk(dir)
  return out
}

describe('models by Hugging Face hub id (issue #35)', () => {
  let files: Map<string, Buffer>
  let hub: FakeHub
  const tmp = (): string => mkdtempSync(join(tmpdir(), 'onnxd-hub-'))
  const envFor = (cache: string, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv => ({ HF_ENDPOINT: hub.url, HF_HUB_CACHE: cache, ...extra })
  const quiet = { onNote: () => {}, onProgress: () => {} }

  beforeAll(async () => {
    const bundle = tmp()
    // The Hugging Face export layout (onnx/model_q4.onnx), as hub repositories hold it.
    await buildModel({ preset: 'tiny', outDir: bundle, attention: 'plain', dtypes: ['q4'] })
    files = repoFiles(bundle)
    // A README and a chat template file beside them, as hub repositories have (the first is not fetched).
    files.set('README.md', Buffer.from('# tiny\n'))
    files.set('chat_template.jinja', Buffer.from('{% for m in messages %}{{ m.content }}{% endfor %}'))
    hub = new FakeHub(files)
    await hub.start()
  }, 120_000)
  afterAll(async () => hub?.stop())
  afterEach(() => {
    hub.requests = []
    hub.cutOnce.clear()
    hub.wrongHash.clear()
    hub.ignoreRange.clear()
    hub.token = null
    vi.unstubAllEnvs()
    vi.restoreAllMocks()
  })

  it('tells hub ids from local bundles', () => {
    expect(hubModelId('onnx-community/SmolLM2-135M-Instruct')).toBe('onnx-community/SmolLM2-135M-Instruct')
    expect(hubModelId('Qwen/Qwen2.5-0.5B-Instruct')).toBe('Qwen/Qwen2.5-0.5B-Instruct')
    for (const local of ['./models/x', '/models/x', 'models/a/b', 'x', '../x/y', DEFAULT_MODEL_DIR, 'test/node', 'a/..']) expect(hubModelId(local), local).toBeNull()
    // Served under the hub id, as vLLM does; --model-id still wins.
    expect(servedModelId({ model: 'onnx-community/SmolLM2-135M-Instruct' })).toBe('onnx-community/SmolLM2-135M-Instruct')
    expect(servedModelId({ model: 'onnx-community/SmolLM2-135M-Instruct', modelId: 'smol' })).toBe('smol')
    expect(servedModelId({ model: DEFAULT_MODEL_DIR })).toBe('onnxd-tiny')
    // --revision belongs to a hub id.
    expect(loadNodeOptions({ ONNXD_MODEL: 'onnx-community/SmolLM2-135M-Instruct', ONNXD_REVISION: 'v1' }, {}, {}, { totalMemBytes: 2 ** 34 }).revision).toBe('v1')
    expect(() => loadNodeOptions({ ONNXD_MODEL: './bundle', ONNXD_REVISION: 'v1' }, {}, {}, { totalMemBytes: 2 ** 34 })).toThrow(
      'revision (ONNXD_REVISION, --revision) applies to a Hugging Face hub id --model (owner/name); ./bundle is a local bundle',
    )
  })

  it('picks the files a dtype needs: top-level JSON and Jinja, the variant and its external data last', () => {
    const f = (path: string): HubFile => ({ type: 'file', path, size: 1, oid: 'x' })
    const listing = ['README.md', '.gitattributes', 'config.json', 'tokenizer.json', 'chat_template.jinja', 'onnx/model.onnx', 'onnx/model_q4.onnx', 'onnx/model_q4.onnx_data', 'onnx/model_q4.onnx_data_1', 'onnx/model_fp16.onnx', 'onnx/model_fp16.onnx_data', 'sub/config.json'].map(f)
    expect(filesFor(listing, 'q4', 'o/m').map((x) => x.path)).toEqual(['config.json', 'tokenizer.json', 'chat_template.jinja', 'onnx/model_q4.onnx_data', 'onnx/model_q4.onnx_data_1', 'onnx/model_q4.onnx'])
    expect(filesFor(listing, 'fp32', 'o/m').map((x) => x.path).at(-1)).toBe('onnx/model.onnx')
    expect(() => filesFor(listing, 'int8', 'o/m')).toThrow('o/m has no model_int8.onnx (dtype int8) under onnx/ or at its top; its ONNX variants: fp32, fp16, q4')
  })

  it('draws the progress line in place on a terminal, and every 10% in a log', () => {
    const steps = [0, 5, 12, 50, 99, 100].map((pct) => ({ repo: 'o/m', file: 'onnx/model_q4.onnx', done: pct * 1e6, total: 100e6 }))
    let tty = ''
    const term = progressLine({ isTTY: true, columns: 100, write: (s: string) => ((tty += s), true) } as never)
    for (const p of steps) term.step(p)
    term.end()
    const frames = tty.split('\r').filter(Boolean)
    expect(frames).toHaveLength(6)
    for (const f of frames) expect(f.replace(/\n$/, '').length).toBe(99) // padded to the width, so a shorter frame wipes a longer one
    expect(frames[3]).toMatch(/^o\/m \[#{12}\.{12}\] {2}50% 50\.0\/100\.0 MB [\d.]+ MB\/s onnx\/model_q4\.onnx/)
    expect(tty.endsWith('\n')).toBe(true)
    let log = ''
    const file = progressLine({ isTTY: false, columns: 0, write: (s: string) => ((log += s), true) } as never)
    for (const p of steps) file.step(p)
    file.end()
    expect(log.split('\n').filter(Boolean).map((l) => /\]\s+(\d+)%/.exec(l)?.[1])).toEqual(['0', '12', '50', '99', '100'])
  })

  it('fetches the variant into the Hugging Face cache, verified, and serves it from there the next time', async () => {
    const cache = tmp()
    const progress: HubProgress[] = []
    const dir = await fetchHubModel(REPO_ID, { dtype: 'q4', env: envFor(cache), onNote: () => {}, onProgress: (p) => progress.push(p) })
    const repoDir = join(cache, 'models--onnxd-test--tiny-chat')
    expect(dir).toBe(join(repoDir, 'snapshots', COMMIT))
    expect(readFileSync(join(repoDir, 'refs', 'main'), 'utf8')).toBe(COMMIT)
    // The engine reads it as a bundle, its files identical to the repository's.
    const bundle = readBundle(dir, { dtype: 'q4' })
    expect(bundle.onnxPath).toBe(join(dir, 'onnx', 'model_q4.onnx'))
    expect(readFileSync(join(dir, 'onnx', 'model_q4.onnx')).equals(files.get('onnx/model_q4.onnx')!)).toBe(true)
    // Only what q4 needs: not the fp32 model nor the README. Links into blobs named by hash, as Hugging Face does.
    expect(existsSync(join(dir, 'onnx', 'model.onnx'))).toBe(false)
    expect(existsSync(join(dir, 'README.md'))).toBe(false)
    expect(hub.fileReads('onnx/model.onnx')).toEqual([])
    expect(readlinkSync(join(dir, 'onnx', 'model_q4.onnx'))).toBe(`../../../blobs/${sha256(files.get('onnx/model_q4.onnx')!)}`)
    expect(readlinkSync(join(dir, 'config.json'))).toBe(`../../blobs/${gitOid(files.get('config.json')!)}`)
    expect(existsSync(join(dir, 'chat_template.jinja'))).toBe(true)
    // Progress ran up to every byte fetched.
    const total = ['config.json', 'generation_config.json', 'special_tokens_map.json', 'tokenizer.json', 'tokenizer_config.json', 'chat_template.jinja', 'onnx/model_q4.onnx'].reduce((n, p) => n + files.get(p)!.length, 0)
    expect(progress.at(-1)).toMatchObject({ repo: REPO_ID, done: total, total })

    // Again: the hub is asked for the revision and the listing, no file is read again.
    hub.requests = []
    expect(await fetchHubModel(REPO_ID, { dtype: 'q4', env: envFor(cache), ...quiet })).toBe(dir)
    expect(hub.requests.filter((r) => r.path.includes('/resolve/'))).toEqual([])
    // By commit, too.
    expect(await fetchHubModel(REPO_ID, { dtype: 'q4', revision: COMMIT, env: envFor(cache), ...quiet })).toBe(dir)
  })

  it('fetches each file once when two processes share the cache at the same time', async () => {
    const cache = tmp()
    const [a, b] = await Promise.all([fetchHubModel(REPO_ID, { dtype: 'q4', env: envFor(cache), ...quiet }), fetchHubModel(REPO_ID, { dtype: 'q4', env: envFor(cache), ...quiet })])
    expect(a).toBe(b)
    expect(hub.fileReads('onnx/model_q4.onnx')).toHaveLength(1)
    expect(hub.fileReads('config.json')).toHaveLength(1)
    expect(readFileSync(join(a, 'onnx', 'model_q4.onnx')).equals(files.get('onnx/model_q4.onnx')!)).toBe(true)
    expect(readdirSync(join(cache, 'models--onnxd-test--tiny-chat', 'blobs')).filter((f) => f.endsWith('.lock') || f.endsWith('.incomplete'))).toEqual([])
  })

  it('works offline from the cache (HF_HUB_OFFLINE, or a hub that cannot be reached), and says when the cache lacks it', async () => {
    const cache = tmp()
    const dir = await fetchHubModel(REPO_ID, { dtype: 'q4', env: envFor(cache), ...quiet })
    hub.requests = []
    const notes: string[] = []
    expect(await fetchHubModel(REPO_ID, { dtype: 'q4', env: envFor(cache, { HF_HUB_OFFLINE: '1' }), onNote: (l) => notes.push(l) })).toBe(dir)
    expect(hub.requests).toEqual([])
    expect(notes).toEqual([`${REPO_ID}: HF_HUB_OFFLINE is set; using the cached snapshot ${dir}`])
    // A hub that does not answer at all: the cache serves, with a note that says why.
    const down = { HF_ENDPOINT: 'http://127.0.0.1:9', HF_HUB_CACHE: cache }
    notes.length = 0
    expect(await fetchHubModel(REPO_ID, { dtype: 'q4', env: down, onNote: (l) => notes.push(l) })).toBe(dir)
    expect(notes[0]).toMatch(new RegExp(`^${REPO_ID}: the hub at http://127.0.0.1:9 cannot be reached \\(.*\\); using the cached snapshot`))
    // Another variant was never fetched: offline, that is an error naming the cache.
    await expect(fetchHubModel(REPO_ID, { dtype: 'fp32', env: envFor(cache, { HF_HUB_OFFLINE: '1' }), ...quiet })).rejects.toThrow(
      `${REPO_ID} (revision main, dtype fp32): HF_HUB_OFFLINE is set, and the cache (${join(cache, 'models--onnxd-test--tiny-chat')}) does not hold it`,
    )
  })

  it('resumes a transfer cut off mid-file from where it stopped', async () => {
    const cache = tmp()
    hub.cutOnce.add('onnx/model_q4.onnx')
    const notes: string[] = []
    const dir = await fetchHubModel(REPO_ID, { dtype: 'q4', env: envFor(cache), onNote: (l) => notes.push(l), onProgress: () => {} })
    const size = files.get('onnx/model_q4.onnx')!.length
    const reads = hub.fileReads('onnx/model_q4.onnx')
    expect(reads).toHaveLength(2)
    expect(reads[0]!.range).toBeNull() // the whole file
    const resumedAt = Number(/^bytes=(\d+)-/.exec(reads[1]!.range ?? '')?.[1])
    expect(resumedAt).toBeGreaterThan(0)
    expect(resumedAt).toBeLessThan(size)
    expect(notes.some((n) => n.includes(`onnx/model_q4.onnx: interrupted at ${resumedAt} of ${size} bytes`))).toBe(true)
    expect(readFileSync(join(dir, 'onnx', 'model_q4.onnx')).equals(files.get('onnx/model_q4.onnx')!)).toBe(true)
  })

  it('resumes the partial file an interrupted run left in the cache', async () => {
    const cache = tmp()
    const body = files.get('onnx/model_q4.onnx')!
    const blobs = join(cache, 'models--onnxd-test--tiny-chat', 'blobs')
    mkdirSync(blobs, { recursive: true })
    const kept = Math.floor(body.length / 3)
    writeFileSync(join(blobs, `${sha256(body)}.incomplete`), body.subarray(0, kept))
    const notes: string[] = []
    const dir = await fetchHubModel(REPO_ID, { dtype: 'q4', env: envFor(cache), onNote: (l) => notes.push(l), onProgress: () => {} })
    expect(hub.fileReads('onnx/model_q4.onnx').map((r) => r.range)).toEqual([`bytes=${kept}-${body.length - 1}`])
    expect(notes).toContain(`${REPO_ID}: onnx/model_q4.onnx: resuming at ${kept} of ${body.length} bytes`)
    expect(readFileSync(join(dir, 'onnx', 'model_q4.onnx')).equals(body)).toBe(true)
    expect(existsSync(join(blobs, `${sha256(body)}.incomplete`))).toBe(false)
  })

  it('starts a partial file over when the server ignores the range and sends the whole file', async () => {
    const cache = tmp()
    const body = files.get('onnx/model_q4.onnx')!
    const blobs = join(cache, 'models--onnxd-test--tiny-chat', 'blobs')
    mkdirSync(blobs, { recursive: true })
    writeFileSync(join(blobs, `${sha256(body)}.incomplete`), body.subarray(0, 1000))
    hub.ignoreRange.add('onnx/model_q4.onnx')
    const dir = await fetchHubModel(REPO_ID, { dtype: 'q4', env: envFor(cache), ...quiet })
    expect(hub.fileReads('onnx/model_q4.onnx').map((r) => r.range)).toEqual([`bytes=1000-${body.length - 1}`])
    expect(readFileSync(join(dir, 'onnx', 'model_q4.onnx')).equals(body)).toBe(true)
  })

  it('refuses a file whose hash is not the one the hub reports, and keeps nothing of it', async () => {
    const cache = tmp()
    hub.wrongHash.add('onnx/model_q4.onnx')
    const actual = sha256(files.get('onnx/model_q4.onnx')!)
    await expect(fetchHubModel(REPO_ID, { dtype: 'q4', env: envFor(cache), ...quiet })).rejects.toMatchObject({
      code: 'bad_bundle',
      message: `${REPO_ID}@${COMMIT}: onnx/model_q4.onnx does not match the hub (sha256 ${actual}, the hub reports ${'0'.repeat(64)}): the download was discarded`,
    })
    const repoDir = join(cache, 'models--onnxd-test--tiny-chat')
    expect(readdirSync(join(repoDir, 'blobs')).filter((f) => f.startsWith(actual) || f.startsWith('0000'))).toEqual([])
    // The snapshot is not complete, so offline use refuses it rather than loading half a model.
    expect(existsSync(join(repoDir, 'snapshots', COMMIT, 'onnx', 'model_q4.onnx'))).toBe(false)
    await expect(fetchHubModel(REPO_ID, { dtype: 'q4', env: envFor(cache, { HF_HUB_OFFLINE: '1' }), ...quiet })).rejects.toThrow(/does not hold it/)
  })

  it('takes a token from HF_TOKEN for a private repository, and says when one is missing', async () => {
    const cache = tmp()
    hub.token = TOKEN
    await expect(fetchHubModel(REPO_ID, { dtype: 'q4', env: envFor(cache), ...quiet })).rejects.toMatchObject({
      code: 'config',
      message: `${REPO_ID} (revision main) on ${hub.url}: the hub refused access (401): it needs a token: set HF_TOKEN`,
    })
    await expect(fetchHubModel(REPO_ID, { dtype: 'q4', env: envFor(cache, { HF_TOKEN: 'hf_wrong' }), ...quiet })).rejects.toThrow('the hub refused access (401): HF_TOKEN cannot read it')
    await expect(fetchHubModel(REPO_ID, { dtype: 'q4', env: envFor(cache, { HF_TOKEN: 'not-a-token' }), ...quiet })).rejects.toThrow('HF_TOKEN: a Hugging Face token starts with hf_')
    hub.requests = []
    const dir = await fetchHubModel(REPO_ID, { dtype: 'q4', env: envFor(cache, { HF_TOKEN: TOKEN }), ...quiet })
    expect(readBundle(dir, { dtype: 'q4' }).onnxPath).toBe(join(dir, 'onnx', 'model_q4.onnx'))
    expect(hub.requests.length).toBeGreaterThan(3)
    for (const r of hub.requests) expect(r.auth, r.path).toBe(`Bearer ${TOKEN}`)
  })

  it('names an unknown revision or repository plainly', async () => {
    const cache = tmp()
    await expect(fetchHubModel(REPO_ID, { revision: 'v9', env: envFor(cache), ...quiet })).rejects.toThrow(
      `${REPO_ID} (revision v9) on ${hub.url}: no such model or revision (404), and no local directory ${REPO_ID}`,
    )
    await expect(fetchHubModel('onnxd-test/missing', { env: envFor(cache), ...quiet })).rejects.toThrow(/onnxd-test\/missing \(revision main\) on .*: no such model or revision \(404\)/)
  })

  it('a node started with --model owner/name fetches it before loading and serves it under the hub id', async () => {
    const cache = tmp()
    const port = await freePort()
    const opts = testOptions({ model: REPO_ID, dtype: 'q4', port, host: '127.0.0.1', workers: 1, intraOpThreads: 1 })
    const shutdown = deferred<NodeJS.Signals>()
    const url = `http://127.0.0.1:${port}`
    const running = serveNode(opts, shutdown.promise, {}, { env: envFor(cache) })
    let health: { status: string; models: string[] } = { status: '', models: [] }
    for (let i = 0; i < 3000 && health.status !== 'ready'; i++) {
      health = await fetch(`${url}/health`).then((r) => r.json() as Promise<typeof health>, () => health)
      if (health.status !== 'ready') await new Promise((r) => setTimeout(r, 20))
    }
    expect(health).toMatchObject({ status: 'ready', models: [REPO_ID] })
    const res = await post(url, completionBody({ model: REPO_ID, max_tokens: 2 }))
    expect(res.status).toBe(200)
    expect(existsSync(join(cache, 'models--onnxd-test--tiny-chat', 'snapshots', COMMIT, 'onnx', 'model_q4.onnx'))).toBe(true)
    shutdown.resolve('SIGTERM')
    await expect(running).resolves.toBe(0)
  }, 60_000)

  it('onnxd generate --model owner/name --dtype q4 fetches the model and runs it', async () => {
    const cache = tmp()
    vi.stubEnv('HF_ENDPOINT', hub.url)
    vi.stubEnv('HF_HUB_CACHE', cache)
    let stdout = ''
    let stderr = ''
    vi.spyOn(process.stdout, 'write').mockImplementation((s: string | Uint8Array) => ((stdout += String(s)), true))
    vi.spyOn(process.stderr, 'write').mockImplementation((s: string | Uint8Array) => ((stderr += String(s)), true))
    const code = await generate(['--model', REPO_ID, '--dtype', 'q4', '--max-tokens', '4', '--ignore-eos', '--json', 'hello'])
    vi.restoreAllMocks()
    expect(code).toBe(0)
    const out = JSON.parse(stdout) as { ids: number[] }
    expect(out.ids).toHaveLength(4)
    // The progress line (not a terminal here: one line per 10% step) ends at 100%.
    expect(stderr).toMatch(new RegExp(`^${REPO_ID} \\[#{24}\\] 100% `, 'm'))
    expect(existsSync(join(cache, 'models--onnxd-test--tiny-chat', 'snapshots', COMMIT, 'onnx', 'model_q4.onnx'))).toBe(true)
  }, 60_000)
})
