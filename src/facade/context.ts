// The facade's parts, built once by buildFacade and handed to each route module. Imports: facade parts, store.
import type { Store } from '../store/interfaces.js'
import type { Authenticator } from './auth/authenticate.js'
import type { Meter } from './billing/meter.js'
import type { RateLimiter } from './limits/rate-limit.js'
import type { FacadeOptions } from './options.js'
import type { NodeRouter } from './router.js'
import type { RequestTracing } from '../shared/tracing.js'

export interface FacadeContext {
  options: FacadeOptions
  store: Store
  router: NodeRouter
  auth: Authenticator
  limiter: RateLimiter
  meter: Meter
  now: () => number
  /** The /v1 requests' SERVER spans, when tracing is on. */
  traces?: RequestTracing | null
}
