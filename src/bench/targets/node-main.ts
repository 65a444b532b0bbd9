// Child-process entry for a node the benchmark starts: runs `onnxd node` (src/cli/node.ts) with the given flags,
// exactly as the CLI does, so the node under test is the product's own.
import { run } from '../../cli/node.js'

try {
  process.exitCode = await run(process.argv.slice(2))
} catch (e) {
  process.stderr.write(`onnxd node: ${(e as Error).message}\n`)
  process.exitCode = 1
}
