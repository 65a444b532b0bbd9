import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { exportJWK, generateKeyPair, SignJWT, UnsecuredJWT } from 'jose'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildFacade } from '../../src/facade/app.js'
import { bearerCredential } from '../../src/facade/auth/authenticate.js'
import { loadFacadeOptions } from '../../src/facade/options.js'
import { generateApiKey, hashApiKey, hashesEqual, isApiKeyFormat } from '../../src/facade/auth/api-keys.js'
import { bearer, chatBody, facadeFixture, TEST_SECRET, type FacadeFixture } from '../helpers/facade.js'

const secret = new TextEncoder().encode(TEST_SECRET)
const now = (): number => Math.floor(Date.now() / 1000)

function expect401(res: { statusCode: number; json(): unknown }, message: RegExp | string): void {
  expect(res.statusCode).toBe(401)
  const body = res.json() as { error: { type: string; code: number; message: string } }
  expect(body.error.type).toBe('authentication_error')
  expect(body.error.code).toBe(401)
  if (typeof message === 'string') expect(body.error.message).toBe(message)
  else expect(body.error.message).toMatch(message)
}

describe('API keys', () => {
  it('are sk-svc- plus 32 base62 characters, unique, hashed with sha256 and compared in constant time', () => {
    const a = generateApiKey()
    const b = generateApiKey()
    expect(a.secret).toMatch(/^sk-svc-[0-9A-Za-z]{32}$/)
    expect(a.secret).not.toBe(b.secret)
    expect(isApiKeyFormat(a.secret)).toBe(true)
    expect(isApiKeyFormat('sk-svc-short')).toBe(false)
    expect(a.hash.equals(hashApiKey(a.secret))).toBe(true)
    expect(a.redacted).toBe(`${a.secret.slice(0, 11)}…${a.secret.slice(-4)}`)
    expect(hashesEqual(a.hash, hashApiKey(a.secret))).toBe(true)
    expect(hashesEqual(a.hash, b.hash)).toBe(false)
    expect(hashesEqual(a.hash, Buffer.alloc(3))).toBe(false)
  })

  it('parses only `Bearer <credential>`', () => {
    expect(bearerCredential('Bearer abc')).toBe('abc')
    expect(bearerCredential('bearer   abc ')).toBe('abc')
    expect(() => bearerCredential(undefined)).toThrow(/Missing Authorization/)
    expect(() => bearerCredential('Basic abc')).toThrow(/Bearer scheme/)
    expect(() => bearerCredential('Bearer')).toThrow(/Malformed/)
    expect(() => bearerCredential('Bearer a b')).toThrow(/Malformed/)
  })
})

describe('401 authentication_error', () => {
  let f: FacadeFixture
  beforeAll(async () => {
    f = await facadeFixture()
  })
  afterAll(() => f.close())

  const models = (headers: Record<string, string> = {}) => f.app.inject({ method: 'GET', url: '/v1/models', headers })
  const profile = (headers: Record<string, string> = {}) => f.app.inject({ method: 'GET', url: '/v1/account/profile', headers })

  it('missing header', async () => {
    expect401(await models(), /Missing Authorization header/)
    expect401(await profile(), /Missing Authorization header/)
  })

  it('wrong scheme', async () => {
    expect401(await models({ authorization: `Basic ${f.key}` }), /Bearer scheme/)
    expect401(await models({ authorization: f.key }), /Bearer scheme/)
  })

  it('malformed credential', async () => {
    expect401(await models({ authorization: 'Bearer ' }), /Malformed|Bearer scheme/)
    expect401(await models({ authorization: 'Bearer a b' }), /Malformed/)
  })

  it('unknown, malformed or revoked key: `Invalid API key`', async () => {
    expect401(await models(bearer(generateApiKey().secret)), 'Invalid API key')
    expect401(await models(bearer('sk-svc-short')), 'Invalid API key')
    expect401(await models(bearer('not-a-key')), 'Invalid API key')
    const key = await f.newKey()
    expect((await models(bearer(key))).statusCode).toBe(200)
    const id = (await f.store.findKeyByHash(hashApiKey(key)))!.key.id
    await f.store.revokeKey(f.account.id, id)
    expect401(await models(bearer(key)), 'Invalid API key')
  })

  it('a chat request with a bad key is 401 before its body is looked at', async () => {
    const res = await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { ...bearer('sk-svc-nope'), 'content-type': 'application/json' }, payload: '{not json' })
    expect401(res, 'Invalid API key')
  })

  it('an API key on an account route', async () => {
    expect401(await profile(bearer(f.key)), /API keys are not accepted for account management/)
  })

  it('a session token on an inference route', async () => {
    expect401(await models(bearer(await f.token())), /Session tokens are not accepted for inference/)
    const res = await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(await f.token()), payload: chatBody() })
    expect401(res, /Session tokens are not accepted/)
  })

  it('expired session token', async () => {
    const jwt = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject(f.account.id).setExpirationTime(now() - 10).sign(secret)
    expect401(await profile(bearer(jwt)), 'Session token expired')
  })

  it('badly signed session token', async () => {
    const jwt = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject(f.account.id).setExpirationTime(now() + 60).sign(new TextEncoder().encode('another-secret-another-secret-0123456'))
    expect401(await profile(bearer(jwt)), 'Invalid session token')
    const good = await f.token()
    const tampered = good.slice(0, -3) + (good.endsWith('AAA') ? 'BBB' : 'AAA')
    expect401(await profile(bearer(tampered)), 'Invalid session token')
  })

  it('`alg: none`', async () => {
    const jwt = new UnsecuredJWT({}).setSubject(f.account.id).setExpirationTime(now() + 60).encode()
    expect401(await profile(bearer(jwt)), /algorithm 'none' is not accepted/)
  })

  it('a token without `exp`, without `sub`, or for an unknown account', async () => {
    const noExp = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject(f.account.id).sign(secret)
    expect401(await profile(bearer(noExp)), /Invalid session token: missing required "exp"/)
    const noSub = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setExpirationTime(now() + 60).sign(secret)
    expect401(await profile(bearer(noSub)), /Invalid session token: missing required "sub"/)
    expect401(await profile(bearer(await f.token('acct_nobody'))), 'Invalid session token: unknown account')
  })

  describe('lifetimes (issue #10: `exp` 1e300 and `iat` far in the future were accepted)', () => {
    const sign = (claims: Record<string, number>) =>
      new SignJWT(claims).setProtectedHeader({ alg: 'HS256' }).setSubject(f.account.id).sign(secret)

    it('refuses `exp` 1e300, and any lifetime above the maximum (default 24 h), with or without `iat`', async () => {
      expect401(await profile(bearer(await sign({ exp: 1e300 }))), /lifetime \('exp' - now\) exceeds the maximum of 86400 s/)
      expect401(await profile(bearer(await sign({ iat: now(), exp: 1e300 }))), /lifetime \('exp' - 'iat'\) exceeds the maximum of 86400 s/)
      expect401(await profile(bearer(await sign({ iat: now(), exp: now() + 86_401 }))), /exceeds the maximum of 86400 s/)
      expect401(await profile(bearer(await sign({ exp: now() + 86_400 + 120 }))), /exceeds the maximum/)
      // A day exactly, with iat; without iat, up to a day from now plus the clock-skew leeway.
      expect((await profile(bearer(await sign({ iat: now() - 10, exp: now() - 10 + 86_400 })))).statusCode).toBe(200)
      expect((await profile(bearer(await sign({ exp: now() + 86_400 })))).statusCode).toBe(200)
    })

    it('refuses `iat` in the future beyond the 60 s clock-skew leeway', async () => {
      expect401(await profile(bearer(await sign({ iat: now() + 3600, exp: now() + 3700 }))), /'iat' is in the future \(more than 60 s ahead\)/)
      expect401(await profile(bearer(await sign({ iat: 4e9, exp: 4e9 + 60 }))), /'iat' is in the future/)
      expect((await profile(bearer(await sign({ iat: now() + 30, exp: now() + 600 })))).statusCode).toBe(200)
    })

    it('the maximum is an option (jwtMaxTtlS, ONNXD_JWT_MAX_TTL_S)', async () => {
      const g = await facadeFixture({ options: { jwtMaxTtlS: 300 } })
      try {
        const get = async (jwt: string) => g.app.inject({ method: 'GET', url: '/v1/account/profile', headers: bearer(jwt) })
        expect((await get(await g.token(g.account.id, 300))).statusCode).toBe(200)
        expect401(await get(await g.token(g.account.id, 301)), /exceeds the maximum of 300 s/)
      } finally {
        await g.close()
      }
    })
  })

  it('an RS256 token when no JWKS is configured', async () => {
    const { privateKey } = await generateKeyPair('RS256')
    const jwt = await new SignJWT({}).setProtectedHeader({ alg: 'RS256' }).setSubject(f.account.id).setExpirationTime(now() + 60).sign(privateKey)
    expect401(await profile(bearer(jwt)), /algorithm 'RS256' is not accepted/)
  })

  it('a valid session token opens the account routes', async () => {
    const res = await profile(bearer(await f.token()))
    expect(res.statusCode).toBe(200)
    expect(res.json()).toMatchObject({ id: f.account.id, object: 'account' })
  })
})

describe('session tokens from a JWKS (RS256, ES256)', () => {
  let f: FacadeFixture
  const keys: Record<string, Awaited<ReturnType<typeof generateKeyPair>>['privateKey']> = {}
  beforeAll(async () => {
    const rs = await generateKeyPair('RS256')
    const es = await generateKeyPair('ES256')
    keys.RS256 = rs.privateKey
    keys.ES256 = es.privateKey
    const jwks = { keys: [{ ...(await exportJWK(rs.publicKey)), kid: 'rs', alg: 'RS256' }, { ...(await exportJWK(es.publicKey)), kid: 'es', alg: 'ES256' }] }
    const file = join(process.env.TMPDIR ?? '/tmp', `onnxd-jwks-${process.pid}.json`)
    writeFileSync(file, JSON.stringify(jwks))
    f = await facadeFixture({ options: { jwksFile: file, jwtSecret: undefined, jwtIssuer: 'https://idp.example', jwtAudience: 'onnxd' } })
  })
  afterAll(() => f.close())

  const sign = (alg: 'RS256' | 'ES256', kid: string, iss = 'https://idp.example') =>
    new SignJWT({}).setProtectedHeader({ alg, kid }).setSubject(f.account.id).setIssuer(iss).setAudience('onnxd').setExpirationTime(now() + 60).sign(keys[alg]!)

  it('accepts RS256 and ES256 tokens signed by a key of the set', async () => {
    for (const [alg, kid] of [['RS256', 'rs'], ['ES256', 'es']] as const) {
      const res = await f.app.inject({ method: 'GET', url: '/v1/account/profile', headers: bearer(await sign(alg, kid)) })
      expect(res.statusCode, alg).toBe(200)
    }
  })

  it('rejects a wrong issuer, and HS256 when only a JWKS is configured', async () => {
    expect401(await f.app.inject({ method: 'GET', url: '/v1/account/profile', headers: bearer(await sign('RS256', 'rs', 'https://evil.example')) }), /Invalid session token: unexpected "iss"/)
    const hs = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject(f.account.id).setExpirationTime(now() + 60).sign(secret)
    expect401(await f.app.inject({ method: 'GET', url: '/v1/account/profile', headers: bearer(hs) }), /algorithm 'HS256' is not accepted/)
  })
})

describe('start-up', () => {
  it('a JWKS file that cannot be read stops start-up with a config error', async () => {
    const options = loadFacadeOptions({}, { jwksFile: '/nonexistent/jwks.json', dataDir: '/tmp/onnxd-no-jwks', logLevel: 'silent' })
    await expect(buildFacade(options, { pollHealth: false })).rejects.toMatchObject({ code: 'config', message: expect.stringMatching(/jwksFile \(ONNXD_JWKS_FILE\): cannot read a JWKS/) })
  })
})

describe('logging', () => {
  it('never writes a credential to the log, even at trace level', async () => {
    const lines: string[] = []
    const logStream = { write: (line: string) => lines.push(line) }
    const f = await facadeFixture({ options: { logLevel: 'trace' }, deps: { logStream } })
    try {
      await f.app.inject({ method: 'GET', url: '/v1/models', headers: bearer(f.key) })
      await f.app.inject({ method: 'GET', url: '/v1/models', headers: bearer('sk-svc-unknownunknownunknownunknown') })
      await f.app.inject({ method: 'POST', url: '/v1/chat/completions', headers: bearer(f.key), payload: chatBody() })
      const token = await f.token()
      await f.app.inject({ method: 'GET', url: '/v1/account/profile', headers: bearer(token) })
      // Even a careless log call that includes the request headers is redacted.
      f.app.log.info({ headers: { authorization: `Bearer ${f.key}` } }, 'careless')
      expect(lines.some((l) => l.includes('careless') && l.includes('[redacted]'))).toBe(true)
      const log = lines.join('')
      expect(log.length).toBeGreaterThan(0)
      expect(log).not.toContain(f.key)
      expect(log).not.toContain('sk-svc-unknownunknownunknownunknown')
      expect(log).not.toContain(token)
    } finally {
      await f.close()
    }
  })
})
