// Seeded random numbers for the builder's weights: xoshiro128** streams keyed by (seed, tensor name).
// 32-bit integer ops only (Math.imul), so the output is fast in V8 and identical on every platform.

/** splitmix32 step: spreads a seed over the xoshiro state so nearby seeds give unrelated streams. */
function splitmix32(state: { s: number }): number {
  state.s = (state.s + 0x9e3779b9) | 0
  let z = state.s
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b)
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35)
  return (z ^ (z >>> 16)) >>> 0
}

/** FNV-1a over UTF-16 code units: a stable 32-bit key for a tensor name. */
function fnv1a(text: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193)
  return h >>> 0
}

const TWO_PI = 2 * Math.PI
const INV_2_32 = 1 / 4294967296

/**
 * One independent stream per (seed, key): each tensor gets its own, so a tensor's values depend only on the seed
 * and its name, never on the order tensors are generated in.
 */
export class Rng {
  private s0: number
  private s1: number
  private s2: number
  private s3: number

  constructor(seed: number, key: string) {
    // Seeds are safe integers: fold the high part in so seeds above 2^32 still differ.
    const hi = Math.floor(seed / 4294967296)
    const st = { s: (seed ^ Math.imul(hi, 0x27d4eb2f) ^ Math.imul(fnv1a(key), 0x165667b1)) | 0 }
    this.s0 = splitmix32(st)
    this.s1 = splitmix32(st)
    this.s2 = splitmix32(st)
    this.s3 = splitmix32(st)
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1 // the all-zero state is a fixed point
  }

  /** Next uniform 32-bit unsigned integer. */
  nextU32(): number {
    const s1 = this.s1
    const r = Math.imul(rotl(Math.imul(s1, 5), 7), 9) >>> 0
    const t = s1 << 9
    this.s2 ^= this.s0
    this.s3 ^= this.s1
    this.s1 ^= this.s2
    this.s0 ^= this.s3
    this.s2 ^= t
    this.s3 = rotl(this.s3, 11)
    return r
  }

  /** Fills `out` with N(0, std²) samples (Box–Muller, two per pair of draws). The hot loop of a build. */
  fillNormal(out: Float32Array, std: number): void {
    const n = out.length
    for (let i = 0; i < n; i += 2) {
      // (u + 0.5) / 2^32 lies in (0, 1), so the log never sees 0.
      const u1 = (this.nextU32() + 0.5) * INV_2_32
      const u2 = this.nextU32() * INV_2_32
      const r = std * Math.sqrt(-2 * Math.log(u1))
      const a = TWO_PI * u2
      out[i] = r * Math.cos(a)
      if (i + 1 < n) out[i + 1] = r * Math.sin(a)
    }
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k))
}
