// The piscina worker entry: one engine replica per thread. Loads the model before taking tasks, runs each
// request as a long-lived task that streams events over its own MessagePort, and reports readiness, stats and
// metric observations (batched) on a BroadcastChannel.
import { BroadcastChannel, threadId, workerData } from 'node:worker_threads'
import { Engine } from '../engine.js'
import type { Broadcast, PortCommand, Task, WorkerData } from '../pool/protocol.js'
import type { FinishObservation, SeqEvent, StepObservation } from '../types.js'
import { NativeGate } from '../pool/gate.js'

const data = workerData as WorkerData
const channel = new BroadcastChannel(data.channel)
const post = (m: Broadcast): void => channel.postMessage(m)

async function init(): Promise<(t: Task) => Promise<null>> {
  // Busy while the model loads (native code); the pool terminates this thread only once the gate is stopped.
  const gate = NativeGate.claim(data.gates, threadId)
  if (!gate) throw new Error('pool closed before this worker loaded its model')
  let engine: Engine
  // Metric observations go out in batches (protocol.ts 'observed'): a sequence's last step and its finish together,
  // once the step that ended it is done (a microtask after the batcher's synchronous step code), and the others with
  // the stats or every 64 steps. /metrics lags the steps by at most the stats interval.
  let steps: StepObservation[] = []
  let finishes: FinishObservation[] = []
  // The warm-up's steps and sequences are not the node's traffic: /metrics never sees them.
  let warming = false
  const flush = (): void => {
    if (!steps.length && !finishes.length) return
    post({ type: 'observed', threadId, steps, finishes })
    steps = []
    finishes = []
  }
  try {
    engine = await Engine.load(data.engine, {
      onStep: (step) => {
        if (!warming && steps.push(step) >= 64) flush()
      },
      onFinish: (finish) => {
        if (warming) return
        finishes.push(finish)
        queueMicrotask(flush)
      },
    })
    // On a GPU the first step of each shape compiles shaders (seconds on lavapipe): done here, before 'ready', so that
    // /health says loading until no request would wait for one.
    if (engine.model.session.provider !== 'cpu') {
      warming = true
      await engine.warmUp()
      warming = false
    }
  } catch (e) {
    post({ type: 'failed', threadId, error: (e as Error).message })
    throw e
  } finally {
    gate.exit()
  }
  engine.model.session.gate = gate
  const stats = (): void => {
    flush()
    post({ type: 'stats', threadId, stats: engine.stats() })
  }
  // While a forward step blocks this thread the timer cannot fire: stale stats are what make a hung worker visible.
  setInterval(stats, 250).unref()
  // The first stats ride with 'ready': a /health answered between two messages would see no capacity yet.
  post({ type: 'ready', threadId, model: engine.model.id, contextLength: engine.model.contextLength, provider: engine.model.session.provider, runtime: engine.model.session.runtime, weights: engine.model.session.weights, stats: engine.stats() })

  return async (t: Task): Promise<null> => {
    if (t.kind === 'crash' && data.faultInjection) process.exit(1)
    if (t.kind === 'stall' && data.faultInjection) {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, t.ms)
      return null
    }
    if (t.kind !== 'request') return null
    const { port } = t
    return new Promise<null>((resolve) => {
      const cancel = engine.submit(t.req, (e: SeqEvent) => {
        // The pool learns which replica holds the sequence, to end it at once if this thread stalls.
        port.postMessage(e.type === 'accepted' ? { ...e, threadId } : e)
        if (e.type === 'done' || e.type === 'error') {
          port.close()
          resolve(null)
        }
      })
      port.on('message', (m: PortCommand) => {
        if (m.type === 'cancel') cancel()
      })
    })
  }
}

export default init()
