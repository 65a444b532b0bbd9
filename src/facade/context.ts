// The facade's parts, built once by buildFacade and handed to each route module. Imports: facade parts, store.
import type { Store } from '../store/interfaces.js'
import type { Meter } from './billing/meter.js'
import type { Admission } from './limits/admission.js'
import type { SequenceLimiter } from './limits/sequences.js'
import type { FacadeOptions } from './options.js'
import type { NodeRouter } from './router.js'
import type { RequestTracing } from '../shared/tracing.js'

export interface FacadeContext {
  options: FacadeOptions
  store: Store
  router: NodeRouter
  /** Credentials (401) and rate limits (429) of /v1 requests. */
  admission: Admission
  /** Concurrent sequences per API key (429 over the bound), taken at dispatch. */
  sequences: SequenceLimiter
  meter: Meter
  now: () => number
  /** The /v1 requests' SERVER spans, when tracing is on. */
  traces?: RequestTracing | null
}
