// Where ORT's own decode step goes, by operator type: ORT's profiler (EnableProfiling, on either API) writes a Chrome
// trace of every run and kernel; the ceilings (capi.ts, ort.ts) run a few decode steps at each batch in a session of
// their own with it on, and this module reads the trace into each batch's kernel time per step by operator type.
import { readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** One operator type's kernel time in ORT's decode step, milliseconds per step (all its nodes together). */
export interface OpTime {
  op: string
  ms: number
}

/** ORT alone's decode step at one batch by operator type, largest first (ORT's profiler). */
export interface DecodeOps {
  batch: number
  ops: OpTime[]
}

/** The events of ORT's profile (a Chrome trace) that opsOfTrace reads. */
interface TraceEvent {
  cat?: string
  name?: string
  ts?: number
  dur?: number
  args?: { op_name?: string }
}

/**
 * Kernel time per step by operator type, from an ORT profile of `groups` x (`skip` + `keep`) runs in that order:
 * for each group, the mean over its last `keep` runs. Each `<node>_kernel_time` event (category Node) counts in the
 * `model_run` span that holds it; ops are sorted by time, largest first.
 */
export function opsOfTrace(events: TraceEvent[], groups: number, skip: number, keep: number): OpTime[][] {
  const runs = events.filter((e) => e.name === 'model_run' && e.ts !== undefined && e.dur !== undefined).sort((a, b) => a.ts! - b.ts!)
  if (runs.length !== groups * (skip + keep)) throw new Error(`ORT's profile holds ${runs.length} runs, not the ${groups * (skip + keep)} made`)
  const sums = Array.from({ length: groups }, () => new Map<string, number>())
  for (const e of events) {
    if (e.cat !== 'Node' || !e.name?.endsWith('_kernel_time') || !e.args?.op_name || e.ts === undefined) continue
    // The last run that started at or before the kernel.
    let lo = 0
    let hi = runs.length - 1
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1
      if (runs[mid].ts! <= e.ts) lo = mid
      else hi = mid - 1
    }
    const r = runs[lo]
    if (e.ts < r.ts! || e.ts > r.ts! + r.dur!) continue
    const g = Math.floor(lo / (skip + keep))
    if (lo % (skip + keep) < skip) continue
    const m = sums[g]
    m.set(e.args.op_name, (m.get(e.args.op_name) ?? 0) + (e.dur ?? 0))
  }
  return sums.map((m) => [...m].map(([op, us]) => ({ op, ms: us / 1000 / keep })).sort((a, b) => b.ms - a.ms))
}

/** Steps profiled per batch, after unrecorded warm-up ones: each batch runs PROFILE_WARMUP + PROFILED_STEPS steps. */
export const PROFILE_WARMUP = 2
export const PROFILED_STEPS = 5

/** The file-name prefix of this process's profiles, in the system's temporary folder. */
export const profilePrefix = (): string => join(tmpdir(), `onnxd-ort-profile-${process.pid}`)

/** Each of `batches`' step by operator type, from the trace `file` of their runs in that order (PROFILE_WARMUP + PROFILED_STEPS each). */
export function decodeOpsOf(file: string, batches: readonly number[]): DecodeOps[] {
  const ops = opsOfTrace(JSON.parse(readFileSync(file, 'utf8')) as TraceEvent[], batches.length, PROFILE_WARMUP, PROFILED_STEPS)
  return batches.map((batch, i) => ({ batch, ops: ops[i] }))
}
