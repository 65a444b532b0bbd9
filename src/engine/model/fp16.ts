// IEEE half-precision <-> single conversion for float16 graphs (Node 20 has no Float16Array).

const f32 = new Float32Array(1)
const u32 = new Uint32Array(f32.buffer)

/** Decodes one half-precision bit pattern. */
export function halfToFloat(h: number): number {
  const s = (h & 0x8000) << 16
  const e = (h >> 10) & 0x1f
  const m = h & 0x3ff
  if (e === 0) {
    if (m === 0) {
      u32[0] = s
      return f32[0]
    }
    // Subnormal half: value = m * 2^-24.
    const v = m * 5.960464477539063e-8
    return s ? -v : v
  }
  if (e === 31) u32[0] = s | 0x7f800000 | (m << 13)
  else u32[0] = s | ((e + 112) << 23) | (m << 13)
  return f32[0]
}

const TABLE = new Float32Array(65536)
for (let i = 0; i < 65536; i++) TABLE[i] = halfToFloat(i)

/** Copies `src` (float32, or float16 bits) into `dst` as float32. */
export function toFloat32(src: Float32Array | Uint16Array, dst: Float32Array): void {
  if (src instanceof Float32Array) {
    dst.set(src)
    return
  }
  for (let i = 0; i < src.length; i++) dst[i] = TABLE[src[i]]
}
