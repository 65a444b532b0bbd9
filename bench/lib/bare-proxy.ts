// The facade benchmark's floor: a bare node:http proxy in front of a node. It reads a chat request, sends its model,
// messages and max_tokens to the node's internal completion endpoint with undici, and answers the node's text in
// OpenAI's chat shape; it does none of the facade's work (no credential, key lookup, rate limit, validation, routing,
// billing or metrics). Measured like a facade, what it adds over the node is what any Node proxy costs on the host;
// what a facade adds over it is the facade's own cost. Imports: undici, the node contract's path, the bench servers'
// shared body and error helpers.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Agent, request } from 'undici'
import { COMPLETIONS_PATH } from '../../src/contract/completions.js'
import { bodyText, sendJson, sendJsonError } from '../../src/bench/peer/http.js'

export interface BareProxy {
  url: string
  close(): Promise<void>
}

export async function startBareProxy(nodeUrl: string): Promise<BareProxy> {
  const agent = new Agent({ connections: 256, keepAliveTimeout: 30_000 })
  const server = createServer((req, res) => {
    void (async () => {
      try {
        const { model, messages, max_tokens } = JSON.parse(await bodyText(req)) as { model: string; messages: unknown; max_tokens: number }
        const r = await request(nodeUrl + COMPLETIONS_PATH, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model, messages, max_tokens }),
          dispatcher: agent,
        })
        const out = (await r.body.json()) as { id?: string; text?: string; finish_reason?: string; usage?: unknown }
        if (r.statusCode !== 200) return sendJson(res, r.statusCode, out)
        sendJson(res, 200, {
          id: out.id,
          object: 'chat.completion',
          model,
          choices: [{ index: 0, message: { role: 'assistant', content: out.text }, finish_reason: out.finish_reason }],
          usage: out.usage,
        })
      } catch (e) {
        sendJsonError(res, 502, (e as Error).message)
      }
    })()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      await new Promise<void>((resolve) => server.close(() => resolve()))
      await agent.close()
    },
  }
}
