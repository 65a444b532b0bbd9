// `onnxd node`: runs one worker node (engine pool + internal HTTP contract) until SIGTERM/SIGINT, then drains:
// readiness turns `draining`, in-flight requests get the grace period, the pool closes, exit 0.
// The command's help text and signals; parsing is src/node/flags.ts and the node itself src/node/server.ts.
import { nodeOptionsFromArgv } from '../node/flags.js'
import { DEFAULT_MODEL_DIR, NODE_ENV, NODE_FLAGS, NodeOptions } from '../node/options.js'
import { serveNode } from '../node/server.js'
import { withShutdownSignals } from '../shared/signals.js'
import { openTracing } from '../shared/tracing.js'

function usage(): string {
  const rows = (Object.keys(NODE_ENV) as (keyof NodeOptions)[]).map((f) => {
    const flag = NODE_FLAGS[f]
    const arg = NodeOptions.properties[f].type === 'boolean' ? '' : ` ${flag === 'model' ? 'DIR|ID' : 'V'}`
    const def = NodeOptions.properties[f].default as unknown
    return `  --${`${flag}${arg}`.padEnd(26)} ${NODE_ENV[f].padEnd(28)} ${def === undefined ? '' : `default ${JSON.stringify(def)}`}`
  })
  return `usage: onnxd node [options] [--config FILE]

Runs a worker node: the engine pool and GET /health, GET /metrics, POST /internal/v1/completions.
Flags win over ONNXD_* environment variables, which win over the "node" section of onnxd.config.json.
Without --model / ONNXD_MODEL, the embedded default model is built in ${DEFAULT_MODEL_DIR} on first use.
--model also takes a Hugging Face hub id (owner/name, with --revision R): the files --dtype needs are fetched into
the hub cache first, verified (HF_TOKEN, HF_ENDPOINT, HF_HUB_CACHE, HF_HUB_OFFLINE apply; see docs/configuration.md).

${rows.join('\n')}
  (kv-budget-mb default: a quarter of the memory this process may use, the container's limit or else the host's, at most 4096)
`
}

export async function run(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const opts = nodeOptionsFromArgv(argv, env, usage())
  if (opts === null) {
    process.stdout.write(usage())
    return 0
  }
  // Signals first: a SIGTERM during the model build or load must still shut down cleanly.
  return withShutdownSignals('onnxd node', async (shutdown) => {
    // Off unless OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set; the SDK is loaded only then.
    const tracing = await openTracing(env, 'onnxd-node')
    try {
      return await serveNode(opts, shutdown, {}, { tracing })
    } finally {
      // The spans of the last requests leave before the process does.
      await tracing?.shutdown()
    }
  })
}
