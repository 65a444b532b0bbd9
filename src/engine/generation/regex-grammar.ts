// A JSON string's language under `pattern`, `format`, `minLength` and `maxLength`, as grammar rules over the
// string's JSON text (between its quotes). The regular expressions are ECMA-262 (JSON Schema's dialect, as ajv
// reads them: the `u` flag), parsed and turned into finite automata by refa: `pattern` is a search (unanchored
// unless it starts with ^ and ends with $), lookarounds refa can resolve are resolved, a format is one of the
// regular expressions below, and several constraints are intersected. The minimal DFA becomes one rule per state,
// each transition a class of characters as JSON writes them: printable ASCII as is, `"` and `\` escaped, any other
// character of the Basic Multilingual Plane as a \u escape (characters outside it are never written: a subset of
// the language, never a string outside it). What cannot be enforced (a backreference, an assertion refa cannot
// resolve, an automaton past MAX_STATES, an empty language) is a refusal. Imports: refa only.
import { CharSet, DFA, JS, NFA, transform, Transformers, type CharacterClass, type Concatenation, type Element, type Expression, type NoParent, type Quantifier } from 'refa'

/**
 * The formats structured outputs write, each a regular expression for a subset of what the format allows (ajv-formats'
 * full mode, and zod's checks, accept every string it matches): short host labels in emails, no leap day, http(s)
 * URIs on a named host and a port below 10000. Anchored.
 */
export const STRING_FORMATS: Readonly<Record<string, string>> = {
  email: String.raw`^[A-Za-z0-9_+\-]+(?:\.[A-Za-z0-9_+\-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,14}[A-Za-z0-9])?\.)+[A-Za-z]{2,8}$`,
  uuid: String.raw`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`,
  date: String.raw`^\d{4}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1\d|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)$`,
  'date-time': String.raw`^\d{4}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1\d|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,6})?(?:Z|[+\-](?:[01]\d|2[0-3]):[0-5]\d)$`,
  uri: String.raw`^https?://[a-z0-9]+(?:[.\-][a-z0-9]+)*(?::[1-9]\d{0,3})?(?:/[A-Za-z0-9._~\-]*)*(?:\?[A-Za-z0-9._~=&\-]*)?(?:#[A-Za-z0-9._~\-]*)?$`,
}

/** States of one string's automaton at most (each is a grammar rule). */
export const MAX_STATES = 2000

const MAX_CHAR = 0x10ffff
/** The characters a JSON string here may hold: the Basic Multilingual Plane less the surrogates. */
const WRITABLE = CharSet.empty(MAX_CHAR).union([
  { min: 0, max: 0xd7ff },
  { min: 0xe000, max: 0xffff },
])

export interface StringConstraints {
  pattern?: string
  format?: string
  minLength: number
  maxLength: number | null
}

/** Why a string's constraints cannot be enforced, and the keyword to blame. */
export class RegexRefusal extends Error {
  constructor(
    readonly keyword: 'pattern' | 'format' | 'maxLength',
    what: string,
  ) {
    super(what)
  }
}

const ANY: () => NoParent<CharacterClass> = () => ({ type: 'CharacterClass', characters: CharSet.all(MAX_CHAR) })
const anyStar = (): NoParent<Quantifier> => ({ type: 'Quantifier', min: 0, max: Infinity, lazy: false, alternatives: [{ type: 'Concatenation', elements: [ANY()] }] })

/** ^ and $ as refa parses them: a negated lookbehind or lookahead of any one character. */
function isEdge(e: NoParent<Element> | undefined, kind: 'ahead' | 'behind'): boolean {
  if (e?.type !== 'Assertion' || e.kind !== kind || !e.negate || e.alternatives.length !== 1) return false
  const [only] = e.alternatives[0]!.elements
  return e.alternatives[0]!.elements.length === 1 && only?.type === 'CharacterClass' && only.characters.isAll
}

/** The DFA of `alternatives` taken as the whole string (assertions refa cannot resolve throw). */
function dfaOf(alternatives: NoParent<Concatenation>[]): DFA {
  const simplified = transform(Transformers.simplify({ ignoreAmbiguity: true, ignoreOrder: true }), { type: 'Expression', alternatives })
  const nfa = NFA.fromRegex(simplified, { maxCharacter: MAX_CHAR }, { assertions: 'throw', unknowns: 'throw' }, new NFA.LimitedNodeFactory(MAX_STATES))
  return DFA.fromFA(nfa, new DFA.LimitedNodeFactory(MAX_STATES))
}

/**
 * One top-level alternative as an automaton. Anchors at its edges end the search there (elsewhere they stay
 * assertions); lookaheads right after a leading ^ (`^(?=.*\d)(?!.*\.\.)…`, as password and older email patterns
 * write them) become intersections with their own languages (a negative one's complement), each followed by any
 * text unless it ends with $.
 */
function alternativeDfa(c: NoParent<Concatenation>, search: boolean): DFA {
  const els = [...c.elements]
  const start = isEdge(els[0], 'behind')
  if (start) els.shift()
  const looks: { alternatives: NoParent<Concatenation>[]; negate: boolean }[] = []
  while (start && els[0]?.type === 'Assertion' && els[0].kind === 'ahead' && !isEdge(els[0], 'ahead')) {
    const la = els.shift() as Extract<NoParent<Element>, { type: 'Assertion' }>
    looks.push({ alternatives: la.alternatives, negate: la.negate })
  }
  const end = isEdge(els[els.length - 1], 'ahead')
  if (end) els.pop()
  let dfa = dfaOf([{ type: 'Concatenation', elements: [...(search && !start ? [anyStar()] : []), ...els, ...(search && !end ? [anyStar()] : [])] }])
  for (const la of looks) {
    const own = dfaOf(
      la.alternatives.map((x) => {
        const inner = [...x.elements]
        const toEnd = isEdge(inner[inner.length - 1], 'ahead')
        if (toEnd) inner.pop()
        return { type: 'Concatenation', elements: [...inner, ...(toEnd ? [] : [anyStar()])] }
      }),
    )
    if (la.negate) own.complement()
    dfa = DFA.fromIntersection(dfa, own, new DFA.LimitedNodeFactory(MAX_STATES))
  }
  return dfa
}

/** A regular expression's automaton: the whole string when `search` is false, else any string containing a match. */
function automaton(source: string, search: boolean, keyword: RegexRefusal['keyword']): DFA {
  let expression: NoParent<Expression>
  try {
    expression = JS.Parser.fromLiteral({ source, flags: 'u' }).parse({ assertions: 'parse', backreferences: 'throw', simplify: false, maxNodes: 10_000 }).expression
  } catch (e) {
    throw new RegexRefusal(keyword, `the regular expression ${JSON.stringify(source.slice(0, 80))} (${(e as Error).message.slice(0, 120)})`)
  }
  try {
    const [first, ...rest] = expression.alternatives.map((c) => alternativeDfa(c, search))
    if (rest.length === 0) return first!
    const nfa = NFA.fromFA(first!, new NFA.LimitedNodeFactory(MAX_STATES))
    for (const d of rest) nfa.union(d, new NFA.LimitedNodeFactory(MAX_STATES))
    return DFA.fromFA(nfa, new DFA.LimitedNodeFactory(MAX_STATES))
  } catch (e) {
    const why = /assertion/i.test((e as Error).message) ? 'an assertion (^ or $ inside, \\b, a lookaround) that cannot be resolved into a grammar' : (e as Error).message.slice(0, 120)
    throw new RegexRefusal(keyword, `the regular expression ${JSON.stringify(source.slice(0, 80))}: ${why}`)
  }
}

const hex4 = (c: number): string => c.toString(16).padStart(4, '0')

/** The fixed-length strings over `digits` (an ordered alphabet) from lo to hi, as EBNF: the classic range split. */
export function alphabetRange(lo: string, hi: string, digits: string): string {
  const cls = (a: number, b: number): string => (a === b ? JSON.stringify(digits[a]) : `[${digits[a]}-${digits[b]}]`)
  const anyOf = (n: number): string => (n === 0 ? '' : ` ${cls(0, digits.length - 1)}{${n}}`)
  if (lo === hi) return JSON.stringify(lo)
  const a = digits.indexOf(lo[0]!)
  const b = digits.indexOf(hi[0]!)
  const n = lo.length - 1
  if (n === 0) return cls(a, b)
  if (a === b) return `${JSON.stringify(lo[0])} ${alphabetRange(lo.slice(1), hi.slice(1), digits)}`
  const top = digits[digits.length - 1]!.repeat(n)
  const bottom = digits[0]!.repeat(n)
  const loAll = lo.slice(1) === bottom
  const hiAll = hi.slice(1) === top
  const parts: string[] = []
  const from = loAll ? a : a + 1
  const to = hiAll ? b : b - 1
  if (!loAll) parts.push(`${JSON.stringify(lo[0])} ${alphabetRange(lo.slice(1), top, digits)}`)
  if (from <= to) parts.push(`${cls(from, to)}${anyOf(n)}`)
  if (!hiAll) parts.push(`${JSON.stringify(hi[0])} ${alphabetRange(bottom, hi.slice(1), digits)}`)
  return parts.length === 1 ? parts[0]! : `(${parts.join(' | ')})`
}

/** A class character inside [...] of xgrammar's EBNF. */
const classChar = (c: number): string => {
  const ch = String.fromCharCode(c)
  return '\\[]-^'.includes(ch) ? `\\${ch}` : ch
}

/** One character of `set` (writable ones only) as JSON text writes it, as an EBNF expression; null when none. */
export function jsonCharsOf(set: CharSet): string | null {
  const parts: string[] = []
  const printable: string[] = []
  for (const { min, max } of set.ranges) {
    for (const [a, b] of [[min, Math.min(max, 0x1f)], [Math.max(min, 0x20), Math.min(max, 0x7e)], [Math.max(min, 0x7f), Math.min(max, 0xd7ff)], [Math.max(min, 0xe000), Math.min(max, 0xffff)]] as const) {
      if (a > b) continue
      if (a >= 0x20 && b <= 0x7e) {
        // Printable ASCII as is, less `"` and `\`, which are escaped.
        let from = a
        for (const special of [0x22, 0x5c]) {
          if (special < from || special > b) continue
          if (from < special) printable.push(from === special - 1 ? classChar(from) : `${classChar(from)}-${classChar(special - 1)}`)
          parts.push(special === 0x22 ? '"\\\\\\""' : '"\\\\\\\\"')
          from = special + 1
        }
        if (from <= b) printable.push(from === b ? classChar(from) : `${classChar(from)}-${classChar(b)}`)
      } else parts.push(`"\\\\u" ${alphabetRange(hex4(a), hex4(b), '0123456789abcdef')}`)
    }
  }
  if (printable.length > 0) parts.unshift(`[${printable.join('')}]`)
  if (parts.length === 0) return null
  return parts.length === 1 ? parts[0]! : `(${parts.join(' | ')})`
}

/**
 * The EBNF of a JSON string's text between its quotes under `c`, its states written as rules `${prefix}_N` through
 * `rule`. The lengths are counted beside the automaton's states (a state and the characters written so far, up to
 * maxLength, or minLength when there is no maximum), leaving out pairs from which no end is within reach. Throws a
 * RegexRefusal for what it cannot enforce.
 */
export function stringTextGrammar(c: StringConstraints, prefix: string, rule: (name: string, body: string) => void): string {
  const blame = c.pattern !== undefined ? 'pattern' : 'format'
  const parts: DFA[] = [DFA.fromFA(NFA.fromRegex({ type: 'Quantifier', min: 0, max: Infinity, lazy: false, alternatives: [{ type: 'Concatenation', elements: [{ type: 'CharacterClass', characters: WRITABLE }] }] }, { maxCharacter: MAX_CHAR }))]
  if (c.pattern !== undefined) parts.push(automaton(c.pattern, true, 'pattern'))
  if (c.format !== undefined) {
    const re = STRING_FORMATS[c.format]
    if (re === undefined) throw new RegexRefusal('format', `the format '${c.format.slice(0, 40)}' (onnxd writes ${Object.keys(STRING_FORMATS).join(', ')})`)
    parts.push(automaton(re, false, 'format'))
  }
  const dfa = parts.reduce((a, b) => {
    try {
      return DFA.fromIntersection(a, b, new DFA.LimitedNodeFactory(MAX_STATES))
    } catch {
      throw new RegexRefusal(blame, `a string language of more than ${MAX_STATES} states (pattern and format together)`)
    }
  })
  dfa.minimize()
  // Each state's transitions, one class per target state, and its shortest way to an end.
  const nodes = [...dfa.nodes()]
  const index = new Map(nodes.map((n, i) => [n as DFA.ReadonlyNode, i]))
  const out = nodes.map((n) => {
    const byTarget = new Map<number, CharSet>()
    for (const [range, to] of n.out) {
      const j = index.get(to)!
      byTarget.set(j, (byTarget.get(j) ?? CharSet.empty(MAX_CHAR)).union([range]))
    }
    return [...byTarget].flatMap(([j, set]) => {
      const chars = jsonCharsOf(set)
      return chars === null ? [] : [{ to: j, chars }]
    })
  })
  const final = nodes.map((n) => dfa.finals.has(n))
  const toEnd = nodes.map((_, i) => (final[i] ? 0 : Infinity))
  for (let changed = true; changed; ) {
    changed = false
    for (let i = 0; i < nodes.length; i++)
      for (const t of out[i]!)
        if (toEnd[t.to]! + 1 < toEnd[i]!) {
          toEnd[i] = toEnd[t.to]! + 1
          changed = true
        }
  }
  // (state, length so far): the length saturates at maxLength, or at minLength without a maximum.
  const top = c.maxLength ?? c.minLength
  // Whether an end can still be reached from (state, length): the shortest way there fits maxLength (lengths past
  // the automaton's shortest are not tracked: a cycle may be needed to reach minLength, and the counter checks that).
  const alive = (q: number, n: number): boolean => toEnd[q]! !== Infinity && (c.maxLength === null || n + toEnd[q]! <= c.maxLength)
  const start = index.get(dfa.initial)!
  if (!alive(start, 0)) throw new RegexRefusal(blame, 'constraints no string onnxd can write satisfies (pattern, format and lengths together)')
  const name = (q: number, n: number): string => `${prefix}_${q}_${n}`
  // The pairs reachable from the start, their moves and whether each may end there; then those from which an end
  // is reachable (an end shorter than minLength with no cycle to lengthen it leads nowhere), and only they are written.
  const pairs = new Map<string, { moves: { chars: string; to: string }[]; ends: boolean; live: boolean }>()
  const todo: [number, number][] = [[start, 0]]
  while (todo.length > 0) {
    const [q, n] = todo.pop()!
    const key = name(q, n)
    if (pairs.has(key)) continue
    if (pairs.size >= MAX_STATES) throw new RegexRefusal(blame, `a string language of more than ${MAX_STATES} states (pattern, format and lengths together)`)
    const m = c.maxLength === null ? Math.min(n + 1, top) : n + 1
    const moves: { chars: string; to: string }[] = []
    if (c.maxLength === null || n < c.maxLength)
      for (const t of out[q]!)
        if (alive(t.to, m)) {
          moves.push({ chars: t.chars, to: name(t.to, m) })
          todo.push([t.to, m])
        }
    const ends = final[q]! && n >= c.minLength
    pairs.set(key, { moves, ends, live: ends })
  }
  for (let changed = true; changed; ) {
    changed = false
    for (const p of pairs.values())
      if (!p.live && p.moves.some((t) => pairs.get(t.to)!.live)) {
        p.live = true
        changed = true
      }
  }
  if (!pairs.get(name(start, 0))!.live) throw new RegexRefusal(blame, 'constraints no string onnxd can write satisfies (pattern, format and lengths together)')
  for (const [key, p] of pairs) {
    if (!p.live) continue
    const alts = p.moves.filter((t) => pairs.get(t.to)!.live).map((t) => `${t.chars} ${t.to}`)
    if (p.ends) alts.push('""')
    rule(key, alts.join(' | '))
  }
  return name(start, 0)
}
