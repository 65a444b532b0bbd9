// `onnxd serve` (what `npm start` runs): one node and a facade in front of it, in one process. The facade still
// reaches the node over its HTTP contract, exactly as it would a remote one.
// The command's flags and signals; the node is src/node/server.ts, the facade src/facade/server.ts.
import { parseArgs } from 'node:util'
import { nodeArgOptions, type ArgOption } from '../node/flags.js'
import { loadNodeOptions, NODE_FLAGS, nodeFlags, readNodeConfig, type NodeOptions } from '../node/options.js'
import { serveNode } from '../node/server.js'
import { FACADE_ARG_FLAGS, operatorOptions } from './operator.js'
import { startFacade, type RunningFacade } from '../facade/server.js'
import type { FacadeOptions } from '../facade/options.js'
import { checkProductionSecret } from '../facade/auth/secret-strength.js'
import { withShutdownSignals } from '../shared/signals.js'
import { openTracing } from '../shared/tracing.js'

const USAGE = `usage: onnxd serve [--model DIR|OWNER/NAME] [--port N] [--host H] [--node-port N] [--node-host H] [node options]

Starts a worker node (default 127.0.0.1:8081) and the public /v1 facade (default 127.0.0.1:8080) in front of it.
--port/--host (ONNXD_PORT/ONNXD_HOST) are the facade's; --node-port/--node-host (ONNXD_NODE_PORT/ONNXD_NODE_HOST)
the node's; --log-level and --body-limit apply to both. Every other flag of \`onnxd node\` and \`onnxd facade\` works
here too, but --nodes (the facade's node is this one); see docs/configuration.md.
`

/** The facade's flags that are not also the node's: the shared names (--port, --host, --log-level, --body-limit) are set below, --nodes is this node. */
const FACADE_ONLY = FACADE_ARG_FLAGS.filter((f) => !['port', 'host', 'nodes', 'log-level', 'body-limit'].includes(f))

/** The two halves' options from serve's flags, environment and config file; null for --help. */
export function serveOptions(argv: string[], env: NodeJS.ProcessEnv): { node: NodeOptions; facade: FacadeOptions } | null {
  const str = { type: 'string' } as const
  const options: Record<string, ArgOption> = {
    config: str,
    help: { type: 'boolean', short: 'h' },
    port: str,
    host: str,
    'node-port': str,
    'node-host': str,
    ...nodeArgOptions([NODE_FLAGS.port, NODE_FLAGS.host]),
  }
  for (const flag of FACADE_ONLY) options[flag] = str
  const { values } = parseArgs({ args: argv, options, strict: true, allowPositionals: false })
  if (values.help === true) return null
  const config = typeof values.config === 'string' ? values.config : undefined

  const nodeValues: Record<string, unknown> = {}
  for (const flag of Object.values(NODE_FLAGS)) if (flag !== 'port' && flag !== 'host') nodeValues[flag] = values[flag]
  nodeValues.port = values['node-port']
  nodeValues.host = values['node-host']
  const node = loadNodeOptions(env, nodeFlags(nodeValues), readNodeConfig(config))

  // --log-level and --body-limit are both halves': the facade's limit is the one clients meet.
  const facadeValues: Record<string, unknown> = { config, port: values.port, host: values.host, 'log-level': values['log-level'], 'body-limit': values['body-limit'] }
  for (const flag of FACADE_ONLY) facadeValues[flag] = values[flag]
  facadeValues.nodes = `http://${node.host}:${node.port}`
  return { node, facade: operatorOptions(facadeValues, env) }
}

export async function run(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const opts = serveOptions(argv, env)
  if (opts === null) {
    process.stdout.write(USAGE)
    return 0
  }
  const { node: nodeOpts, facade: facadeOpts } = opts
  // Before the node builds or loads anything: a production facade with a placeholder or guessable secret does not start.
  await checkProductionSecret(facadeOpts.jwtSecret, env)

  let facade: RunningFacade | null = null
  return withShutdownSignals('onnxd serve', async (shutdown) => {
    // Off unless OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set. Each half has its own service name (onnxd-node,
    // onnxd-facade) unless OTEL_SERVICE_NAME names both.
    const nodeTracing = await openTracing(env, 'onnxd-node')
    const facadeTracing = await openTracing(env, 'onnxd-facade')
    try {
      return await serveNode(
        nodeOpts,
        shutdown,
        {
          onListening: async () => {
            facade = await startFacade(facadeOpts, { tracing: facadeTracing })
          },
          // The facade sees the node ready at once, not up to one health interval later (503 no_healthy_node meanwhile).
          onReady: async () => {
            await facade?.app.facade.router.refresh()
          },
          // The facade outlives the node's drain, so streams in flight reach their clients; then it closes.
          onDrained: async () => {
            await facade?.close()
          },
        },
        { tracing: nodeTracing },
      )
    } finally {
      // The spans of the last requests leave before the process does.
      await Promise.all([nodeTracing?.shutdown(), facadeTracing?.shutdown()])
    }
  })
}
