// Fetch only the new keys and values. In the HF decoder signature every step returns present = concat(past, new)
// for every layer: ONNX Runtime copies the whole cache into that concat, and onnxruntime-node copies each output
// once more into a fresh JS buffer. A runtime that keeps its own cache needs only the new rows. This module
// rewrites the graph's outputs so that `present.<i>.key|value` become the concat's second input (the new keys,
// [batch, heads, seq, headDim]). ONNX Runtime still builds the concat that attention reads, but no full cache
// leaves the session: at batch 64 on the 135m preset that halves a decode step (bench/README.md).
//
// Only the graph's node and output lists are decoded; everything else (initializers of an inline-weights export
// included) is copied through as raw protobuf bytes.
import protobuf from 'protobufjs'
import { NodeProto, ValueInfoProto, type Node } from './onnx-proto.js'

interface Field {
  no: number
  /** The whole field, tag included. */
  start: number
  end: number
  /** The payload of a length-delimited field. */
  data: Uint8Array | null
}

function fieldsOf(buf: Uint8Array): Field[] {
  const r = protobuf.Reader.create(buf)
  const out: Field[] = []
  while (r.pos < r.len) {
    const start = r.pos
    const tag = r.uint32()
    const wire = tag & 7
    let data: Uint8Array | null = null
    if (wire === 2) {
      const len = r.uint32()
      data = buf.subarray(r.pos, r.pos + len)
      r.skip(len)
    } else r.skipType(wire)
    out.push({ no: tag >>> 3, start, end: r.pos, data })
  }
  return out
}

function lengthDelimited(no: number, payload: Uint8Array): Uint8Array {
  const head = protobuf.Writer.create().uint32((no << 3) | 2).uint32(payload.length).finish()
  const out = new Uint8Array(head.length + payload.length)
  out.set(head)
  out.set(payload, head.length)
  return out
}

function concatBytes(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.length
  }
  return out
}

const GRAPH = 7
const NODE = 1
const OUTPUT = 12

/**
 * Rewrites `model` so that each output in `presentToPast` (present name -> past input name) is replaced by the new
 * rows its Concat(past, new) appends along the sequence axis; `outputs` maps each present name to the graph output
 * that now carries its new rows. Returns null unless every listed output is such a concat: then the caller keeps
 * full present outputs.
 */
export function fetchNewKvOnly(
  model: Uint8Array,
  presentToPast: ReadonlyMap<string, string>,
  rank: number,
): { model: Uint8Array; outputs: Map<string, string> } | null {
  const top = fieldsOf(model)
  const graphField = top.find((f) => f.no === GRAPH && f.data)
  if (!graphField) return null
  const graph = fieldsOf(graphField.data!)
  const producer = new Map<string, Node>()
  for (const f of graph) {
    if (f.no !== NODE) continue
    const n = NodeProto.toObject(NodeProto.decode(f.data!), { longs: Number, defaults: true }) as Node & { domain: string }
    for (const o of n.output) producer.set(o, n)
  }
  const newRows = new Map<string, string>()
  for (const [present, past] of presentToPast) {
    const n = producer.get(present)
    if (!n || n.op_type !== 'Concat' || n.input.length !== 2 || n.input[0] !== past) return null
    const axis = n.attribute?.find((a) => a.name === 'axis')?.i
    if (axis !== rank - 2 && axis !== -2) return null
    newRows.set(present, n.input[1])
  }

  const parts: Uint8Array[] = []
  for (const f of graph) {
    if (f.no === OUTPUT) {
      const vi = ValueInfoProto.toObject(ValueInfoProto.decode(f.data!), { defaults: false }) as { name: string; type?: { tensor_type?: { elem_type?: number } } }
      const replacement = newRows.get(vi.name)
      if (replacement) {
        // Same element type; no shape: the new rows have `seq` where present had past + seq.
        const info = { name: replacement, type: { tensor_type: { elem_type: vi.type?.tensor_type?.elem_type } } }
        parts.push(lengthDelimited(OUTPUT, ValueInfoProto.encode(ValueInfoProto.fromObject(info)).finish()))
        continue
      }
    }
    parts.push(graphField.data!.subarray(f.start, f.end))
  }
  const newGraph = concatBytes(parts)
  const rewritten = concatBytes(top.map((f) => (f === graphField ? lengthDelimited(GRAPH, newGraph) : model.subarray(f.start, f.end))))
  return { model: rewritten, outputs: newRows }
}

