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

/** Each token's log-probability and its top alternatives', in order. */
export const logprobsOf = (x: RunResult): number[] =>
  x.events.flatMap((e) => (e.type === 'token' || e.type === 'done' ? (e.logprobs ?? []).flatMap((l) => [l.logprob, ...(l.top_logprobs ?? []).map((t) => t.logprob)]) : []))

/**
 * Runs `early` and `main` at once, and submits `joiners` in turn while `main` runs, at its token counts `at` (one per
 * joiner); resolves with every result, in the order main, early, joiners.
 */
export async function runJoining(engine: Engine, main: Partial<EngineRequest>, early: Partial<EngineRequest>, joiners: Partial<EngineRequest>[], at: number[]): Promise<RunResult[]> {
  const later: Promise<RunResult>[] = []
  const first = runRequest(engine, early)
  const got = await runRequest(engine, main, (n) => at.includes(n) && later.length < joiners.length && later.push(runRequest(engine, joiners[later.length])))
  return [got, await first, ...(await Promise.all(later))]
}
