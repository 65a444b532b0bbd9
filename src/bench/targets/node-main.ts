// Child-process entry for a node the benchmark starts: the product's own node (src/node/server.ts) with the given
// `onnxd node` flags, under the same shutdown signals, so the node under test is exactly what `onnxd node` runs.
// Imports: node flags and server, shared signals (never src/cli).
import { nodeOptionsFromArgv } from '../../node/flags.js'
import { serveNode } from '../../node/server.js'
import { withShutdownSignals } from '../../shared/signals.js'

try {
  const opts = nodeOptionsFromArgv(process.argv.slice(2), process.env)
  if (opts === null) throw new Error('--help is not an option here: the benchmark passes node flags')
  process.exitCode = await withShutdownSignals('onnxd node', (shutdown) => serveNode(opts, shutdown))
} catch (e) {
  process.stderr.write(`onnxd node: ${(e as Error).message}\n`)
  process.exitCode = 1
}
