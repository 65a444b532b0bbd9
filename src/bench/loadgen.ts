// The load generator: drives one target with a level of load (closed loop at a concurrency, or Poisson arrivals
// capped by it), for a request count or until a deadline, and returns every request's record. Imports: client,
// stats (arrivals), workload types.
import { setMaxListeners } from 'node:events'
import type { Agent } from 'undici'
import { sendRequest, type Endpoint, type RequestRecord, type Sampling } from './client.js'
import { poissonArrivals } from './stats.js'
import type { WorkItem } from './workload.js'

export interface LevelPlan {
  /** Max requests in flight. */
  concurrency: number
  /** Requests per second (Poisson arrivals); Infinity sends each request as soon as a slot is free (closed loop). */
  requestRate: number
  /** Seconds after which requests still running are cut and no more are sent; null for none. */
  deadlineS: number | null
  seed: number
}

export interface LevelRun {
  records: RequestRecord[]
  /** Seconds from the first send to the last answer (or to the deadline). */
  durationS: number
  /** Whether the deadline cut the level short. */
  cutShort: boolean
}

export interface Progress {
  /** A request ended (completed, failed or cut): its record. */
  onRecord?(r: RequestRecord): void
}

const sleep = (ms: number, signal: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (ms <= 0 || signal.aborted) return resolve()
    const t = setTimeout(done, ms)
    function done(): void {
      clearTimeout(t)
      signal.removeEventListener('abort', done)
      resolve()
    }
    signal.addEventListener('abort', done, { once: true })
  })

/** Runs `items` (in order) against `ep` under `plan`. */
export async function runLevel(agent: Agent, ep: Endpoint, items: WorkItem[], sampling: Sampling, plan: LevelPlan, progress: Progress = {}, idPrefix = 'bench'): Promise<LevelRun> {
  const deadline = new AbortController()
  // Every request in flight listens to the deadline: as many listeners as the concurrency.
  setMaxListeners(Infinity, deadline.signal)
  const timer = plan.deadlineS === null ? null : setTimeout(() => deadline.abort(), plan.deadlineS * 1000)
  const arrivals = poissonArrivals(plan.requestRate, items.length, plan.seed)
  const records: RequestRecord[] = []
  const t0 = performance.now()
  let next = 0
  let inFlight = 0
  let slotFree: (() => void) | null = null

  const launch = async (i: number): Promise<void> => {
    inFlight++
    const r = await sendRequest(agent, ep, items[i], sampling, `${idPrefix}-${i}`, t0, deadline.signal)
    inFlight--
    records.push(r)
    progress.onRecord?.(r)
    slotFree?.()
  }

  deadline.signal.addEventListener('abort', () => slotFree?.(), { once: true })
  const running: Promise<void>[] = []
  while (next < items.length && !deadline.signal.aborted) {
    // Wait for this request's arrival time, then for a free slot (vLLM's max-concurrency semaphore).
    // Timers may fire a little early: sleep again until the arrival time has really come.
    let wait: number
    while ((wait = t0 + arrivals[next] * 1000 - performance.now()) > 0 && !deadline.signal.aborted) await sleep(wait, deadline.signal)
    while (inFlight >= plan.concurrency && !deadline.signal.aborted) {
      await new Promise<void>((resolve) => (slotFree = resolve))
      slotFree = null
    }
    if (deadline.signal.aborted) break
    running.push(launch(next++))
  }
  await Promise.all(running)
  const end = performance.now()
  if (timer) clearTimeout(timer)
  const cutShort = deadline.signal.aborted
  const durationS = (cutShort && plan.deadlineS !== null ? Math.min(end - t0, plan.deadlineS * 1000) : end - t0) / 1000
  records.sort((a, b) => a.startMs - b.startMs)
  return { records, durationS, cutShort }
}
