// Drives an in-thread Engine in tests: submit requests and collect their events.
import type { Engine } from '../../src/engine/engine.js'
import type { EngineRequest, SeqEvent } from '../../src/engine/types.js'

export interface RunResult {
  events: SeqEvent[]
  ids: number[]
  text: string
  end: Extract<SeqEvent, { type: 'done' } | { type: 'error' }>
}

/** Submits a request; `onToken` sees each token event as it comes (e.g. to submit another request mid-way). */
export function runRequest(engine: Engine, req: Partial<EngineRequest>, onToken?: (n: number) => void): Promise<RunResult> & { cancel: () => void } {
  const events: SeqEvent[] = []
  let cancel = (): void => {}
  const p = new Promise<RunResult>((resolve) => {
    let n = 0
    cancel = engine.submit({ model: engine.model.id, request_id: `t${Math.random()}`, ...req } as EngineRequest, (e) => {
      events.push(e)
      if (e.type === 'token') onToken?.(++n)
      if (e.type === 'done' || e.type === 'error') {
        const ids = events.flatMap((x) => (x.type === 'token' || x.type === 'done' ? x.ids : []))
        const text = events.map((x) => (x.type === 'token' || x.type === 'done' ? x.text : '')).join('')
        resolve({ events, ids, text, end: e })
      }
    })
  })
  return Object.assign(p, { cancel: () => cancel() })
}
