// A worker thread that runs one forward of the model at workerData.model through the C API (src/engine/model/
// ort-capi.ts) and posts the first logits, for test/engine/model/ort-capi.int.test.ts: the engine's sessions live in
// piscina worker threads, so koffi and ORT's C API must load, run and release there, worker after worker.
import { parentPort, workerData } from 'node:worker_threads'
import { liveCounts, OrtCApi } from '../../src/engine/model/ort-capi.js'

const api = OrtCApi.load()
const s = api.createSession((workerData as { model: string }).model, { intraOpThreads: 1 })
const b = s.binding()
const ids = s.alloc('int64', [1, 1])
const mask = s.alloc('int64', [1, 1])
const pos = s.alloc('int64', [1, 1])
const past = s.alloc('float32', [1, 2, 0, 16])
ids.data[0] = 7n
mask.data[0] = 1n
b.bindInput('input_ids', ids).bindInput('attention_mask', mask).bindInput('position_ids', pos)
for (const n of s.inputNames.slice(3)) b.bindInput(n, past)
for (const n of s.outputNames) b.bindOutputToCpu(n)
b.run()
const [logits] = b.outputs()
b.dispose()
for (const t of [ids, mask, pos, past]) t.dispose()
s.dispose()
api.dispose()
parentPort!.postMessage({ version: api.version, dims: logits!.dims, head: Array.from(logits!.data.subarray(0, 4) as Float32Array), live: liveCounts() })
