// Automatic prefix caching: the KV rows of prompts already prefilled, kept in blocks of PREFIX_BLOCK tokens so that
// a later prompt starting with the same tokens copies them instead of recomputing them (as vLLM's automatic prefix
// caching and llama.cpp's prompt cache do). A block is found by a hash chained over every token before it, and is
// taken only when its own tokens and its parent block match too, so a reuse is exact: the KV rows of a token depend
// on that token and the ones before it only. Blocks form a tree (a block's parent is the block before it); only
// leaves are evicted, least recently used first, so every cached block stays reachable. The batcher counts the
// blocks' bytes in its KV budget and evicts when admitted sequences need the room. A cache at its bound makes room for
// a new block by evicting one and writing the new block into the evicted one's buffer: once full, a busy cache takes
// no fresh memory (its pages are mapped already, and V8 sees no new external memory to collect for).
import { createHash } from 'node:crypto'
import type { KvData } from '../model/step-io.js'

/** Tokens per cached block: a prompt reuses whole blocks only. */
export const PREFIX_BLOCK = 16

interface Block {
  readonly key: string
  readonly tokens: Int32Array
  readonly parent: Block | null
  /** The block's slots of every past tensor, [tensor, outer, heads, PREFIX_BLOCK, headDim] (KvCache.readSlots). */
  readonly data: KvData
  readonly bytes: number
  children: number
}

/** A cached prefix: its length in tokens and the KV data of its blocks, in order. */
export interface PrefixHit {
  tokens: number
  blocks: KvData[]
}

export class PrefixCache {
  /** Every block by key, least recently used first (a use re-inserts the chain, leaf first). */
  private readonly blocks = new Map<string, Block>()
  private held = 0
  /** The bytes of one block (every block has the same shape), once one is cached. */
  private blockBytes = 0

  constructor(private readonly block = PREFIX_BLOCK) {}

  get bytes(): number {
    return this.held
  }

  get size(): number {
    return this.blocks.size
  }

  private keyOf(parent: Block | null, tokens: Int32Array): string {
    const h = createHash('sha256')
    if (parent) h.update(parent.key)
    h.update(new Uint8Array(tokens.buffer, tokens.byteOffset, tokens.byteLength))
    return h.digest('base64')
  }

  /** The chain of cached blocks that `ids` starts with, at most `limit` tokens long. */
  private chain(ids: readonly number[], limit: number): Block[] {
    const B = this.block
    const found: Block[] = []
    let parent: Block | null = null
    for (let at = 0; at + B <= Math.min(limit, ids.length); at += B) {
      const tokens = Int32Array.from(ids.slice(at, at + B))
      const b = this.blocks.get(this.keyOf(parent, tokens))
      if (!b || b.parent !== parent || !sameTokens(b.tokens, tokens)) break
      found.push(b)
      parent = b
    }
    return found
  }

  /**
   * The longest cached prefix of `ids` of at most `limit` tokens (the caller leaves at least one prompt token to
   * compute, for its logits), marked as just used.
   */
  lookup(ids: readonly number[], limit: number): PrefixHit {
    const found = this.chain(ids, limit)
    this.touch(found)
    return { tokens: found.length * this.block, blocks: found.map((b) => b.data) }
  }

  /**
   * Caches the whole blocks of `ids` not cached yet, holding at most `limit` bytes: at the bound, each new block
   * takes the buffer of the least recently used leaf it evicts; where none is left to evict, the rest of the prompt
   * is not cached. `read(from, n, into)` writes the KV data of the prompt's slots [from, from + n) into `into` (an
   * evicted block's buffer) or, given none, into a new one; it is called only for blocks that are new.
   */
  insert(ids: readonly number[], read: (from: number, n: number, into?: KvData) => KvData, limit = Infinity): void {
    const B = this.block
    const found = this.chain(ids, ids.length)
    // The chain found is used now: the evictions below take other leaves first.
    this.touch(found)
    let parent = found.at(-1) ?? null
    for (let at = found.length * B; at + B <= ids.length; at += B) {
      const tokens = Int32Array.from(ids.slice(at, at + B))
      const key = this.keyOf(parent, tokens)
      // A block under the same key whose parent or tokens differ (a hash collision) stays; this chain stops here.
      if (this.blocks.has(key)) break
      let into: KvData | undefined
      if (this.blockBytes && this.held + this.blockBytes > limit) {
        // The parent, this chain's newest block, may be a leaf until its child is in: it is not the one evicted.
        into = this.evictLeaf(parent)?.data
        if (!into) break
      }
      const data = read(at, B, into)
      const b: Block = { key, tokens, parent, data, bytes: data.byteLength, children: 0 }
      this.blockBytes ||= b.bytes
      if (parent) parent.children++
      this.blocks.set(key, b)
      this.held += b.bytes
      found.push(b)
      parent = b
    }
    this.touch(found)
  }

  /** Evicts least recently used leaves until at most `bytes` are held. */
  shrinkTo(bytes: number): void {
    while (this.held > bytes) if (!this.evictLeaf(null)) break
  }

  /** Evicts the least recently used leaf other than `keep`, if there is one; returns it. */
  private evictLeaf(keep: Block | null): Block | null {
    for (const b of this.blocks.values()) {
      if (b.children || b === keep) continue
      this.blocks.delete(b.key)
      this.held -= b.bytes
      if (b.parent) b.parent.children--
      return b
    }
    return null
  }

  clear(): void {
    this.blocks.clear()
    this.held = 0
  }

  /** Marks a chain as used: re-inserted leaf first, so a parent is never evicted before its children. */
  private touch(chain: Block[]): void {
    for (let i = chain.length - 1; i >= 0; i--) {
      const b = chain[i]
      this.blocks.delete(b.key)
      this.blocks.set(b.key, b)
    }
  }
}

function sameTokens(a: Int32Array, b: Int32Array): boolean {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}
