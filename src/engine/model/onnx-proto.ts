// The subset of onnx.proto the builder writes and the loader reads, as a protobufjs schema. Field numbers match the official onnx.proto.
import protobuf from 'protobufjs'

/** onnx.proto (proto2), trimmed to the messages a plain decoder graph needs; numbers and packing as upstream. */
const ONNX_PROTO = `
syntax = "proto2";
package onnx;

message AttributeProto {
  enum AttributeType {
    UNDEFINED = 0; FLOAT = 1; INT = 2; STRING = 3; TENSOR = 4; GRAPH = 5; SPARSE_TENSOR = 11; TYPE_PROTO = 13;
    FLOATS = 6; INTS = 7; STRINGS = 8; TENSORS = 9; GRAPHS = 10; SPARSE_TENSORS = 12; TYPE_PROTOS = 14;
  }
  optional string name = 1;
  optional string ref_attr_name = 21;
  optional string doc_string = 13;
  optional AttributeType type = 20;
  optional float f = 2;
  optional int64 i = 3;
  optional bytes s = 4;
  optional TensorProto t = 5;
  optional GraphProto g = 6;
  repeated float floats = 7;
  repeated int64 ints = 8;
  repeated bytes strings = 9;
  repeated TensorProto tensors = 10;
  repeated GraphProto graphs = 11;
}

message ValueInfoProto {
  optional string name = 1;
  optional TypeProto type = 2;
  optional string doc_string = 3;
}

message NodeProto {
  repeated string input = 1;
  repeated string output = 2;
  optional string name = 3;
  optional string op_type = 4;
  optional string domain = 7;
  repeated AttributeProto attribute = 5;
  optional string doc_string = 6;
}

message StringStringEntryProto {
  optional string key = 1;
  optional string value = 2;
}

message ModelProto {
  optional int64 ir_version = 1;
  repeated OperatorSetIdProto opset_import = 8;
  optional string producer_name = 2;
  optional string producer_version = 3;
  optional string domain = 4;
  optional int64 model_version = 5;
  optional string doc_string = 6;
  optional GraphProto graph = 7;
  repeated StringStringEntryProto metadata_props = 14;
}

message GraphProto {
  repeated NodeProto node = 1;
  optional string name = 2;
  repeated TensorProto initializer = 5;
  optional string doc_string = 10;
  repeated ValueInfoProto input = 11;
  repeated ValueInfoProto output = 12;
  repeated ValueInfoProto value_info = 13;
}

message TensorProto {
  enum DataType {
    UNDEFINED = 0; FLOAT = 1; UINT8 = 2; INT8 = 3; UINT16 = 4; INT16 = 5; INT32 = 6; INT64 = 7; STRING = 8;
    BOOL = 9; FLOAT16 = 10; DOUBLE = 11; UINT32 = 12; UINT64 = 13; COMPLEX64 = 14; COMPLEX128 = 15; BFLOAT16 = 16;
  }
  message Segment {
    optional int64 begin = 1;
    optional int64 end = 2;
  }
  repeated int64 dims = 1;
  optional int32 data_type = 2;
  optional Segment segment = 3;
  repeated float float_data = 4 [packed = true];
  repeated int32 int32_data = 5 [packed = true];
  repeated bytes string_data = 6;
  repeated int64 int64_data = 7 [packed = true];
  optional string name = 8;
  optional string doc_string = 12;
  optional bytes raw_data = 9;
  repeated StringStringEntryProto external_data = 13;
  enum DataLocation { DEFAULT = 0; EXTERNAL = 1; }
  optional DataLocation data_location = 14;
  repeated double double_data = 10 [packed = true];
  repeated uint64 uint64_data = 11 [packed = true];
}

message TensorShapeProto {
  message Dimension {
    oneof value {
      int64 dim_value = 1;
      string dim_param = 2;
    }
    optional string denotation = 3;
  };
  repeated Dimension dim = 1;
}

message TypeProto {
  message Tensor {
    optional int32 elem_type = 1;
    optional TensorShapeProto shape = 2;
  }
  oneof value {
    Tensor tensor_type = 1;
  }
  optional string denotation = 6;
}

message OperatorSetIdProto {
  optional string domain = 1;
  optional int64 version = 2;
}
`

const root = protobuf.parse(ONNX_PROTO, { keepCase: true }).root

export const ModelProto = root.lookupType('onnx.ModelProto')
export const NodeProto = root.lookupType('onnx.NodeProto')
export const ValueInfoProto = root.lookupType('onnx.ValueInfoProto')
export const OperatorSetIdProto = root.lookupType('onnx.OperatorSetIdProto')
export const TensorProto = root.lookupType('onnx.TensorProto')

/** TensorProto.DataType values the builder uses. */
export const DataType = { FLOAT: 1, UINT8: 2, INT8: 3, INT32: 6, INT64: 7, BOOL: 9, FLOAT16: 10 } as const

/** TensorProto.DataLocation: EXTERNAL means the bytes live in the file named by `external_data`. */
export const DataLocation = { DEFAULT: 0, EXTERNAL: 1 } as const

/** AttributeProto.AttributeType values the builder uses. */
export const AttrType = { FLOAT: 1, INT: 2, TENSOR: 4, GRAPH: 5, INTS: 7, GRAPHS: 10 } as const

// Plain-object shapes of the messages, as protobufjs `create`/`encode` take them (keepCase field names).
export interface StringEntry {
  key: string
  value: string
}
export interface Tensor {
  name: string
  dims: number[]
  data_type: number
  raw_data?: Uint8Array
  external_data?: StringEntry[]
  data_location?: number
}
export interface Attribute {
  name: string
  type: number
  f?: number
  i?: number
  ints?: number[]
  t?: Tensor
}
export interface Node {
  name: string
  op_type: string
  input: string[]
  output: string[]
  domain?: string
  attribute?: Attribute[]
}
export type Dim = { dim_value: number } | { dim_param: string }
export interface ValueInfo {
  name: string
  type: { tensor_type: { elem_type: number; shape: { dim: Dim[] } } }
}
export interface Graph {
  name: string
  node: Node[]
  initializer: Tensor[]
  input: ValueInfo[]
  output: ValueInfo[]
}
export interface Model {
  ir_version: number
  opset_import: { domain: string; version: number }[]
  producer_name: string
  producer_version: string
  graph: Graph
}

/** Serializes a model; every byte of it (inline weights included) is held in memory, so keep big weights external. */
export function encodeModel(m: Model): Uint8Array {
  return ModelProto.encode(ModelProto.fromObject(m)).finish()
}
