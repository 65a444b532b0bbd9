// Every row of the spec's error table (plus 404, 413 and 414), in one place: status, error.type, error.code equal to
// the status, a useful message; and the docs document each row (docs/errors.md) and every option's variable
// (docs/configuration.md).
import { readFileSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { FACADE_ENV } from '../../src/facade/options.js'
import { bearer, chatBody, facadeFixture, type FacadeFixture } from '../helpers/facade.js'

const SPEC_ROWS: [number, string][] = [
  [400, 'invalid_request_error'],
  [401, 'authentication_error'],
  [402, 'payment_required'],
  [422, 'invalid_request_error'],
  [429, 'rate_limit_error'],
  [500, 'server_error'],
  [503, 'service_unavailable'],
  [404, 'invalid_request_error'],
  [413, 'invalid_request_error'],
  [414, 'invalid_request_error'],
]

/** Statuses only the HTTP parser produces (inject cannot reach them; test/shared/http-server.test.ts sends them over sockets). */
const PARSER_ROWS: [number, string][] = [
  [408, 'invalid_request_error'],
  [431, 'invalid_request_error'],
]

let f: FacadeFixture
beforeAll(async () => {
  f = await facadeFixture({ options: { bodyLimit: 2048 } })
})
afterAll(() => f.close())

const chat = (credential: string, payload: unknown, headers: Record<string, string> = {}) =>
  f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { ...bearer(credential), ...headers }, payload: payload as string })

const produce: Record<number, () => Promise<{ statusCode: number; headers: Record<string, unknown>; json(): unknown }>> = {
  400: () => chat(f.key, '{"model": "tiny-llm", "messages": [', { 'content-type': 'application/json' }),
  401: () => chat('sk-svc-doesnotexistdoesnotexist00', chatBody()),
  402: async () => chat(await f.newKey((await f.newAccount(0)).id), chatBody()),
  422: () => chat(f.key, chatBody({ model: 'unknown-model' })),
  429: async () => {
    const k = await f.newKey(f.account.id, 1)
    await chat(k, chatBody())
    return chat(k, chatBody())
  },
  500: () => {
    f.nodes[0]!.failNext({ status: 500 }, { status: 500 })
    return chat(f.key, chatBody())
  },
  503: () => {
    f.nodes[0]!.failNext({ status: 503, retryAfterS: 4 })
    return chat(f.key, chatBody())
  },
  404: () => f.app.inject({ method: 'GET', url: '/v1/completions/legacy' }),
  413: () => chat(f.key, chatBody({ messages: [{ role: 'user', content: 'x'.repeat(4096) }] })),
  414: async () => f.app.inject({ method: 'DELETE', url: `/v1/account/keys/${'k'.repeat(300)}`, headers: bearer(await f.token()) }),
}

describe('the spec error table', () => {
  it.each(SPEC_ROWS)('%i %s', async (status, type) => {
    const res = await produce[status]!()
    expect(res.statusCode).toBe(status)
    const body = res.json() as { error: { message: string; type: string; code: number } }
    expect(body).toEqual({ error: { message: expect.any(String), type, code: status } })
    expect(body.error.message.length).toBeGreaterThan(10)
    if (status === 429 || status === 503) expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1)
  })
})

describe('docs pages', () => {
  const errorsMd = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8')
  const configMd = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8')
  it('documents every error status with its type', () => {
    for (const [status, type] of [...SPEC_ROWS, ...PARSER_ROWS]) expect(errorsMd).toContain(`| ${status} | \`${type}\` |`)
  })
  it('documents every option with its environment variable', () => {
    for (const [field, env] of Object.entries(FACADE_ENV)) expect(configMd).toMatch(new RegExp(`\\| ${field} \\| \`${env}\``))
  })
})
