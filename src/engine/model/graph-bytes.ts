// The ONNX model as protobuf fields: a graph's fields decoded only as far as a rewrite needs (its nodes), the rest
// (initializers of an inline-weights export included) copied through as raw bytes. The graph rewrites (decoder-graph.ts,
// int8-weights.ts) read and write models through it.
import protobuf from 'protobufjs'
import { AttrType, NodeProto, OperatorSetIdProto, type Node } from './onnx-proto.js'

export interface Field {
  no: number
  /** The whole field, tag included. */
  start: number
  end: number
  /** The payload of a length-delimited field. */
  data: Uint8Array | null
}

export function fieldsOf(buf: Uint8Array): Field[] {
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

export function lengthDelimited(no: number, payload: Uint8Array): Uint8Array {
  const head = protobuf.Writer.create().uint32((no << 3) | 2).uint32(payload.length).finish()
  const out = new Uint8Array(head.length + payload.length)
  out.set(head)
  out.set(payload, head.length)
  return out
}

export function concatBytes(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.length
  }
  return out
}

export const GRAPH = 7
export const NODE = 1
export const INITIALIZER = 5
export const INPUT = 11
/** TensorProto.name. */
export const TENSOR_NAME = 8
export const OUTPUT = 12
/** TensorProto.DataType INT32 (onnx-proto's DataType lists the ones the builder writes). */
export const INT32 = 6

export interface GraphView {
  top: Field[]
  graph: Field
  fields: Field[]
  /** The top-level nodes, in order, each with its field (decoded once, defaults filled in). */
  nodes: { node: Node; field: Field }[]
  /** Each node output's producing node, and the node's field. */
  producer: Map<string, { node: Node; field: Field }>
  /** Every name a top-level node reads. */
  consumed: Set<string>
  /** Some node carries a subgraph (If, Loop, Scan), whose nodes may read outer names that `consumed` misses. */
  subgraphs: boolean
}

/** Null when the bytes are not a model protobuf; ONNX Runtime then reports the broken file itself. */
export function readGraph(model: Uint8Array): GraphView | null {
  try {
    return decodeGraph(model)
  } catch {
    return null
  }
}

export function decodeGraph(model: Uint8Array): GraphView | null {
  const top = fieldsOf(model)
  const graph = top.find((f) => f.no === GRAPH && f.data)
  if (!graph) return null
  const fields = fieldsOf(graph.data!)
  const nodes = fields.filter((f) => f.no === NODE).map((field) => ({ node: nodeOf(field), field }))
  const producer = new Map<string, { node: Node; field: Field }>()
  const consumed = new Set<string>()
  let subgraphs = false
  for (const { node, field } of nodes) {
    for (const o of node.output) producer.set(o, { node, field })
    for (const i of node.input) consumed.add(i)
    if (node.attribute?.some((a) => a.type === AttrType.GRAPH || a.type === AttrType.GRAPHS)) subgraphs = true
  }
  return { top, graph, fields, nodes, producer, consumed, subgraphs }
}

/** The model with each graph field that `edit` answers for replaced by the fields it returns (encoded, tag included). */
export function writeGraph(model: Uint8Array, v: GraphView, edit: (f: Field) => Uint8Array[] | undefined): Uint8Array {
  const graph = concatBytes(v.fields.flatMap((f) => edit(f) ?? [v.graph.data!.subarray(f.start, f.end)]))
  return concatBytes(v.top.map((f) => (f === v.graph ? lengthDelimited(GRAPH, graph) : model.subarray(f.start, f.end))))
}

export const encodeNode = (n: object): Uint8Array => lengthDelimited(NODE, NodeProto.encode(NodeProto.fromObject(n)).finish())

export const nodeOf = (f: Field): Node => NodeProto.toObject(NodeProto.decode(f.data!), { longs: Number, defaults: true }) as Node

/** An initializer field's tensor name, read without decoding its data ('' when it has none). */
export function tensorName(f: Field): string {
  const name = fieldsOf(f.data!).find((x) => x.no === TENSOR_NAME)?.data
  return name ? new TextDecoder().decode(name) : ''
}

/** The default-domain opset a model imports (0 when it names none). */
export function defaultOpset(v: GraphView): number {
  const OPSET_IMPORT = 8
  for (const f of v.top) {
    if (f.no !== OPSET_IMPORT || !f.data) continue
    const o = OperatorSetIdProto.toObject(OperatorSetIdProto.decode(f.data), { longs: Number, defaults: true }) as { domain: string; version: number }
    if (o.domain === '' || o.domain === 'ai.onnx') return o.version
  }
  return 0
}
