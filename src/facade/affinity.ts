// Prefix affinity: requests whose prompts begin with the same long text should land on the node that already holds
// that prefix's KV rows in its prefix cache. The facade has no tokenizer, so the key is the prompt's first
// `chars` characters as the chat template would meet them (tools, then each message's role and content), and the
// node is chosen by rendezvous (highest-random-weight) hashing: every facade picks the same node for a key, and a
// node joining or leaving moves only the keys it wins or held. Imports: contract types, node:crypto.
import { createHash } from 'node:crypto'
import type { CompletionRequest } from '../contract/completions.js'

/**
 * The affinity key of a request: a hash of its model and the first `chars` characters of its prompt, or null when
 * the prompt is shorter than that (a short prompt gains little from a cached prefix, so it goes by load alone).
 */
export function affinityKey(body: CompletionRequest, chars: number): Key | null {
  const prefix = chars > 0 ? promptPrefix(body, chars) : null
  if (prefix === null) return null
  const digest = createHash('sha256').update(body.model).update('\0').update(prefix).digest()
  return { hi: digest.readUInt32LE(0), lo: digest.readUInt32LE(4) }
}

/** The first `chars` characters of the prompt (of its token ids, a quarter as many ids), or null if it is shorter. */
function promptPrefix(body: CompletionRequest, chars: number): string | null {
  if (body.input_ids) {
    // About four characters to a token: the same share of the prompt as a text key takes.
    const n = Math.ceil(chars / 4)
    return body.input_ids.length >= n ? body.input_ids.slice(0, n).join(',') : null
  }
  let text = ''
  if (body.messages) {
    if (body.tools && body.tools.length > 0) text = JSON.stringify(body.tools)
    for (const m of body.messages) {
      if (text.length >= chars) break
      text += `${m.role}\n${m.content}\n`
    }
  } else {
    text = body.prompt ?? ''
  }
  return text.length >= chars ? text.slice(0, chars) : null
}

export interface Key {
  hi: number
  lo: number
}

/** murmur3's 32-bit finalizer: every input bit flips about half the output bits. */
function mix(h: number): number {
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 0
}

/** A stable 32-bit hash of a node's URL (FNV-1a), computed once per node. */
export function nodeHash(url: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < url.length; i++) h = Math.imul(h ^ url.charCodeAt(i), 0x01000193)
  return h >>> 0
}

/** The weight of a node for a key: the node with the highest weight is the key's home. */
export function weight(key: Key, node: number): number {
  return mix(key.hi ^ mix(key.lo ^ node))
}
