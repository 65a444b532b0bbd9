// A minimal valid ONNX model (one Identity node, input x -> output y, float32 [1]), hand-encoded protobuf.

const varint = (n: number): number[] => {
  const out: number[] = []
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80)
    n >>>= 7
  }
  out.push(n)
  return out
}
const field = (no: number, bytes: number[]): number[] => [...varint((no << 3) | 2), ...varint(bytes.length), ...bytes]
const str = (no: number, s: string): number[] => field(no, [...Buffer.from(s)])
const int = (no: number, n: number): number[] => [...varint(no << 3), ...varint(n)]

export function identityModel(): Buffer {
  // TypeProto.tensor_type { elem_type: FLOAT, shape { dim { dim_value: 1 } } }
  const type = field(1, [...int(1, 1), ...field(2, field(1, int(1, 1)))])
  const valueInfo = (name: string): number[] => [...str(1, name), ...field(2, type)]
  const node = [...str(1, 'x'), ...str(2, 'y'), ...str(4, 'Identity')]
  const graph = [...field(1, node), ...str(2, 'g'), ...field(11, valueInfo('x')), ...field(12, valueInfo('y'))]
  // ModelProto { ir_version: 8, opset_import { version: 17 }, graph }
  return Buffer.from([...int(1, 8), ...field(8, int(2, 17)), ...field(7, graph)])
}
