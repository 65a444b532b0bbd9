// Where the facade's nodes come from: each entry of its node list is a base URL (`http://10.0.0.5:8081`), or a DNS
// name standing for every address it resolves to (`dns+http://onnxd-node.default.svc.cluster.local:8081`, as a
// Kubernetes headless service answers with one address per ready pod). Names are re-resolved periodically by the
// router. Imports: node:dns.
import { lookup } from 'node:dns/promises'
import { isIPv6 } from 'node:net'

export type NodeSource =
  | { kind: 'url'; url: string }
  | { kind: 'dns'; entry: string; scheme: 'http' | 'https'; host: string; port: string; path: string }

const DNS_ENTRY = /^dns\+(https?):\/\/([^/:\s]+|\[[^\]\s]+\])(?::(\d+))?(\/.*)?$/

/** Reads one entry of the node list. An entry that is neither form was refused by the options' schema. */
export function parseNodeSource(entry: string): NodeSource {
  const m = DNS_ENTRY.exec(entry)
  if (!m) return { kind: 'url', url: entry }
  const scheme = m[1] as 'http' | 'https'
  return { kind: 'dns', entry, scheme, host: m[2]!.replace(/^\[(.*)\]$/, '$1'), port: m[3] ?? (scheme === 'https' ? '443' : '80'), path: (m[4] ?? '').replace(/\/+$/, '') }
}

/** The addresses a name resolves to (A and AAAA, as the system resolver answers, /etc/hosts included). */
export type Resolve = (host: string) => Promise<string[]>

export const systemResolve: Resolve = async (host) => (await lookup(host, { all: true, verbatim: true })).map((a) => a.address)

/** The base URL of one resolved address of a DNS entry. */
export function addressUrl(s: Extract<NodeSource, { kind: 'dns' }>, address: string): string {
  return `${s.scheme}://${isIPv6(address) ? `[${address}]` : address}:${s.port}${s.path}`
}
