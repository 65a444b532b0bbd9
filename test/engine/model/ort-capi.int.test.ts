// ORT's C API through koffi (src/engine/model/ort-capi.ts) on real graphs, checked against onnxruntime-node's JS
// API on the same inputs: one forward of the embedded tiny model; a GroupQueryAttention export run with present
// bound onto the past buffer (alone and as a batch of rows at different lengths); ORT errors as OrtErrors; the
// memory rules (pins, every handle released); 2,000 steps with bindings made and released each step without
// growth. Prints the bytes a decode step moves and one step's time through each API.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import v8 from 'node:v8'
import vm from 'node:vm'
import { Worker } from 'node:worker_threads'
import * as ort from 'onnxruntime-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Binding, CSession, liveCounts, NativeBuffer, OrtCApi, OrtError, type Tensor } from '../../../src/engine/model/ort-capi.js'
import { tinyPlainModelDir, fixture, haveFixtures } from '../../helpers/fixtures.js'

const maxDiff = (a: ArrayLike<number>, b: ArrayLike<number>): number => {
  expect(a.length).toBe(b.length)
  let m = 0
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!))
  return m
}
const int64 = (xs: number[]): BigInt64Array => BigInt64Array.from(xs.map(BigInt))
/** A full garbage collection, to show that nothing ORT points at is collected under it (vitest runs without --expose-gc). */
v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc') as () => void
const shapeOf = (m: ort.InferenceSession.ValueMetadata | undefined): readonly (number | string)[] => (m && 'shape' in m ? m.shape : [])

let api: OrtCApi
beforeAll(() => {
  api = OrtCApi.load()
})
afterAll(() => {
  api.dispose()
  expect(liveCounts()).toEqual({ buffers: 0, values: 0, bindings: 0, sessions: 0, apis: 0 })
})

describe('ort-capi: the C API on the embedded tiny model (plain ops)', () => {
  const model = (): string => join(tinyPlainModelDir(), 'onnx', 'model.onnx')

  it('loads onnxruntime-node’s own libonnxruntime and reads the session’s names', () => {
    expect(api.version).toBe(JSON.parse(readFileSync(join(api.libraryPath, '../../../../../package.json'), 'utf8')).version)
    const s = api.createSession(readFileSync(model()), { intraOpThreads: 1 })
    try {
      expect(s.inputNames.slice(0, 3)).toEqual(['input_ids', 'attention_mask', 'position_ids'])
      expect(s.outputNames[0]).toBe('logits')
    } finally {
      s.dispose()
    }
  })

  it('runs one forward through IoBinding with logits and presents equal to the JS API’s', async () => {
    const js = await ort.InferenceSession.create(model(), { intraOpNumThreads: 1 })
    const s = api.createSession(model(), { intraOpThreads: 1 })
    const P = 6
    const layers = (s.inputNames.length - 3) / 2
    const pastShape = shapeOf(js.inputMetadata[3])
    const [heads, headDim] = [pastShape[1] as number, pastShape[3] as number]
    const vocab = shapeOf(js.outputMetadata[0])[2] as number
    const ids = [3, 141, 59, 26, 53, 5]
    const feeds: Record<string, ort.Tensor> = {
      input_ids: new ort.Tensor('int64', int64(ids), [1, P]),
      attention_mask: new ort.Tensor('int64', new BigInt64Array(P).fill(1n), [1, P]),
      position_ids: new ort.Tensor('int64', int64([0, 1, 2, 3, 4, 5]), [1, P]),
    }
    for (const n of s.inputNames.slice(3)) feeds[n] = new ort.Tensor('float32', new Float32Array(0), [1, heads, 0, headDim])
    const want = await js.run(feeds)

    const b = s.binding()
    const tensors: Tensor[] = []
    const t = <T extends Tensor>(x: T): T => (tensors.push(x), x)
    b.bindInput('input_ids', t(s.alloc('int64', [1, P]))).bindInput('attention_mask', t(s.alloc('int64', [1, P]))).bindInput('position_ids', t(s.alloc('int64', [1, P])))
    ;(tensors[0]!.data as BigInt64Array).set(int64(ids))
    ;(tensors[1]!.data as BigInt64Array).fill(1n)
    ;(tensors[2]!.data as BigInt64Array).set(int64([0, 1, 2, 3, 4, 5]))
    const empty = t(s.alloc('float32', [1, heads, 0, headDim]))
    for (const n of s.inputNames.slice(3)) b.bindInput(n, empty)
    const logits = t(s.alloc('float32', [1, P, vocab]))
    b.bindOutput('logits', logits)
    const presents = s.outputNames.slice(1).map((n) => {
      const p = t(s.alloc('float32', [1, heads, P, headDim]))
      b.bindOutput(n, p)
      return p
    })
    b.run()
    expect(layers).toBeGreaterThan(0)
    expect(maxDiff(logits.data, want.logits!.data as Float32Array)).toBeLessThanOrEqual(1e-5)
    presents.forEach((p, i) => expect(maxDiff(p.data, want[s.outputNames[i + 1]!]!.data as Float32Array)).toBeLessThanOrEqual(1e-5))

    // The same outputs, allocated by ORT and copied out through GetBoundOutputValues.
    b.clearOutputs()
    for (const n of s.outputNames) b.bindOutputToCpu(n)
    b.run()
    const outs = b.outputs()
    expect(outs.map((o) => o.dims)).toEqual(s.outputNames.map((n) => want[n]!.dims))
    expect(maxDiff(outs[0]!.data as Float32Array, want.logits!.data as Float32Array)).toBeLessThanOrEqual(1e-5)

    b.dispose()
    for (const x of tensors) x.dispose()
    s.dispose()
    await js.release()
  })

  it('turns a failing status into an OrtError with ORT’s message, and keeps working after', () => {
    const s = api.createSession(model(), { intraOpThreads: 1 })
    let b = s.binding()
    const ids = s.alloc('int64', [1, 2])
    try {
      expect(() => b.bindInput('no_such_input', ids)).toThrow(OrtError)
      // ORT leaves a binding inconsistent after a failed bind: it is refused from then on.
      expect(() => b.bindInput('input_ids', ids)).toThrow(/unusable after a failed bind \(BindInput\(no_such_input\)\)/)
      b.dispose()
      b = s.binding()
      expect(() => b.bindInput('no_such_input', ids)).toThrow(/BindInput\(no_such_input\).*Failed to find input name/)
      b.dispose()
      b = s.binding()
      // Inputs missing: RunWithBinding fails, the process does not.
      b.bindInput('input_ids', ids)
      expect(() => b.run()).toThrow(/RunWithBinding/)
      // A logits tensor of the wrong shape: ORT refuses to write into it.
      const m = s.alloc('int64', [1, 2])
      const p = s.alloc('int64', [1, 2])
      const past = s.alloc('float32', [1, 2, 0, 16])
      const wrong = s.alloc('float32', [1, 2, 7])
      b.bindInput('attention_mask', m).bindInput('position_ids', p)
      for (const n of s.inputNames.slice(3)) b.bindInput(n, past)
      b.bindOutput('logits', wrong)
      for (const n of s.outputNames.slice(1)) b.bindOutputToCpu(n)
      expect(() => b.run()).toThrow(/RunWithBinding.*invalid dimensions for output: logits/)
      // A failed run leaves the binding usable: rebind the output and the step runs.
      const right = s.alloc('float32', [1, 2, 2048])
      ;(m.data as BigInt64Array).fill(1n)
      b.bindOutput('logits', right)
      b.run()
      expect(right.data.some((x) => x !== 0)).toBe(true)
      b.dispose()
      for (const x of [m, p, past, wrong, right]) x.dispose()
      expect(() => api.createSession('/nonexistent/model.onnx')).toThrow(/CreateSession.*(No such file|Load model)/i)
      const st = api.makeStatus(6, 'made on purpose')
      expect(() => api.check('Test', st)).toThrow('ORT Test failed (code 6): made on purpose')
    } finally {
      b.dispose()
      ids.dispose()
      s.dispose()
    }
  })

  it('runs with run options (AddRunConfigEntry) and copies tensors (CopyTensors): the calls WebGPU graph capture makes', () => {
    const s = api.createSession(model(), { intraOpThreads: 1 })
    const b = s.binding()
    const P = 3
    const ids = s.alloc('int64', [1, P])
    const mask = s.alloc('int64', [1, P])
    const pos = s.alloc('int64', [1, P])
    const past = s.alloc('float32', [1, 2, 0, 16])
    const logits = s.alloc('float32', [1, P, 2048])
    const before = s.alloc('float32', [1, P, 2048])
    const opts = api.runOptions({ gpu_graph_id: '-1' })
    try {
      ;(ids.data as BigInt64Array).set(int64([3, 141, 59]))
      ;(mask.data as BigInt64Array).fill(1n)
      ;(pos.data as BigInt64Array).set(int64([0, 1, 2]))
      b.bindInput('input_ids', ids).bindInput('attention_mask', mask).bindInput('position_ids', pos)
      for (const n of s.inputNames.slice(3)) b.bindInput(n, past)
      b.bindOutput('logits', logits)
      for (const n of s.outputNames.slice(1)) b.bindOutputToCpu(n)
      b.run()
      before.data.set(logits.data)
      logits.data.fill(0)
      // A run not to be captured (gpu_graph_id -1): on the CPU, the same run.
      b.run(opts)
      expect(maxDiff(logits.data, before.data)).toBe(0)
      // ORT's CopyTensors copies through an execution provider's data transfer, and has none from host to host: the
      // call at table index 386 answers so (the WebGPU suites check its copies to and from the device).
      expect(() => api.copyTensors([[logits, before]])).toThrow(/ORT CopyTensors failed .*Data transfer implementation between source and destination device was not found/)
    } finally {
      opts.dispose()
      b.dispose()
      for (const x of [ids, mask, pos, past, logits, before]) x.dispose()
      s.dispose()
    }
  })

  it('runs in worker threads, one after another, as the engine’s pool would, with the main thread’s answer', async () => {
    const s = api.createSession(model(), { intraOpThreads: 1 })
    const b = s.binding()
    const ts = [s.alloc('int64', [1, 1]), s.alloc('int64', [1, 1]), s.alloc('int64', [1, 1]), s.alloc('float32', [1, 2, 0, 16])]
    ;(ts[0]!.data as BigInt64Array)[0] = 7n
    ;(ts[1]!.data as BigInt64Array)[0] = 1n
    b.bindInput('input_ids', ts[0]!).bindInput('attention_mask', ts[1]!).bindInput('position_ids', ts[2]!)
    for (const n of s.inputNames.slice(3)) b.bindInput(n, ts[3]!)
    for (const n of s.outputNames) b.bindOutputToCpu(n)
    b.run()
    const head = Array.from((b.outputs()[0]!.data as Float32Array).subarray(0, 4))
    b.dispose()
    for (const t of ts) t.dispose()
    s.dispose()
    for (let k = 0; k < 2; k++) {
      const w = new Worker(new URL('../../helpers/ts-worker.mjs', import.meta.url), {
        workerData: { entry: new URL('../../helpers/ort-capi-worker.ts', import.meta.url).href, model: model() },
      })
      const got = await new Promise<{ version: string; head: number[]; live: Record<string, number> }>((ok, fail) => {
        w.once('message', ok)
        w.once('error', fail)
      })
      await w.terminate()
      expect(got.version).toBe(api.version)
      expect(got.head).toEqual(head)
      expect(got.live).toEqual({ buffers: 0, values: 0, bindings: 0, sessions: 0, apis: 0 })
    }
  })

  it('keeps memory ORT points at alive: a pinned buffer refuses to be freed until its tensors and bindings are gone', () => {
    const s = api.createSession(model(), { intraOpThreads: 1 })
    const buf = new NativeBuffer(64)
    const t = s.tensor(buf, 'int64', [1, 8])
    const own = s.alloc('int64', [1, 8])
    const b = s.binding()
    b.bindInput('input_ids', t).bindInput('position_ids', own)
    expect(buf.pinned).toBe(2)
    t.dispose()
    expect(() => buf.dispose()).toThrow(/pinned by 1/)
    expect(() => own.dispose()).toThrow(/still bound/)
    b.dispose()
    expect(buf.pinned).toBe(0)
    own.dispose()
    buf.dispose()
    expect(() => buf.view('int64')).toThrow(/after dispose/)
    const small = new NativeBuffer(8)
    expect(() => s.tensor(small, 'int64', [1, 2])).toThrow(RangeError)
    expect(small.pinned).toBe(0)
    small.dispose()
    s.dispose()
  })
})

describe('ort-capi: one decode step on the embedded tiny model, C API vs JS API', () => {
  it('computes the same logits through a binding (presents bound to buffers the runtime owns) as the JS API, contexts 32 and 256; times both', async () => {
    const model = join(tinyPlainModelDir(), 'onnx', 'model.onnx')
    const js = await ort.InferenceSession.create(model, { intraOpNumThreads: 1 })
    const s = api.createSession(model, { intraOpThreads: 1 })
    const pastShape = shapeOf(js.inputMetadata[3])
    const [H, D] = [pastShape[1] as number, pastShape[3] as number]
    const V = shapeOf(js.outputMetadata[0])[2] as number
    const pastNames = s.inputNames.slice(3)
    const rows: Record<string, string>[] = []
    for (const ctx of [32, 256]) {
      const feeds: Record<string, ort.Tensor> = {
        input_ids: new ort.Tensor('int64', int64([7]), [1, 1]),
        attention_mask: new ort.Tensor('int64', new BigInt64Array(ctx + 1).fill(1n), [1, ctx + 1]),
        position_ids: new ort.Tensor('int64', int64([ctx]), [1, 1]),
      }
      for (const n of pastNames) feeds[n] = new ort.Tensor('float32', new Float32Array(H * ctx * D).fill(0.01), [1, H, ctx, D])
      const jsMs = await median(async () => void (await js.run(feeds)))
      const b = s.binding()
      const ts: Tensor[] = []
      const keep = <T extends Tensor>(t: T): T => (ts.push(t), t)
      // The same inputs as the JS feeds.
      const ids = keep(s.alloc('int64', [1, 1]))
      ids.data.fill(7n)
      b.bindInput('input_ids', ids)
      const mask = keep(s.alloc('int64', [1, ctx + 1]))
      mask.data.fill(1n)
      const pos = keep(s.alloc('int64', [1, 1]))
      pos.data.fill(BigInt(ctx))
      b.bindInput('attention_mask', mask).bindInput('position_ids', pos)
      for (const n of pastNames) {
        const past = keep(s.alloc('float32', [1, H, ctx, D]))
        past.data.fill(0.01)
        b.bindInput(n, past)
      }
      const logits = keep(s.alloc('float32', [1, 1, V]))
      b.bindOutput('logits', logits)
      for (const n of s.outputNames.slice(1)) b.bindOutput(n, keep(s.alloc('float32', [1, H, ctx + 1, D])))
      const cMs = await median(async () => b.run())
      expectClose(logits.data as Float32Array, (await js.run(feeds)).logits!.data as Float32Array, `context ${ctx}`)
      rows.push({ context: String(ctx), 'JS API ms': jsMs.toFixed(3), 'C API ms': cMs.toFixed(3), 'JS/C': (jsMs / cMs).toFixed(2) })
      b.dispose()
      for (const t of ts) t.dispose()
    }
    console.log('[ort-capi] one decode step of the embedded tiny model (plain ops, batch 1, 1 thread, median of 100)')
    console.table(rows)
    s.dispose()
    await js.release()
  })
})

/** The GroupQueryAttention export: past [batch, kvHeads, max, headDim] shared with present, lengths from the mask. */
describe.skipIf(!haveFixtures)('ort-capi: GroupQueryAttention with present bound onto the past buffer', () => {
  const MODEL = fixture('tiny-random-LlamaForCausalLM-fp32-derived/model.onnx')
  const L = 2
  const H = 1
  const D = 16
  const V = 32000
  const MAX = 64
  let js: ort.InferenceSession
  let s: CSession
  beforeAll(async () => {
    js = await ort.InferenceSession.create(MODEL, { intraOpNumThreads: 1 })
    s = api.createSession(MODEL, { intraOpThreads: 1 })
  })
  afterAll(async () => {
    s.dispose()
    await js.release()
  })
  const kvNames = Array.from({ length: L }, (_, i) => [`${i}.key`, `${i}.value`]).flat()

  /** The JS API's path, as onnxd runs it today: separate past and present, every present copied out. */
  async function jsGenerate(tokens: number[], prompt: number): Promise<Float32Array[]> {
    let past: Record<string, ort.Tensor> = {}
    for (const n of kvNames) past[n] = new ort.Tensor('float32', new Float32Array(0), [1, H, 0, D])
    const out: Float32Array[] = []
    let len = 0
    for (let at = 0; at < tokens.length; ) {
      const step = at === 0 ? prompt : 1
      const feeds: Record<string, ort.Tensor> = {
        input_ids: new ort.Tensor('int64', int64(tokens.slice(at, at + step)), [1, step]),
        attention_mask: new ort.Tensor('int64', new BigInt64Array(len + step).fill(1n), [1, len + step]),
      }
      for (const n of kvNames) feeds[`past_key_values.${n}`] = past[n]!
      const r = await js.run(feeds)
      out.push((r.logits!.data as Float32Array).slice(-V))
      past = Object.fromEntries(kvNames.map((n) => [n, r[`present.${n}`]!]))
      len += step
      at += step
    }
    return out
  }

  /** The cache: one buffer per past input, [rows, H, MAX, D], zeroed. */
  function cache(rows: number): Map<string, NativeBuffer> {
    return new Map(kvNames.map((n) => [n, new NativeBuffer(rows * H * MAX * D * 4)]))
  }

  /** Binds every past input and its present output to the same tensor over rows [from, from + rows) of the cache. */
  function bindCache(b: Binding, kv: Map<string, NativeBuffer>, from: number, rows: number): Tensor[] {
    return kvNames.map((n) => {
      const t = s.tensor(kv.get(n)!, 'float32', [rows, H, MAX, D], from * H * MAX * D * 4)
      b.bindInput(`past_key_values.${n}`, t).bindOutput(`present.${n}`, t)
      return t
    })
  }

  /** One step over `rows` rows: ids [rows, seq], mask [rows, width] with each row's length + seq ones. */
  function step(b: Binding, ids: number[][], lens: number[]): { logits: Float32Array; crossed: number } {
    const rows = ids.length
    const seq = ids[0]!.length
    const width = Math.max(...lens) + seq
    const idT = s.alloc('int64', [rows, seq])
    const maskT = s.alloc('int64', [rows, width])
    const logits = s.alloc('float32', [rows, seq, V])
    idT.data.set(int64(ids.flat()))
    lens.forEach((len, r) => maskT.data.fill(1n, r * width, r * width + len + seq))
    b.bindInput('input_ids', idT).bindInput('attention_mask', maskT).bindOutput('logits', logits)
    b.run()
    const last = new Float32Array(rows * V)
    for (let r = 0; r < rows; r++) last.set(logits.data.subarray((r * seq + seq - 1) * V, (r * seq + seq) * V), r * V)
    const crossed = idT.bytes + maskT.bytes + logits.bytes
    b.clearInputs()
    b.clearOutputs()
    for (const t of [idT, maskT, logits]) t.dispose()
    return { logits: last, crossed }
  }

  it('a prompt step then decode steps write present into the past buffer, with the JS path’s logits', async () => {
    const tokens = [5, 17, 300, 42, 9, 77, 1024, 3, 31999]
    const P = 5
    const want = await jsGenerate(tokens, P)
    const kv = cache(1)
    const b = s.binding()
    const tensors = bindCache(b, kv, 0, 1)
    const bindKv = (): void => void tensors.forEach((t, i) => b.bindInput(`past_key_values.${kvNames[i]}`, t).bindOutput(`present.${kvNames[i]}`, t))
    let len = 0
    const crossed: number[] = []
    const addresses = [...kv.values()].map((buf) => buf.address)
    for (let at = 0, k = 0; at < tokens.length; k++) {
      const n = at === 0 ? P : 1
      gc() // the cache's memory neither moves nor goes while ORT points at it
      expect([...kv.values()].map((buf) => buf.address)).toEqual(addresses)
      bindKv()
      const r = step(b, [tokens.slice(at, at + n)], [len])
      expect(maxDiff(r.logits, want[k]!)).toBeLessThanOrEqual(1e-5)
      crossed.push(r.crossed)
      len += n
      at += n
    }
    // ORT wrote each token's key and value in place: the cache's first `len` slots are the JS path's last present.
    const last = await js.run({
      input_ids: new ort.Tensor('int64', int64(tokens), [1, tokens.length]),
      attention_mask: new ort.Tensor('int64', new BigInt64Array(tokens.length).fill(1n), [1, tokens.length]),
      ...Object.fromEntries(kvNames.map((n) => [`past_key_values.${n}`, new ort.Tensor('float32', new Float32Array(0), [1, H, 0, D])])),
    })
    for (const n of kvNames) expect(maxDiff(kv.get(n)!.view('float32', 0, len * D), last[`present.${n}`]!.data as Float32Array)).toBeLessThanOrEqual(1e-5)
    b.dispose()
    for (const t of tensors) t.dispose()
    for (const buf of kv.values()) buf.dispose()

    // Bytes per decode step at past length n. C API: ids and mask in, the last logits out; the cache stays put.
    // The JS API also copies every present out (and onnxd copies the new rows again), growing with n.
    const decode = crossed.slice(1)
    const kvOut = (n: number): number => kvNames.length * H * (n + 1) * D * 4
    console.log(
      `[ort-capi] GQA decode bytes/step at past ${P}..${P + decode.length - 1}: C API ${decode.join(', ')} ` +
        `(ids 8 + mask 8·(n+1) + logits ${4 * V}; KV 0); JS API the same plus presents copied out: ${decode.map((_, i) => kvOut(P + i)).join(', ')}`,
    )
    expect(decode).toEqual(decode.map((_, i) => 8 + 8 * (P + i + 1) + 4 * V))
  })

  it('rows at different lengths decode in one batch, each over its own length, equal to decoding alone', async () => {
    const a = [5, 17, 300, 42, 9]
    const c = [1000, 2, 333]
    const [wa, wc] = [await jsGenerate([...a, 77], a.length), await jsGenerate([...c, 88], c.length)]
    const kv = cache(2)
    const b = s.binding()
    // Prefill each row alone through a tensor over its own slice of the cache.
    for (const [row, toks] of [a, c].entries()) {
      const ts = bindCache(b, kv, row, 1)
      step(b, [toks], [0])
      // clearOutputs ran in step(); the past inputs were cleared too.
      for (const t of ts) t.dispose()
    }
    const all = bindCache(b, kv, 0, 2)
    const r = step(b, [[77], [88]], [a.length, c.length])
    expect(maxDiff(r.logits.subarray(0, V), wa[1]!)).toBeLessThanOrEqual(1e-5)
    expect(maxDiff(r.logits.subarray(V), wc[1]!)).toBeLessThanOrEqual(1e-5)
    b.dispose()
    for (const t of all) t.dispose()
    for (const buf of kv.values()) buf.dispose()
  })

  it('2,000 decode steps with a binding and its tensors made and released each step: nothing grows', () => {
    const kv = cache(1)
    const before = liveCounts()
    const run = (steps: number): void => {
      for (let i = 0; i < steps; i++) {
        const b = s.binding()
        const ts = bindCache(b, kv, 0, 1)
        step(b, [[(i * 7919) % V]], [8 + (i % 48)])
        b.dispose()
        for (const t of ts) t.dispose()
      }
    }
    // Warm ORT's arena, V8 and malloc first, then measure RSS over five windows of 400 steps. Freed ArrayBuffers (the
    // 128 KB logits of each step) stay in malloc's heaps for reuse, and on this shared host that rise sometimes runs
    // on for thousands of steps (9.5 to 23 MiB over one 2,000-step window was seen), but it comes in jumps; a leak
    // grows in every window. So the check is the smallest window's growth: 1 MiB per 400 steps is 2.6 KB a step.
    run(1000)
    gc()
    const windows: number[] = []
    const t0 = performance.now()
    for (let w = 0; w < 5; w++) {
      const rss0 = process.memoryUsage().rss
      run(400)
      gc()
      windows.push((process.memoryUsage().rss - rss0) / 2 ** 20)
    }
    const ms = performance.now() - t0
    console.log(`[ort-capi] 2,000 steps in ${ms.toFixed(0)} ms (${((ms / 2000) * 1000).toFixed(0)} µs/step); RSS growth per 400-step window: ${windows.map((g) => g.toFixed(2)).join(', ')} MiB`)
    const grown = Math.min(...windows)
    expect(liveCounts()).toEqual(before)
    expect(grown).toBeLessThan(1)
    for (const buf of kv.values()) buf.dispose()
  })

  it('computes the same logits with the shared past/present buffer as the JS API, contexts 32 and 1,024; times both', async () => {
    const rows: Record<string, string>[] = []
    for (const ctx of [32, 1024]) {
      const kvMax = ctx + 1
      // JS: past tensors of length ctx (their contents do not matter for timing), presents copied out.
      const feeds: Record<string, ort.Tensor> = {
        input_ids: new ort.Tensor('int64', int64([7]), [1, 1]),
        attention_mask: new ort.Tensor('int64', new BigInt64Array(ctx + 1).fill(1n), [1, ctx + 1]),
      }
      for (const n of kvNames) feeds[`past_key_values.${n}`] = new ort.Tensor('float32', new Float32Array(H * ctx * D).fill(0.01), [1, H, ctx, D])
      const jsMs = await median(async () => void (await js.run(feeds)))
      // C: one binding kept across steps, present bound onto past, only ids, mask and logits touched.
      const bufs = kvNames.map(() => new NativeBuffer(H * kvMax * D * 4))
      const b = s.binding()
      const kvT = bufs.map((buf, i) => {
        const t = s.tensor(buf, 'float32', [1, H, kvMax, D])
        ;(t.data as Float32Array).fill(0.01) // the past the JS feeds hold; the step writes its own row in place
        b.bindInput(`past_key_values.${kvNames[i]}`, t).bindOutput(`present.${kvNames[i]}`, t)
        return t
      })
      const idT = s.alloc('int64', [1, 1])
      idT.data.fill(7n)
      const maskT = s.alloc('int64', [1, ctx + 1])
      maskT.data.fill(1n)
      const logits = s.alloc('float32', [1, 1, V])
      b.bindInput('input_ids', idT).bindInput('attention_mask', maskT).bindOutput('logits', logits)
      const cMs = await median(async () => b.run())
      expectClose(logits.data as Float32Array, (await js.run(feeds)).logits!.data as Float32Array, `context ${ctx}`)
      rows.push({ context: String(ctx), 'JS API ms': jsMs.toFixed(3), 'C API ms': cMs.toFixed(3), 'JS/C': (jsMs / cMs).toFixed(2) })
      b.dispose()
      for (const t of [...kvT, idT, maskT, logits]) t.dispose()
      for (const buf of bufs) buf.dispose()
    }
    console.log('[ort-capi] one GQA decode step (tiny-random-LlamaForCausalLM, batch 1, 1 thread, median of 100)')
    console.table(rows)
  })
})

/** Two logit rows agree to float32 rounding (one graph, one thread, the same inputs through two APIs). */
function expectClose(got: Float32Array, want: Float32Array, what: string): void {
  expect(got.length, what).toBe(want.length)
  let worst = 0
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!))
  expect(worst, what).toBeLessThan(1e-4)
}

async function median(f: () => Promise<void>, n = 100): Promise<number> {
  for (let i = 0; i < 10; i++) await f()
  const ms: number[] = []
  for (let i = 0; i < n; i++) {
    const t = performance.now()
    await f()
    ms.push(performance.now() - t)
  }
  return ms.sort((a, b) => a - b)[n >> 1]!
}
