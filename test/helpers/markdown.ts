// Reading the docs pages in tests: a page's text, one section of it (by heading), the rows of its tables, the
// relative links it makes and the anchors its headings get (GitHub's slugs). Imports: node:fs, node:path.
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..')

/** A file of the repository, by its path from the root (`docs/metrics.md`). */
export const readDoc = (path: string): string => readFileSync(join(ROOT, path), 'utf8')

/** The section under the heading whose text is `heading` (any level), up to the next heading of the same or a higher level. */
export function section(md: string, heading: string): string {
  const lines = md.split('\n')
  let start = -1
  let level = 0
  let fence = false
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!
    if (line.startsWith('```')) fence = !fence
    if (fence) continue
    const m = /^(#+) (.*)$/.exec(line)
    if (!m) continue
    if (start < 0) {
      if (m[2]!.trim() === heading) {
        start = i
        level = m[1]!.length
      }
    } else if (m[1]!.length <= level) return lines.slice(start, i).join('\n')
  }
  if (start < 0) throw new Error(`no heading "${heading}"`)
  return lines.slice(start).join('\n')
}

/** The cells of every table row in `md` (header and separator rows left out), trimmed. */
export function tableRows(md: string): string[][] {
  const rows: string[][] = []
  const lines = md.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim()
    if (!line.startsWith('|')) continue
    if (/^\|[\s:|-]+\|$/.test(line)) continue
    const next = lines[i + 1]?.trim() ?? ''
    if (/^\|[\s:|-]+\|$/.test(next)) continue // a header row
    rows.push(line.slice(1, -1).split(/(?<!\\)\|/).map((c) => c.trim()))
  }
  return rows
}

/** The text of a cell without its code quotes: "`ONNXD_PORT`" -> "ONNXD_PORT". */
export const unquote = (cell: string): string => cell.replace(/^`|`$/g, '')

/** GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to -. */
export const slug = (heading: string): string =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/ /g, '-')

/** The anchors of every heading of `md` (outside code fences). */
export function anchors(md: string): Set<string> {
  const out = new Set<string>()
  let fence = false
  for (const line of md.split('\n')) {
    if (line.startsWith('```')) fence = !fence
    const m = !fence && /^#+ (.*)$/.exec(line)
    if (m) out.add(slug(m[1]!))
  }
  return out
}

/** Relative links of a page (`[text](path#anchor)`), outside code fences, web links and images left out. */
export function relativeLinks(md: string): { target: string; anchor: string | null }[] {
  const out: { target: string; anchor: string | null }[] = []
  let fence = false
  for (const line of md.split('\n')) {
    if (line.startsWith('```')) fence = !fence
    if (fence) continue
    for (const m of line.matchAll(/(?<!!)\[[^\]]*\]\(([^)\s]+)\)/g)) {
      const href = m[1]!
      if (/^[a-z]+:/.test(href)) continue
      const [target, anchor] = href.split('#') as [string, string | undefined]
      out.push({ target, anchor: anchor ?? null })
    }
  }
  return out
}

/** Whether a page's relative link resolves: the file exists and, for a Markdown file, has the anchor. */
export function linkProblem(page: string, link: { target: string; anchor: string | null }): string | null {
  const file = link.target ? join(dirname(join(ROOT, page)), link.target) : join(ROOT, page)
  if (!existsSync(file)) return `${page}: ${link.target} does not exist`
  if (link.anchor && file.endsWith('.md') && !anchors(readFileSync(file, 'utf8')).has(link.anchor)) return `${page}: ${link.target || page}#${link.anchor} names no heading`
  return null
}
