// onnxd's one seeded PRNG: xoshiro128** (Blackman & Vigna), 32-bit integer ops only, so it stays on V8's fast int
// paths and gives the same numbers on every platform. Two seedings, each kept bit for bit because what they feed
// is compared across runs: a sequence's sampler (`new Rng(seed)`: same seed, same draws) and the builder's weights
// and the benchmark's workloads (`new Rng(seed, key)`: one independent stream per key, so a tensor's values depend
// only on the seed and its name). Not cryptographic. Imports: node:crypto.
import { randomInt } from 'node:crypto'

const TWO_POW_32 = 4294967296
const INV_2_32 = 1 / TWO_POW_32
const TWO_PI = 2 * Math.PI
/** Seeds drawn for unseeded requests stay below 2^48 (randomInt's limit) so they survive JSON and logs exactly. */
const RANDOM_SEED_LIMIT = 2 ** 48 - 1 // crypto.randomInt needs max - min < 2^48

/** A fresh seed for a request that gave none. */
export function randomSeed(): number {
  return randomInt(0, RANDOM_SEED_LIMIT)
}

/** splitmix32 step: a bijective mixer, so distinct inputs give distinct, well-spread state words. */
function splitmix32(x: number): number {
  x = (x + 0x9e3779b9) | 0
  x = Math.imul(x ^ (x >>> 16), 0x21f0aaad)
  x = Math.imul(x ^ (x >>> 15), 0x735a2d97)
  return (x ^ (x >>> 15)) >>> 0
}

/** The keyed seeding's mixer: splitmix32's increment with MurmurHash3's finalizer, advancing `state`. */
function splitmixFmix(state: { s: number }): number {
  state.s = (state.s + 0x9e3779b9) | 0
  let z = state.s
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b)
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35)
  return (z ^ (z >>> 16)) >>> 0
}

/** FNV-1a over UTF-16 code units: a stable 32-bit key for a name. */
function fnv1a(text: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193)
  return h >>> 0
}

export class Rng {
  private s0: number
  private s1: number
  private s2: number
  private s3: number

  /**
   * `seed`: any safe integer (negative too); its low and high 32-bit halves both feed the state. With `key`, the
   * stream of (seed, key), independent of every other key's.
   */
  constructor(seed: number, key?: string) {
    const hi = Math.floor(seed / TWO_POW_32)
    if (key === undefined) {
      let x = splitmix32((seed >>> 0) ^ splitmix32(hi >>> 0))
      this.s0 = x = splitmix32(x)
      this.s1 = x = splitmix32(x)
      this.s2 = x = splitmix32(x)
      this.s3 = splitmix32(x)
    } else {
      const st = { s: (seed ^ Math.imul(hi, 0x27d4eb2f) ^ Math.imul(fnv1a(key), 0x165667b1)) | 0 }
      this.s0 = splitmixFmix(st)
      this.s1 = splitmixFmix(st)
      this.s2 = splitmixFmix(st)
      this.s3 = splitmixFmix(st)
    }
    // The all-zero state is xoshiro's one fixed point; the mixers make it practically unreachable, but be sure.
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1
  }

  /** Uniform 32-bit unsigned integer. */
  nextUint32(): number {
    const s1 = this.s1
    const r = Math.imul(rotl(Math.imul(s1, 5), 7), 9) >>> 0
    const t = s1 << 9
    this.s2 ^= this.s0
    this.s3 ^= s1
    this.s1 ^= this.s2
    this.s0 ^= this.s3
    this.s2 ^= t
    this.s3 = rotl(this.s3, 11)
    return r
  }

  /** Uniform float in [0, 1) with 53 random bits: 32-bit floats would starve tokens with probability below ~6e-8. */
  next(): number {
    const a = this.nextUint32() >>> 5 // 27 bits
    const b = this.nextUint32() >>> 6 // 26 bits
    return (a * 67108864 + b) / 9007199254740992
  }

  /** Fills `out` with N(0, std²) samples (Box–Muller, two per pair of draws). The hot loop of a model build. */
  fillNormal(out: Float32Array, std: number): void {
    const n = out.length
    for (let i = 0; i < n; i += 2) {
      // (u + 0.5) / 2^32 lies in (0, 1), so the log never sees 0.
      const u1 = (this.nextUint32() + 0.5) * INV_2_32
      const u2 = this.nextUint32() * INV_2_32
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
