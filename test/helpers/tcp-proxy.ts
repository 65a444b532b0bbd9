// A TCP proxy with an outage switch, for a server a test cannot stop itself (one named by ONNXD_TEST_DATABASE_URL):
// `down` closes its listener and every connection through it (to its clients, a server gone: connections reset,
// new ones refused), `up` listens again on the same port.
import { createServer, connect, type Server, type Socket } from 'node:net'

export interface OutageProxy {
  /** `url` with its host and port replaced by the proxy's. */
  url: string
  down(): Promise<void>
  up(): Promise<void>
  close(): Promise<void>
}

export async function outageProxy(url: string): Promise<OutageProxy> {
  const target = new URL(url)
  const port = Number(target.port || 5432)
  const sockets = new Set<Socket>()
  let server: Server | null = null
  const listen = (at: number): Promise<number> =>
    new Promise((resolve, reject) => {
      const s = createServer((client) => {
        const upstream = connect(port, target.hostname)
        for (const x of [client, upstream]) {
          sockets.add(x)
          x.once('close', () => sockets.delete(x))
          x.on('error', () => undefined)
        }
        client.pipe(upstream).pipe(client)
        client.once('close', () => upstream.destroy())
        upstream.once('close', () => client.destroy())
      })
      s.once('error', reject)
      s.listen(at, '127.0.0.1', () => {
        server = s
        resolve((s.address() as { port: number }).port)
      })
    })
  const own = await listen(0)
  const down = async (): Promise<void> => {
    const s = server
    server = null
    const closed = s ? new Promise((r) => s.close(r)) : Promise.resolve()
    for (const x of sockets) x.destroy()
    await closed
  }
  const proxied = new URL(url)
  proxied.hostname = '127.0.0.1'
  proxied.port = String(own)
  return {
    url: proxied.toString(),
    down,
    up: async () => {
      if (!server) await listen(own)
    },
    close: down,
  }
}
