// Writes a decoder graph to model.onnx, its weights inline or in a `model.onnx_data` file beside it (the
// external-data layout optimum and onnx-community use), generating each weight just before it is written.
import { open, rm, writeFile } from 'node:fs/promises'
import { endianness } from 'node:os'
import { basename, dirname, join } from 'node:path'
import type { DecoderGraph, StoredTensor, WeightSpec } from './graph.js'
import { DataLocation, DataType, encodeModel, type Tensor } from '../engine/model/onnx-proto.js'
import { Rng } from '../shared/prng.js'

/** ONNX IR version 8 is the one that goes with opset 17. */
const IR_VERSION = 8
const OPSET = 17
/** Tensors under this many bytes stay inline even in external mode (onnx's own default size_threshold). */
const EXTERNAL_MIN_BYTES = 1024
/** External tensors start on page boundaries so ONNX Runtime can map them instead of copying. */
const EXTERNAL_ALIGN = 4096

export interface WriteOptions {
  seed: number
  externalData: boolean
  producerVersion: string
  /** The external-data file's name beside model.onnx: `model.onnx_data` (optimum) unless given (genai: `model.onnx.data`). */
  dataFile?: string
}

/** A weight's float32 values for `seed` (also what the GGUF writer, gguf.ts, converts). */
export function makeWeight(w: WeightSpec, seed: number): Float32Array {
  const n = w.dims.reduce((a, b) => a * b, 1)
  switch (w.init.kind) {
    case 'ones':
      return new Float32Array(n).fill(1)
    case 'values': {
      const v = w.init.make()
      if (v.length !== n) throw new Error(`${w.name}: ${v.length} values for dims [${w.dims.join(', ')}]`)
      return v
    }
    case 'normal': {
      const v = new Float32Array(n)
      new Rng(seed, w.init.stream ?? w.name).fillNormal(v, w.init.std)
      return v
    }
    case 'columns': {
      // Each part is the [rows, cols] weight its stream makes on its own; row r of the result is their rows r in turn.
      const cols = w.dims[w.dims.length - 1]
      const rows = n / cols
      const v = new Float32Array(n)
      let at = 0
      for (const part of w.init.parts) {
        const block = new Float32Array(rows * part.cols)
        new Rng(seed, part.stream).fillNormal(block, w.init.std)
        for (let r = 0; r < rows; r++) v.set(block.subarray(r * part.cols, (r + 1) * part.cols), r * cols + at)
        at += part.cols
      }
      if (at !== cols) throw new Error(`${w.name}: parts cover ${at} of ${cols} columns`)
      return v
    }
  }
}

const bytesOf = (a: Float32Array): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength)

/** What the file holds for a weight: its `store` tensors, or its float32 values as they are. */
function storedTensors(w: WeightSpec, seed: number): StoredTensor[] {
  const values = makeWeight(w, seed)
  return w.store ? w.store(values) : [{ name: w.name, dims: w.dims, dataType: DataType.FLOAT, bytes: bytesOf(values) }]
}

const inline = (t: StoredTensor): Tensor => ({ name: t.name, dims: t.dims, data_type: t.dataType, raw_data: t.bytes })

/** Writes `path` (and `path` + `_data` in external mode). Returns the bytes written. */
export async function writeOnnx(path: string, graph: DecoderGraph, opts: WriteOptions): Promise<number> {
  // raw_data is little-endian by the ONNX spec; Float32Array bytes are the host's order.
  if (endianness() !== 'LE') throw new Error('the model builder needs a little-endian host')
  const dataPath = opts.dataFile ? join(dirname(path), opts.dataFile) : `${path}_data`
  const initializer: Tensor[] = [...graph.constants]
  let dataBytes = 0
  if (opts.externalData) {
    const fh = await open(dataPath, 'w')
    try {
      for (const w of graph.weights) {
        for (const t of storedTensors(w, opts.seed)) {
          if (t.bytes.length < EXTERNAL_MIN_BYTES) {
            initializer.push(inline(t))
            continue
          }
          const pad = (EXTERNAL_ALIGN - (dataBytes % EXTERNAL_ALIGN)) % EXTERNAL_ALIGN
          if (pad) await fh.write(new Uint8Array(pad))
          const offset = dataBytes + pad
          await fh.write(t.bytes)
          dataBytes = offset + t.bytes.length
          initializer.push({
            name: t.name,
            dims: t.dims,
            data_type: t.dataType,
            external_data: [
              { key: 'location', value: basename(dataPath) },
              { key: 'offset', value: String(offset) },
              { key: 'length', value: String(t.bytes.length) },
            ],
            data_location: DataLocation.EXTERNAL,
          })
        }
      }
    } finally {
      await fh.close()
    }
  } else {
    // A stale data file from an earlier external build would sit in the bundle unused.
    await rm(dataPath, { force: true })
    for (const w of graph.weights) for (const t of storedTensors(w, opts.seed)) initializer.push(inline(t))
  }
  const model = encodeModel({
    ir_version: IR_VERSION,
    opset_import: [{ domain: '', version: OPSET }, ...(graph.extraOpsets ?? [])],
    producer_name: 'onnxd',
    producer_version: opts.producerVersion,
    graph: { name: 'main_graph', node: graph.nodes, initializer, input: graph.inputs, output: graph.outputs },
  })
  await writeFile(path, model)
  return model.length + dataBytes
}
