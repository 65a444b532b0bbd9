// A server process's shutdown signals: the first SIGTERM or SIGINT asks for a drain; another one (other than the
// same one repeated within a second) exits at once. What `onnxd node`, `onnxd serve`, `onnxd facade` and the
// bench's node target run their servers under. Imports: nothing.

/**
 * The same signal again within this window is one request delivered twice, not a second one: a terminal's Ctrl-C
 * reaches the whole process group, and `npm start` forwards the SIGINT it got to this process as well.
 */
const REPEATED_SIGNAL_MS = 1000

/**
 * Runs `fn` with a promise that resolves on the first SIGTERM or SIGINT; a second signal exits at once, skipping
 * the rest of the grace period.
 */
export async function withShutdownSignals<T>(name: string, fn: (shutdown: Promise<NodeJS.Signals>) => Promise<T>): Promise<T> {
  let first: { signal: NodeJS.Signals; at: number } | null = null
  let onShutdown: (s: NodeJS.Signals) => void = () => {}
  const shutdown = new Promise<NodeJS.Signals>((resolve) => (onShutdown = resolve))
  const onSignal = (s: NodeJS.Signals): void => {
    if (first !== null) {
      if (s === first.signal && Date.now() - first.at < REPEATED_SIGNAL_MS) return
      process.stderr.write(`${name}: ${s} again; exiting without waiting for in-flight requests\n`)
      process.exit(1)
    }
    first = { signal: s, at: Date.now() }
    onShutdown(s)
  }
  process.on('SIGTERM', onSignal)
  process.on('SIGINT', onSignal)
  try {
    return await fn(shutdown)
  } finally {
    process.off('SIGTERM', onSignal)
    process.off('SIGINT', onSignal)
  }
}
