// What the /v1 context adds to fastify's request: the route's credential kind and the caller, set by the auth
// hook before anything else runs. Imports: auth, shared errors.
import type { FastifyRequest } from 'fastify'
import { OnnxdError } from '../shared/errors.js'
import type { Principal, RouteAuth } from './auth/authenticate.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The credential a /v1 route takes: an API key or a session token. */
    auth?: RouteAuth
  }
  interface FastifyRequest {
    principal: Principal | null
  }
}

export type KeyPrincipal = Extract<Principal, { kind: 'key' }>
export type SessionPrincipal = Extract<Principal, { kind: 'session' }>

export function keyPrincipal(request: FastifyRequest): KeyPrincipal {
  const p = request.principal
  if (p?.kind !== 'key') throw new OnnxdError('unauthorized', 'An API key is required')
  return p
}

export function sessionPrincipal(request: FastifyRequest): SessionPrincipal {
  const p = request.principal
  if (p?.kind !== 'session') throw new OnnxdError('unauthorized', 'A session token is required')
  return p
}
