// The decoder graph onnxd runs, made from the exported one by these rewrites (prepareDecoderGraph; one on the device):
//
// - Fetch only the new keys and values. In the HF decoder signature every step returns present = concat(past,
//   new) for every layer, and onnxruntime-node copies each output into a fresh JS buffer, so the whole cache was
//   copied out of every step. The engine keeps its own cache (scheduler/kv.ts), so `present.<i>.key|value` become
//   the concat's second input (the new rows, [batch, heads, seq, headDim]). No full cache leaves the session: at
//   batch 64 on the 135m preset a decode step takes half the time. Where attention reads the concat (HF exports)
//   ONNX Runtime still builds it; where nothing else reads it (the builder's graph) the concat goes too.
// - Logits only at the positions a step names (an input): a prefill chunk names its last, skipping the LM head (a
//   fifth of the 135m preset's weights) for every other prompt token and returning one row of logits per sequence;
//   a step carrying a draft of several tokens per row names each of them.
// - Each row's greedy next token at those positions (ArgMax of those logits) as one more output. A decode step whose rows all decode
//   greedily fetches it instead of the logits: ONNX Runtime neither copies [batch, vocab] floats out of the step
//   nor does JS scan them (at batch 64 on the 135m preset that is 12.6 MB a step).
// - GroupQueryAttention lengths fed, not computed from the mask. com.microsoft GroupQueryAttention reads each row's
//   length from `seqlens_k` (int32 [batch]) and the step's total length from `total_sequence_length` (int32, one
//   element); exports (onnxruntime-genai's builder, and ours) compute both from the int64 attention_mask [batch,
//   total], the one input that grows with the context every decode step (0.5 MB at batch 16 x 4,096). The two
//   become graph inputs shared by every layer (SEQLENS_K_INPUT, TOTAL_LENGTH_INPUT), the nodes that only fed them
//   go, and the mask goes too unless something else still reads it. The engine knows the lengths already.
// - On the device, a plain graph's mask computed from the rows' lengths (maskFromLengths, applied by session.ts for
//   the C-API runtime on a GPU provider only): a decode step hands the device O(batch) bytes.
// - With --nbits-as-int8, a 4-bit file's MatMulNBits in quantize_dynamic's int8 form (int8-weights.ts), before the
//   others, so that the head is found in its int8 form.
//
// Only the graph's node and output lists are decoded; everything else (initializers of an inline-weights export
// included) is copied through as raw protobuf bytes.
import { readFileSync } from 'node:fs'
import { dirname } from 'node:path'
import { AttrType, DataType, NodeProto, ValueInfoProto, type Dim, type Node } from './onnx-proto.js'
import { nbitsAsInt8 } from './int8-weights.js'
import { defaultOpset, encodeNode, INITIALIZER, INPUT, INT32, lengthDelimited, NODE, OUTPUT, readGraph, tensorName, writeGraph, type Field, type GraphView } from './graph-bytes.js'

/** The graph's output names, in order. */
export function graphOutputNames(model: Uint8Array): string[] {
  const v = readGraph(model)
  if (!v) return []
  return v.fields.filter((f) => f.no === OUTPUT).map((f) => (ValueInfoProto.toObject(ValueInfoProto.decode(f.data!)) as { name: string }).name)
}

/**
 * Rewrites `model` so that each output in `presentToPast` (present name -> past input name) is replaced by the new
 * rows its Concat(past, new) appends along the sequence axis; `outputs` maps each present name to the graph output
 * that now carries its new rows. A concat nothing else reads is dropped (graphs whose attention reads the past and
 * the new rows apart then copy no cache at all). Returns null unless every listed output is such a concat: then the
 * caller keeps full present outputs.
 */
export function fetchNewKvOnly(
  model: Uint8Array,
  presentToPast: ReadonlyMap<string, string>,
  rank: number,
): { model: Uint8Array; outputs: Map<string, string> } | null {
  const v = readGraph(model)
  if (!v) return null
  const newRows = new Map<string, string>()
  const dead = new Set<Field>()
  for (const [present, past] of presentToPast) {
    const p = v.producer.get(present)
    const n = p?.node
    if (!p || !n || n.op_type !== 'Concat' || n.input.length !== 2 || n.input[0] !== past) return null
    const axis = n.attribute?.find((a) => a.name === 'axis')?.i
    if (axis !== rank - 2 && axis !== -2) return null
    newRows.set(present, n.input[1])
    if (!v.subgraphs && !v.consumed.has(present)) dead.add(p.field)
  }
  const rewritten = writeGraph(model, v, (f) => {
    if (dead.has(f)) return []
    if (f.no !== OUTPUT) return undefined
    const vi = ValueInfoProto.toObject(ValueInfoProto.decode(f.data!)) as { name: string; type?: { tensor_type?: { elem_type?: number } } }
    const replacement = newRows.get(vi.name)
    if (!replacement) return undefined
    // Same element type; no shape: the new rows have `seq` where present had past + seq.
    const info = { name: replacement, type: { tensor_type: { elem_type: vi.type?.tensor_type?.elem_type } } }
    return [lengthDelimited(OUTPUT, ValueInfoProto.encode(ValueInfoProto.fromObject(info)).finish())]
  })
  return { model: rewritten, outputs: newRows }
}

/**
 * The node that reads the hidden state (input 0) for the LM head producing `head`: a plain MatMul, a 4-bit one
 * (com.microsoft MatMulNBits, the builder's q4 form), or, for quantize_dynamic's form (Mul of Cast of MatMulInteger
 * by the scales), the DynamicQuantizeLinear of the hidden state that only this head reads. Undefined otherwise.
 */
function headReader(v: GraphView, head: { node: Node; field: Field }): { node: Node; field: Field } | undefined {
  const { op_type: op, domain = '' } = head.node
  if ((op === 'MatMul' && domain === '') || (op === 'MatMulNBits' && domain === 'com.microsoft')) return head
  if (op !== 'Mul') return undefined
  const cast = v.producer.get(head.node.input[0])
  const mmi = cast?.node.op_type === 'Cast' ? v.producer.get(cast.node.input[0]) : undefined
  const dql = mmi?.node.op_type === 'MatMulInteger' ? v.producer.get(mmi.node.input[0]) : undefined
  if (dql?.node.op_type !== 'DynamicQuantizeLinear' || (dql.node.domain ?? '') !== '') return undefined
  // Its outputs must feed this head alone (the MatMulInteger and the product of the scales): cutting its input to
  // the last position must not reach other readers.
  const headNodes = new Set([mmi!.field, v.producer.get(head.node.input[1])?.field])
  const readers = v.nodes.filter(({ node }) => node.input.some((i) => dql.node.output.includes(i)))
  return readers.every(({ field }) => headNodes.has(field)) ? dql : undefined
}

/** The graph input positionLogits() adds: the positions within a step (int64 [n]) whose logits it computes, for every row. */
export const LOGITS_AT_INPUT = 'onnxd_logits_at'

/**
 * Rewrites `model` so that `logits` ([batch, seq, vocab]) is computed only at the positions the step names in the new
 * input LOGITS_AT_INPUT (int64 [n], the same for every row), giving [batch, n, vocab]: a Gather of those hidden
 * states goes in front of the LM head's MatMul (found through any Cast or Identity after it). A prefill chunk names
 * its last position and skips the LM head for every other one, returning one row of logits per sequence instead of
 * one per prompt token; a step that carries several tokens per row (a draft to verify) names each of them. Null
 * when the head is not such a MatMul (or a quantized form of one: headReader).
 */
export function positionLogits(model: Uint8Array, logits: string): Uint8Array | null {
  const v = readGraph(model)
  if (!v) return null
  let head = v.producer.get(logits)
  while (head && (head.node.op_type === 'Cast' || head.node.op_type === 'Identity')) head = v.producer.get(head.node.input[0])
  head = head && headReader(v, head)
  if (!head) return null
  const { node, field } = head
  const picked = '/onnxd/logits_at/hidden'
  const gather = { name: '/onnxd/logits_at/Gather', op_type: 'Gather', input: [node.input[0], LOGITS_AT_INPUT], output: [picked], attribute: [{ name: 'axis', type: AttrType.INT, i: 1 }] }
  // Re-encoded from a decode without defaults: the view's nodes carry every attribute field filled in, which ORT
  // refuses on a node with attributes (MatMulNBits' K, N, ...) as a type/data mismatch.
  const asExported = NodeProto.toObject(NodeProto.decode(field.data!), { longs: Number }) as Node
  const inputs = v.fields.filter((f) => f.no === INPUT)
  const lastInput = inputs[inputs.length - 1]
  const info = { name: LOGITS_AT_INPUT, type: { tensor_type: { elem_type: DataType.INT64, shape: { dim: [{ dim_param: 'logits_positions' }] } } } }
  return writeGraph(model, v, (f) => {
    if (f === field) return [encodeNode(gather), encodeNode({ ...asExported, input: [picked, ...asExported.input.slice(1)] })]
    if (f === lastInput) return [v.graph.data!.subarray(f.start, f.end), lengthDelimited(INPUT, ValueInfoProto.encode(ValueInfoProto.fromObject(info)).finish())]
    return undefined
  })
}

/** The output greedyTokens() adds: each row's argmax at each position the logits have, int64 [batch, positions]. */
export const NEXT_TOKEN_OUTPUT = 'onnxd_next_token'

/**
 * Adds NEXT_TOKEN_OUTPUT = ArgMax(logits) over the vocabulary (the first index on ties, as the engine's own argmax).
 * Null unless `logits` is a float32 graph output.
 */
export function greedyTokens(model: Uint8Array, logits: string): Uint8Array | null {
  const v = readGraph(model)
  if (!v || !v.producer.has(logits)) return null
  const outputs = v.fields.filter((f) => f.no === OUTPUT)
  const out = outputs.map((f) => ValueInfoProto.toObject(ValueInfoProto.decode(f.data!)) as { name: string; type?: { tensor_type?: { elem_type?: number } } })
  if (out.find((o) => o.name === logits)?.type?.tensor_type?.elem_type !== DataType.FLOAT) return null
  const argmax = { name: '/onnxd/next_token/ArgMax', op_type: 'ArgMax', input: [logits], output: [NEXT_TOKEN_OUTPUT], attribute: [{ name: 'axis', type: AttrType.INT, i: -1 }, { name: 'keepdims', type: AttrType.INT, i: 0 }] }
  const info = { name: NEXT_TOKEN_OUTPUT, type: { tensor_type: { elem_type: DataType.INT64 } } }
  const lastNode = v.fields.filter((f) => f.no === NODE).pop()
  const lastOutput = outputs[outputs.length - 1]
  return writeGraph(model, v, (f) => {
    const parts = [v.graph.data!.subarray(f.start, f.end)]
    if (f === lastNode) parts.push(encodeNode(argmax))
    if (f === lastOutput) parts.push(lengthDelimited(OUTPUT, ValueInfoProto.encode(ValueInfoProto.fromObject(info)).finish()))
    return f === lastNode || f === lastOutput ? parts : undefined
  })
}

/** The graph inputs feedAttentionLengths() adds: each row's length - 1 (int32 [batch]), the step's total (int32 scalar). */
export const SEQLENS_K_INPUT = 'onnxd_seqlens_k'
export const TOTAL_LENGTH_INPUT = 'onnxd_total_sequence_length'

const nameOf = (f: Field): string => (ValueInfoProto.toObject(ValueInfoProto.decode(f.data!)) as { name: string }).name

/**
 * Rewrites `model` so that every com.microsoft GroupQueryAttention node reads its `seqlens_k` (input 5) and
 * `total_sequence_length` (input 6) from two new graph inputs, SEQLENS_K_INPUT (int32 [batch_size]) and
 * TOTAL_LENGTH_INPUT (int32, rank 0: ORT's CheckInputs takes a scalar or a 1-element vector, and the exports' Gather
 * of Shape(mask) makes a scalar). The nodes that only fed the old values are pruned (with the initializers only they
 * read), and the `mask` input is dropped
 * when nothing reads it any more (`maskKept` says whether something still does). Null unless the graph has that
 * shape: GroupQueryAttention nodes all reading one computed seqlens_k and one computed total, both derived from the
 * mask, and no subgraph (whose reads of outer names this rewrite cannot see).
 */
export function feedAttentionLengths(model: Uint8Array, mask = 'attention_mask'): { model: Uint8Array; maskKept: boolean } | null {
  const v = readGraph(model)
  if (!v || v.subgraphs) return null
  const { nodes } = v
  const gqa = nodes.filter((n) => n.node.op_type === 'GroupQueryAttention' && n.node.domain === 'com.microsoft')
  if (gqa.length === 0) return null
  const seqlens = new Set(gqa.map((n) => n.node.input[5] ?? ''))
  const totals = new Set(gqa.map((n) => n.node.input[6] ?? ''))
  if (seqlens.size !== 1 || totals.size !== 1) return null
  const olds = [...seqlens, ...totals]
  const inputs = v.fields.filter((f) => f.no === INPUT)
  const inputNames = new Set(inputs.map(nameOf))
  if (!inputNames.has(mask) || inputNames.has(SEQLENS_K_INPUT) || inputNames.has(TOTAL_LENGTH_INPUT)) return null
  // The cone of nodes each old value is computed by; it must reach the mask (else the lengths come from elsewhere).
  const cone = new Set<Field>()
  for (const old of olds) {
    let readsMask = false
    const stack = [old]
    const seen = new Set<string>()
    while (stack.length) {
      const name = stack.pop()!
      if (name === mask) readsMask = true
      if (seen.has(name)) continue
      seen.add(name)
      const p = v.producer.get(name)
      if (!p) continue
      cone.add(p.field)
      stack.push(...p.node.input.filter((i) => i !== ''))
    }
    if (!old || !v.producer.has(old) || !readsMask) return null
  }
  const gqaFields = new Set(gqa.map((n) => n.field))
  const graphOutputs = new Set(v.fields.filter((f) => f.no === OUTPUT).map(nameOf))
  // Who reads each name, once the GroupQueryAttention nodes read the new inputs instead of the old values.
  const readers = new Map<string, Set<Field>>()
  for (const { field, node } of nodes) {
    node.input.forEach((name, k) => {
      if (gqaFields.has(field) && (k === 5 || k === 6)) return
      let s = readers.get(name)
      if (!s) readers.set(name, (s = new Set()))
      s.add(field)
    })
  }
  // Prune the cone's nodes whose outputs nobody reads any more, until none is left to prune.
  const pruned = new Set<Field>()
  const byField = new Map(nodes.map((n) => [n.field, n.node]))
  for (let changed = true; changed; ) {
    changed = false
    for (const f of cone) {
      if (pruned.has(f)) continue
      const dead = byField.get(f)!.output.every((o) => o === '' || (!graphOutputs.has(o) && ![...(readers.get(o) ?? [])].some((r) => !pruned.has(r))))
      if (dead) {
        pruned.add(f)
        changed = true
      }
    }
  }
  const maskKept = graphOutputs.has(mask) || [...(readers.get(mask) ?? [])].some((r) => !pruned.has(r))
  // Initializers only the pruned nodes read (ORT would warn at every load that it removes them).
  const unread = new Set<string>()
  for (const f of pruned) for (const i of byField.get(f)!.input) if (![...(readers.get(i) ?? [])].some((r) => !pruned.has(r))) unread.add(i)
  const lastInput = inputs[inputs.length - 1]
  const info = (name: string, dims: Array<{ dim_param: string }>): Uint8Array =>
    lengthDelimited(INPUT, ValueInfoProto.encode(ValueInfoProto.fromObject({ name, type: { tensor_type: { elem_type: INT32, shape: { dim: dims } } } })).finish())
  const rewritten = writeGraph(model, v, (f) => {
    if (pruned.has(f)) return []
    if (gqaFields.has(f)) {
      // Decoded again without defaults: re-encoding defaults would give every attribute every value field.
      const node = NodeProto.toObject(NodeProto.decode(f.data!), { longs: Number }) as Node
      const input = node.input.map((name, k) => (k === 5 ? SEQLENS_K_INPUT : k === 6 ? TOTAL_LENGTH_INPUT : name))
      return [encodeNode({ ...node, input })]
    }
    if (f.no === INITIALIZER) {
      const name = tensorName(f)
      return unread.has(name) && !inputNames.has(name) ? [] : undefined
    }
    if (f.no !== INPUT) return undefined
    const keep = maskKept || nameOf(f) !== mask ? [v.graph.data!.subarray(f.start, f.end)] : []
    return f === lastInput ? [...keep, info(SEQLENS_K_INPUT, [{ dim_param: 'batch_size' }]), info(TOTAL_LENGTH_INPUT, [])] : keep
  })
  return { model: rewritten, maskKept }
}

/**
 * The int32 graph inputs maskFromLengths() adds: each row's kept cache length ([batch, 1]), the mask's width (its
 * columns, a scalar) and the first column of the step's own tokens (a scalar).
 */
export const MASK_INPUTS = { kept: 'onnxd_mask_kept', width: 'onnxd_mask_width', from: 'onnxd_mask_new_from' } as const

/**
 * Rewrites `model` so that its attention `mask` ([batch, width]) is computed in the graph, on the step's provider,
 * from the three int32 inputs of MASK_INPUTS: mask[r, k] = 1 where k < kept[r] (the row's cached tokens) or
 * k >= from (the step's own tokens), else 0. That is the mask of every step over a device cache (capi-session.ts
 * runDevice: the past is each slot's whole cap, the new tokens follow it), so a step hands the device the rows'
 * lengths, O(batch) bytes, not a mask that grows with the context. The mask's Cast and Shape readers take the int32
 * mask itself: ORT's WebGPU provider runs an int64 Cast on the CPU, which would copy the mask down from the device
 * and back up. Other readers (and a graph output of that name) get it cast back to its type. Null when the graph
 * has no such input or has those inputs already, imports an opset before 12 (GreaterOrEqual), or carries subgraphs.
 */
export function maskFromLengths(model: Uint8Array, mask = 'attention_mask'): Uint8Array | null {
  const v = readGraph(model)
  if (!v || v.subgraphs || defaultOpset(v) < 12) return null
  const inputs = v.fields.filter((f) => f.no === INPUT)
  const maskField = inputs.find((f) => nameOf(f) === mask)
  const names = new Set(inputs.map(nameOf))
  if (!maskField || Object.values(MASK_INPUTS).some((n) => names.has(n))) return null
  const type = (ValueInfoProto.toObject(ValueInfoProto.decode(maskField.data!)) as { type?: { tensor_type?: { elem_type?: number } } }).type?.tensor_type?.elem_type
  if (type === undefined) return null
  const int32 = '/onnxd/mask/int32'
  const readers = new Map<Field, Uint8Array>()
  let castBack = v.fields.some((f) => f.no === OUTPUT && nameOf(f) === mask)
  for (const f of v.fields) {
    if (f.no !== NODE) continue
    const node = NodeProto.toObject(NodeProto.decode(f.data!), { longs: Number }) as Node
    if (!node.input.includes(mask)) continue
    if (node.op_type !== 'Cast' && node.op_type !== 'Shape') castBack = true
    else readers.set(f, encodeNode({ ...node, input: node.input.map((i) => (i === mask ? int32 : i)) }))
  }
  const constant = (name: string, value: number): Node => ({
    name,
    op_type: 'Constant',
    input: [],
    output: [name],
    attribute: [{ name: 'value', type: AttrType.TENSOR, t: { name, dims: [], data_type: INT32, raw_data: new Uint8Array(Int32Array.of(value).buffer) } }],
  })
  const cast = (input: string, output: string, to: number): Node => ({ name: `${output}/Cast`, op_type: 'Cast', input: [input], output: [output], attribute: [{ name: 'to', type: AttrType.INT, i: to }] })
  const m = (n: string): string => `/onnxd/mask/${n}`
  const built: Node[] = [
    constant(m('zero'), 0),
    constant(m('one'), 1),
    { name: m('Range'), op_type: 'Range', input: [m('zero'), MASK_INPUTS.width, m('one')], output: [m('columns')] },
    { name: m('Less'), op_type: 'Less', input: [m('columns'), MASK_INPUTS.kept], output: [m('kept')] },
    { name: m('GreaterOrEqual'), op_type: 'GreaterOrEqual', input: [m('columns'), MASK_INPUTS.from], output: [m('new')] },
    // The two spans never overlap (kept <= from): their sum is the mask. Or would run on the CPU under WebGPU.
    cast(m('kept'), m('kept_int32'), INT32),
    cast(m('new'), m('new_int32'), INT32),
    { name: m('Add'), op_type: 'Add', input: [m('kept_int32'), m('new_int32')], output: [int32] },
    ...(castBack ? [cast(int32, mask, type)] : []),
  ]
  const firstNode = v.fields.find((f) => f.no === NODE)
  const lastInput = inputs[inputs.length - 1]
  const info = (name: string, dims: Dim[]): Uint8Array =>
    lengthDelimited(INPUT, ValueInfoProto.encode(ValueInfoProto.fromObject({ name, type: { tensor_type: { elem_type: INT32, shape: { dim: dims } } } })).finish())
  const added = [info(MASK_INPUTS.kept, [{ dim_param: 'batch_size' }, { dim_value: 1 }]), info(MASK_INPUTS.width, []), info(MASK_INPUTS.from, [])]
  return writeGraph(model, v, (f) => {
    const own = f === maskField ? [] : [readers.get(f) ?? v.graph.data!.subarray(f.start, f.end)]
    if (f === firstNode) return [...built.map(encodeNode), ...own]
    if (f === lastInput) return [...own, ...added]
    return f === maskField || readers.has(f) ? own : undefined
  })
}

/**
 * The ONNX Runtime session config entry (AddSessionConfigEntry; onnxruntime-node's `SessionOptions.extra` takes
 * the same keys) that lets a model loaded from bytes find the external data files of the model file it was read from.
 */
export const externalDataConfig = (onnxPath: string): Record<string, string> => ({
  'session.model_external_initializers_file_folder_path': dirname(onnxPath),
})

export interface PreparedGraph {
  /** The graph to run: the rewritten bytes, or the exported ones when neither rewrite applies. */
  model: Uint8Array
  rewritten: boolean
  /** Present output as exported -> output that now carries only the new rows; null when the cache outputs are as exported. */
  kvOutputs: Map<string, string> | null
  /** Logits are computed only at the positions a step feeds in LOGITS_AT_INPUT (positionLogits). */
  logitsAt: string | null
  /** The output holding each row's greedy next token at each of those positions (NEXT_TOKEN_OUTPUT), or null. */
  nextToken: string | null
  /** GroupQueryAttention reads its lengths from SEQLENS_K_INPUT and TOTAL_LENGTH_INPUT (feedAttentionLengths). */
  lengthsFed: boolean
  /** With `nbitsAsInt8`: how many MatMulNBits nodes run as int8, and those left as they are, with why (null: none in the graph). */
  int8: { converted: number; kept: string[] } | null
}

/**
 * prepareDecoderGraph over the file at `onnxPath`, its external data (and so --nbits-as-int8's 4-bit weights) beside
 * it: the graph onnxd runs for that file.
 */
export function prepareDecoderFile(onnxPath: string, opts: { allLogits?: boolean; nbitsAsInt8?: boolean } = {}): PreparedGraph {
  return prepareDecoderGraph(readFileSync(onnxPath), { allLogits: opts.allLogits, ...(opts.nbitsAsInt8 ? { nbitsAsInt8: { dir: dirname(onnxPath) } } : {}) })
}

/**
 * The decoder graph onnxd runs for an exported one: HF cache outputs `present.<i>.key|value` reduced to the new
 * rows, logits computed at the positions each step names (unless `allLogits`), with their greedy next tokens
 * beside them, and GroupQueryAttention's lengths as inputs; with `nbitsAsInt8`, its 4-bit MatMuls in int8 form
 * (int8-weights.ts; `dir` holds the model's external data). Each rewrite applies only where the graph has the
 * expected shape.
 */
export function prepareDecoderGraph(exported: Uint8Array, opts: { allLogits?: boolean; nbitsAsInt8?: { dir: string } } = {}): PreparedGraph {
  let model = exported
  const int8 = opts.nbitsAsInt8 ? nbitsAsInt8(model, opts.nbitsAsInt8.dir) : null
  if (int8) model = int8.model
  const pastOf = new Map(
    graphOutputNames(exported).flatMap((n): Array<[string, string]> => {
      const m = /^present\.(\d+)\.(key|value)$/.exec(n)
      return m ? [[n, `past_key_values.${m[1]}.${m[2]}`]] : []
    }),
  )
  const kv = pastOf.size ? fetchNewKvOnly(model, pastOf, 4) : null
  if (kv) model = kv.model
  const last = opts.allLogits ? null : positionLogits(model, 'logits')
  if (last) model = last
  const next = last ? greedyTokens(model, 'logits') : null
  if (next) model = next
  const lengths = feedAttentionLengths(model)
  if (lengths) model = lengths.model
  return { model, rewritten: model !== exported, kvOutputs: kv?.outputs ?? null, logitsAt: last ? LOGITS_AT_INPUT : null, nextToken: next ? NEXT_TOKEN_OUTPUT : null, lengthsFed: lengths !== null, int8: int8 && { converted: int8.converted, kept: int8.kept } }
}
