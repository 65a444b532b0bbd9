// What the benchmark sends: prompt and output length distributions (fixed, uniform) or a JSONL file of prompts,
// turned into a reproducible list of requests from a seed. Imports: stats (seeded random), contract types.
import { readFileSync } from 'node:fs'
import type { ChatMessage } from '../contract/completions.js'
import { OnnxdError } from '../shared/errors.js'
import { SeededRandom } from './stats.js'

/** A length distribution: a fixed value, or uniform over [min, max] inclusive. Written `128` or `64:192`. */
export type LengthDist = { kind: 'fixed'; value: number } | { kind: 'uniform'; min: number; max: number }

export function parseLength(flag: string, text: string): LengthDist {
  const m = /^(\d+)(?::(\d+))?$/.exec(text.trim())
  if (!m) throw new OnnxdError('config', `--${flag} must be N or MIN:MAX (positive integers). Given: ${text}`)
  const a = Number(m[1])
  const b = m[2] === undefined ? a : Number(m[2])
  if (a < 1 || b < a) throw new OnnxdError('config', `--${flag} must be >= 1 with MIN <= MAX. Given: ${text}`)
  return a === b ? { kind: 'fixed', value: a } : { kind: 'uniform', min: a, max: b }
}

export const formatLength = (d: LengthDist): string => (d.kind === 'fixed' ? String(d.value) : `${d.min}:${d.max}`)
export const meanLength = (d: LengthDist): number => (d.kind === 'fixed' ? d.value : (d.min + d.max) / 2)
export const maxLength = (d: LengthDist): number => (d.kind === 'fixed' ? d.value : d.max)

/** The prompt of one request, in whichever form the target takes. */
export type PromptInput = { input_ids: number[] } | { prompt: string } | { messages: ChatMessage[] }

export interface WorkItem {
  input: PromptInput
  maxTokens: number
}

/** One line of a prompts file: a JSON string, or an object with exactly one prompt form and an optional length. */
interface PromptLine {
  prompt?: string
  messages?: ChatMessage[]
  input_ids?: number[]
  max_tokens?: number
  output_len?: number
}

export interface PromptFile {
  path: string
  items: { input: PromptInput; maxTokens?: number }[]
}

export function readPromptFile(path: string): PromptFile {
  const items: PromptFile['items'] = []
  readFileSync(path, 'utf8')
    .split('\n')
    .forEach((raw, i) => {
      const line = raw.trim()
      if (!line) return
      let v: unknown
      try {
        v = JSON.parse(line)
      } catch {
        throw new OnnxdError('config', `${path}:${i + 1}: not JSON`)
      }
      if (typeof v === 'string') return void items.push({ input: { prompt: v } })
      const o = v as PromptLine
      const forms = [o.prompt !== undefined, o.messages !== undefined, o.input_ids !== undefined].filter(Boolean).length
      if (typeof v !== 'object' || v === null || forms !== 1) {
        throw new OnnxdError('config', `${path}:${i + 1}: expected a string or an object with exactly one of prompt, messages, input_ids`)
      }
      const input: PromptInput = o.prompt !== undefined ? { prompt: o.prompt } : o.messages !== undefined ? { messages: o.messages } : { input_ids: o.input_ids! }
      const n = o.max_tokens ?? o.output_len
      items.push({ input, ...(typeof n === 'number' && n >= 1 ? { maxTokens: Math.floor(n) } : {}) })
    })
  if (!items.length) throw new OnnxdError('config', `${path}: no prompts`)
  return { path, items }
}

export interface WorkloadSpec {
  promptLen: LengthDist
  outputLen: LengthDist
  /** A prompts file replaces synthetic prompts; its lines' own lengths win over `outputLen`. */
  file?: PromptFile
  seed: number
  /** Synthetic prompts start with the same this many tokens (a chat's system prompt) before their own promptLen. */
  sharedPrefixLen?: number
}

/** How synthetic prompts are written: token ids (exact lengths; needs the vocabulary size) or words of text. */
export type PromptForm = { kind: 'ids'; vocab: number } | { kind: 'text' } | { kind: 'chat' }

// Common English words that byte-level BPE tokenizers keep as one token each (with their leading space), so a
// text prompt of N words is close to N tokens; the node's usage reports the exact count.
const WORDS = ['the', 'of', 'and', 'to', 'in', 'is', 'was', 'for', 'on', 'with', 'he', 'it', 'as', 'at', 'by', 'this', 'had', 'not', 'but', 'from', 'she', 'they', 'we', 'her', 'his', 'all', 'one', 'said', 'there', 'time', 'day', 'train']

const length = (d: LengthDist, r: SeededRandom): number => (d.kind === 'fixed' ? d.value : r.int(d.min, d.max))

function toForm(input: PromptInput, form: PromptForm): PromptInput {
  if (form.kind === 'chat' && 'prompt' in input) return { messages: [{ role: 'user', content: input.prompt }] }
  if (form.kind === 'chat' && 'input_ids' in input) throw new OnnxdError('config', 'a chat endpoint takes text prompts, not input_ids')
  return input
}

/**
 * `n` requests, the same for every target given the same spec and seed (item i never depends on n). Synthetic
 * prompt token ids avoid the first `reserved` ids, where builders and most tokenizers keep special tokens.
 */
export function makeWorkload(spec: WorkloadSpec, form: PromptForm, n: number, reserved = 3): WorkItem[] {
  const lens = new SeededRandom(spec.seed, 'lengths')
  const toks = new SeededRandom(spec.seed, 'tokens')
  const order = new SeededRandom(spec.seed, 'order')
  const shared = new SeededRandom(spec.seed, 'shared')
  const prefixLen = spec.sharedPrefixLen ?? 0
  const prefixIds = form.kind === 'ids' ? Array.from({ length: prefixLen }, () => shared.int(reserved, form.vocab - 1)) : []
  const prefixWords = form.kind === 'ids' ? [] : Array.from({ length: prefixLen }, () => WORDS[shared.int(0, WORDS.length - 1)])
  const out: WorkItem[] = []
  for (let i = 0; i < n; i++) {
    const outputLen = length(spec.outputLen, lens)
    if (spec.file) {
      const items = spec.file.items
      const pick = items[order.int(0, items.length - 1)]
      out.push({ input: toForm(pick.input, form), maxTokens: pick.maxTokens ?? outputLen })
      continue
    }
    const promptLen = length(spec.promptLen, lens)
    if (form.kind === 'ids') {
      const ids = [...prefixIds, ...Array.from({ length: promptLen }, () => toks.int(reserved, form.vocab - 1))]
      out.push({ input: { input_ids: ids }, maxTokens: outputLen })
    } else {
      const text = [...prefixWords, ...Array.from({ length: promptLen }, () => WORDS[toks.int(0, WORDS.length - 1)])].join(' ')
      out.push({ input: toForm({ prompt: text }, form), maxTokens: outputLen })
    }
  }
  return out
}
