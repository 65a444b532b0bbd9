// The seeded PRNG of one sequence (xoshiro128** seeded through splitmix32): same seed, same draws. Imports: node:crypto.
import { randomInt } from 'node:crypto'

const TWO_POW_32 = 4294967296
/** Seeds drawn for unseeded requests stay below 2^48 (randomInt's limit) so they survive JSON and logs exactly. */
const RANDOM_SEED_LIMIT = 2 ** 48 - 1 // crypto.randomInt needs max - min < 2^48

/** splitmix32 step: a bijective mixer, so distinct inputs give distinct, well-spread state words. */
function splitmix32(x: number): number {
  x = (x + 0x9e3779b9) | 0
  x = Math.imul(x ^ (x >>> 16), 0x21f0aaad)
  x = Math.imul(x ^ (x >>> 15), 0x735a2d97)
  return (x ^ (x >>> 15)) >>> 0
}

/** A fresh seed for a request that gave none; the sampler reports it so a run can be replayed. */
export function randomSeed(): number {
  return randomInt(0, RANDOM_SEED_LIMIT)
}

/**
 * xoshiro128** (Blackman & Vigna): 128-bit state, 32-bit integer ops only, so it stays on V8's fast int paths.
 * Not cryptographic; sampling needs speed and reproducibility, not secrecy.
 */
export class Rng {
  private s0: number
  private s1: number
  private s2: number
  private s3: number

  /** Any safe integer (negative too); its low and high 32-bit halves both feed the state. */
  constructor(seed: number) {
    const lo = seed >>> 0
    const hi = Math.floor(seed / TWO_POW_32) >>> 0
    let x = splitmix32(lo ^ splitmix32(hi))
    this.s0 = x = splitmix32(x)
    this.s1 = x = splitmix32(x)
    this.s2 = x = splitmix32(x)
    this.s3 = splitmix32(x)
    // The all-zero state is xoshiro's one fixed point; splitmix makes it practically unreachable, but be sure.
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
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k))
}
