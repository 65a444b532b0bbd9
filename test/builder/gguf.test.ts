// The GGUF writer's pieces that must match llama.cpp byte for byte: ggml's reference Q8_0 and Q4_0 block layouts
// (expected bytes worked out with numpy float32 arithmetic following quantize_row_q8_0_ref / quantize_row_q4_0_ref),
// the rotary permutation of convert_hf_to_gguf.py, which tensors stay F32, and the file's header and determinism.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PRESETS } from '../../src/builder/presets.js'
import { buildModel } from '../../src/builder/index.js'
import { run } from '../../src/cli/model.js'
import { permuteRope, quantizeQ4_0, quantizeQ8_0, tensorType, writeGguf } from '../../src/builder/gguf.js'

const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex')

describe('Q8_0', () => {
  it('stores fp16 d = amax/127 then int8 roundf(x/d), halves away from zero', () => {
    const x = Float32Array.from({ length: 32 }, (_, j) => j - 16)
    const b = quantizeQ8_0(x)
    expect(b.length).toBe(34)
    expect(hex(b.subarray(0, 2))).toBe('0830') // fp16 of 16/127, little-endian
    const q = Array.from(new Int8Array(b.buffer, 2, 32))
    // -8 * 127/16 = -63.5 rounds to -64 (Math.round would give -63), +63.5 to 64.
    expect(q).toEqual([-127, -119, -111, -103, -95, -87, -79, -71, -64, -56, -48, -40, -32, -24, -16, -8, 0, 8, 16, 24, 32, 40, 48, 56, 64, 71, 79, 87, 95, 103, 111, 119])
  })
  it('an all-zero block is d 0, q 0; blocks follow one another', () => {
    const x = new Float32Array(64)
    x.set(Float32Array.from({ length: 32 }, (_, j) => j - 16), 32)
    const b = quantizeQ8_0(x)
    expect(b.length).toBe(68)
    expect(b.subarray(0, 34).every((v) => v === 0)).toBe(true)
    expect(hex(b.subarray(34, 36))).toBe('0830')
  })
  it('refuses a row that is not whole blocks', () => {
    expect(() => quantizeQ8_0(new Float32Array(40))).toThrow(/multiple of 32/)
  })
})

describe('Q4_0', () => {
  it('stores fp16 d = max/-8 (signed value of largest magnitude), nibbles min(15, trunc(x/d + 8.5)), j low and j+16 high', () => {
    const x = Float32Array.from({ length: 32 }, (_, j) => (j - 12) * 0.25) // largest magnitude: +4.75 at j = 31
    const b = quantizeQ4_0(x)
    expect(b.length).toBe(18)
    expect(hex(b.subarray(0, 2))).toBe('c0b8') // fp16 of -0.59375
    expect(hex(b.subarray(2))).toBe('6d6d5c5c5b4b4b3a3a39292818180707')
  })
  it('an all-zero block is d -0 (0.0f / -8 in C) and every nibble 8', () => {
    expect(hex(quantizeQ4_0(new Float32Array(32)))).toBe('0080' + '88'.repeat(16))
  })
})

describe('rotary permutation', () => {
  it('moves row s*half + i of each head to row 2i + s (HF rotate_half halves to llama.cpp adjacent pairs)', () => {
    // 2 heads of headDim 4, rows of 1: value = original row index.
    const w = Float32Array.from({ length: 8 }, (_, r) => r)
    expect(Array.from(permuteRope(w, 2, 4, 1))).toEqual([0, 2, 1, 3, 4, 6, 5, 7])
    // Whole rows move: 1 head of headDim 2 is the identity; rows of 3 stay together.
    const rows = Float32Array.from({ length: 12 }, (_, k) => k)
    expect(Array.from(permuteRope(rows, 1, 4, 3))).toEqual([0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11])
  })
})

describe('tensor types', () => {
  it('quantizes matrices whose rows are whole blocks; vectors and other rows stay F32', () => {
    expect(tensorType([64, 2048], 'q4_0')).toBe('q4_0')
    expect(tensorType([64, 2048], 'q8_0')).toBe('q8_0')
    expect(tensorType([172, 64], 'q8_0')).toBe('f32') // tiny's ffn_down
    expect(tensorType([64], 'q4_0')).toBe('f32')
    expect(tensorType([64, 64], 'f32')).toBe('f32')
  })
  it('F16 stores every matrix as F16 (no blocks), vectors F32', () => {
    expect(tensorType([172, 64], 'f16')).toBe('f16')
    expect(tensorType([64, 2048], 'f16')).toBe('f16')
    expect(tensorType([64], 'f16')).toBe('f32')
  })
})

describe('file', () => {
  let dir: string
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'onnxd-gguf-'))
  })
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true })
  })
  it('GGUF v3 header, 32-byte aligned data, the same bytes on every write', async () => {
    const opts = { preset: PRESETS.tiny, name: 'onnxd-tiny', seed: 0, type: 'q4_0' as const }
    const n = await writeGguf(join(dir, 'a.gguf'), opts)
    await writeGguf(join(dir, 'b.gguf'), opts)
    const a = await readFile(join(dir, 'a.gguf'))
    expect(a.length).toBe(n)
    expect(Buffer.compare(a, await readFile(join(dir, 'b.gguf')))).toBe(0)
    expect(a.subarray(0, 4).toString('latin1')).toBe('GGUF')
    expect(a.readUInt32LE(4)).toBe(3)
    const p = PRESETS.tiny
    expect(Number(a.readBigUInt64LE(8))).toBe(1 + 9 * p.layers + 1) // tied: no output.weight
    expect(a.length % 32).toBe(0)
    // Another seed, other weights.
    await writeGguf(join(dir, 'c.gguf'), { ...opts, seed: 1 })
    expect(Buffer.compare(a, await readFile(join(dir, 'c.gguf')))).not.toBe(0)
  })
  it('onnxd model gguf DIR --type: the bundle\'s preset and seed, the same bytes as the writer, in either form; bad input refused', async () => {
    // The builder's default form (GroupQueryAttention) records its preset and seed in onnxd_builder.json.
    const bundle = (await buildModel({ preset: 'tiny', outDir: join(dir, 'bundle'), seed: 3 })).dir
    expect(await run(['gguf', bundle, '--type', 'f32,q8_0'])).toBe(0)
    for (const type of ['f32', 'q8_0'] as const) {
      await writeGguf(join(dir, `ref-${type}.gguf`), { preset: PRESETS.tiny, name: 'onnxd-tiny', seed: 3, type })
      expect(Buffer.compare(await readFile(join(bundle, `model-${type}.gguf`)), await readFile(join(dir, `ref-${type}.gguf`))), type).toBe(0)
    }
    // The plain form records them in config.json.
    const plain = (await buildModel({ preset: 'tiny', outDir: join(dir, 'plain'), seed: 3, attention: 'plain' })).dir
    expect(await run(['gguf', plain, '--type', 'f32'])).toBe(0)
    expect(Buffer.compare(await readFile(join(plain, 'model-f32.gguf')), await readFile(join(dir, 'ref-f32.gguf')))).toBe(0)
    expect(await run(['gguf', bundle, '--type', 'q4_0', '--out', join(dir, 'one.gguf')])).toBe(0)
    expect((await readFile(join(dir, 'one.gguf'))).subarray(0, 4).toString('latin1')).toBe('GGUF')
    expect(await run(['gguf', bundle, '--type', 'q5_k'])).toBe(2)
    expect(await run(['gguf', bundle, '--type', 'f32,q4_0', '--out', join(dir, 'x.gguf')])).toBe(2)
    await writeFile(join(dir, 'config.json'), JSON.stringify({ model_type: 'llama' }))
    expect(await run(['gguf', dir])).toBe(1) // not an onnxd bundle: no preset or seed to regenerate from
  })
})
