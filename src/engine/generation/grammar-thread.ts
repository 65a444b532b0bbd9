// The grammar thread: one per engine replica, it owns xgrammar (its WebAssembly build, the npm package
// @mlc-ai/web-xgrammar; this module is its one importer), the model's grammar compiler, the compiled grammars and
// every structured sequence's matcher. Compiling a grammar can take seconds, and xgrammar's objects cannot leave the
// WebAssembly instance that made them, so both the compiling and the per-step masks run here, never on the replica's
// step loop. The replica side (grammar.ts) talks to it with the messages below, and replaces the whole thread (its
// memory goes back to the system) when a compile runs past its time, fails inside WebAssembly, or grows the heap past
// its bound. Imports: node, the package's types, the protocol's types.
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname } from 'node:path'
import { parentPort, workerData } from 'node:worker_threads'
import type * as XG from '@mlc-ai/web-xgrammar'
import { isOnnxdError } from '../../shared/errors.js'
import type { GrammarReply, GrammarRequest, GrammarThreadData } from './grammar-protocol.js'
import { grammarOf } from './grammar-source.js'

type Xgrammar = typeof XG
/** A WebAssembly.Memory (the project's type libraries have no WebAssembly types). */
interface WasmMemory {
  buffer: ArrayBuffer
}

/** An error's message as a reply carries it. */
const messageOf = (e: unknown): string => String((e as Error)?.message ?? e).slice(0, 200)

/** A WebAssembly trap (out of bounds, unreachable, an abort): the instance is no longer usable. */
const isTrap = (e: unknown): boolean => (e as Error)?.name === 'RuntimeError' || /abort/i.test(String(e))

/**
 * The package. Its bundle is UMD in a package marked `"type": "module"`, which Node's ESM loader cannot run (it
 * reads `require`), so it is evaluated here as the CommonJS module it also is (pinned: 0.1.27). `onMemory` receives
 * its WebAssembly memory, whose size is the heap this thread's grammars hold.
 */
function loadXgrammar(onMemory: (m: WasmMemory) => void): Xgrammar {
  const file = createRequire(import.meta.url).resolve('@mlc-ai/web-xgrammar')
  const module = { exports: {} as Record<string, unknown> }
  // Its one dynamic import (of node:module, for createRequire) becomes a require: code made by new Function has no
  // module loader to import with inside vitest's VM contexts.
  const source = readFileSync(file, 'utf8')
    .replace("await import('module')", "require('module')")
    .replace('wasmMemory=wasmExports["S"];', 'wasmMemory=wasmExports["S"];__onnxdMemory(wasmMemory);')
  new Function('exports', 'module', 'require', '__filename', '__dirname', '__onnxdMemory', source)(module.exports, module, createRequire(file), file, dirname(file), onMemory)
  return module.exports as unknown as Xgrammar
}

let memory: WasmMemory | null = null
const xg = loadXgrammar((m) => (memory = m))
const data = workerData as GrammarThreadData
const port = parentPort!
const heapBytes = (): number => memory?.buffer.byteLength ?? 0

let compilerMade: Promise<XG.GrammarCompiler> | null = null
function compiler(): Promise<XG.GrammarCompiler> {
  compilerMade ??= (async () => {
    const v = data.vocabulary
    const info = await xg.TokenizerInfo.createTokenizerInfo(v.pieces, v.kind, v.prependsSpace, v.pieces.length, [...data.stopIds])
    return xg.GrammarCompiler.createGrammarCompiler(info, true)
  })()
  return compilerMade
}

/** Compiled grammars by key, least recently used first. */
const compiled = new Map<string, XG.CompiledGrammar>()
const matchers = new Map<number, XG.GrammarMatcher>()

async function compile(r: Extract<GrammarRequest, { type: 'open' }>): Promise<XG.CompiledGrammar> {
  const hit = compiled.get(r.key)
  if (hit) {
    compiled.delete(r.key)
    compiled.set(r.key, hit)
    return hit
  }
  const c = await compiler()
  // The replica times the compile from here, and replaces this thread when it runs past its bound.
  port.postMessage({ type: 'compiling', req: r.req } satisfies GrammarReply)
  const { ebnf, auto } = grammarOf(r.spec)
  const g = auto ? await c.compileStructuralTag(auto) : await c.compileGrammar(ebnf, 'root')
  compiled.set(r.key, g)
  while (compiled.size > data.maxCached) {
    const [oldest, evicted] = compiled.entries().next().value as [string, XG.CompiledGrammar]
    compiled.delete(oldest)
    evicted.dispose()
  }
  return g
}

async function open(r: Extract<GrammarRequest, { type: 'open' }>): Promise<GrammarReply> {
  try {
    const g = await compile(r)
    // Every grammar takes the model's end-of-sequence token wherever its value may end (see nextOf), as llguidance
    // and xgrammar's own serving integrations do: a value at its end is complete only when nothing can continue it.
    const m = await xg.GrammarMatcher.createGrammarMatcher(g, undefined, false)
    for (const id of r.replay) if (!m.acceptToken(id)) throw new Error(`the replayed token ${id} is outside the grammar`)
    matchers.set(r.m, m)
    return { type: 'opened', req: r.req, heapBytes: heapBytes(), bits: (await nextOf(m)).bits }
  } catch (e) {
    // The converter's 422 goes back as it is. A WebAssembly trap (out of bounds, an abort, out of memory) leaves the
    // instance unusable: the replica replaces this thread. Any other error is the grammar's own (xgrammar refused it).
    if (isOnnxdError(e)) return { type: 'failed', req: r.req, message: e.message, fatal: false, refusal: { message: e.message, ...(typeof e.details.param === "string" ? { param: e.details.param } : {}) } }
    return { type: 'failed', req: r.req, message: messageOf(e), fatal: isTrap(e) }
  }
}

/** Bit i set: token i ends the sequence (the model's EOS); sized to the masks on first use. */
let stopBits: Int32Array | null = null

/**
 * Whether `m`'s value is complete, and else its mask for the next token. Complete: it took an end-of-sequence token,
 * or nothing but one can follow (an object after its closing brace: it ends there, with no step spent on the EOS).
 * Where the value may end but could also go on (a number at the root after `4`: `42`, `4.5` and `4` are all
 * numbers), the mask allows both the EOS and the tokens that continue it: the model decides where it ends.
 */
async function nextOf(m: XG.GrammarMatcher): Promise<{ terminated: boolean; bits: Int32Array | null }> {
  if (m.isTerminated()) return { terminated: true, bits: null }
  const bits = await m.getNextTokenBitmask()
  if (!stopBits || stopBits.length !== bits.length) {
    stopBits = new Int32Array(bits.length)
    for (const id of data.stopIds) if (id >> 5 < bits.length) stopBits[id >> 5] = (stopBits[id >> 5] ?? 0) | (1 << (id & 31))
  }
  for (let w = 0; w < bits.length; w++) if ((bits[w]! & ~stopBits[w]!) !== 0) return { terminated: false, bits }
  return { terminated: true, bits: null }
}

async function next(r: Extract<GrammarRequest, { type: 'next' }>): Promise<void> {
  const results: Extract<GrammarReply, { type: 'masks' }>['results'] = []
  const transfer: ArrayBuffer[] = []
  for (const item of r.items) {
    const m = matchers.get(item.m)
    if (!m) {
      results.push({ rejected: true, terminated: false, bits: null })
      continue
    }
    const rejected = item.accept !== null && !m.acceptToken(item.accept)
    const { terminated, bits } = rejected ? { terminated: false, bits: null } : await nextOf(m)
    if (bits) transfer.push(bits.buffer as ArrayBuffer)
    results.push({ rejected, terminated, bits })
  }
  port.postMessage({ type: 'masks', req: r.req, results } satisfies GrammarReply, transfer)
}

// One message at a time, in order: a matcher's masks come after its open and its accepted tokens.
let queue: Promise<void> = Promise.resolve()
port.on('message', (r: GrammarRequest) => {
  queue = queue.then(async () => {
    try {
      if (r.type === 'open') {
        const reply = await open(r)
        port.postMessage(reply, reply.type === 'opened' && reply.bits ? [reply.bits.buffer as ArrayBuffer] : [])
      }
      else if (r.type === 'next') await next(r)
      else {
        matchers.get(r.m)?.dispose()
        matchers.delete(r.m)
      }
    } catch (e) {
      // A trap in a matcher's step: the replica fails the requests it touches and replaces the thread.
      if (r.type !== 'close') port.postMessage({ type: 'failed', req: r.req, message: messageOf(e), fatal: true } satisfies GrammarReply)
    }
  })
})
