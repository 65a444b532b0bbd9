// `onnxd facade --nodes URL,...`: runs the public /v1 facade alone, in front of running nodes, until SIGINT/SIGTERM.
import { parseArgs } from 'node:util'
import { operatorOptions } from './operator.js'
import { startFacade } from '../facade/server.js'
import { withShutdownSignals } from '../shared/signals.js'

const USAGE = `usage: onnxd facade [--nodes URL,...] [--port N] [--host H] [--data-dir DIR] [--key-rpm N] [--fleet-rpm N]
                    [--health-interval-ms N] [--body-limit BYTES] [--log-level L] [--config FILE]
                    [--prices JSON] [--default-price JSON] [--billing-flush-ms N] [--billing-flush-tokens N]
                    [--jwt-max-ttl-s S]
Every option also has an ONNXD_* environment variable (see README); flags win over the environment.
`

export async function run(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const str = { type: 'string' } as const
  const { values } = parseArgs({
    args: argv,
    options: {
      nodes: str,
      port: str,
      host: str,
      'data-dir': str,
      'key-rpm': str,
      'fleet-rpm': str,
      prices: str,
      'default-price': str,
      'billing-flush-ms': str,
      'billing-flush-tokens': str,
      'jwt-max-ttl-s': str,
      'health-interval-ms': str,
      'node-timeout-ms': str,
      'body-limit': str,
      'log-level': str,
      'jwks-url': str,
      'jwks-file': str,
      'jwt-issuer': str,
      'jwt-audience': str,
      config: str,
      help: { type: 'boolean', short: 'h' },
    },
  })
  if (values.help) {
    process.stdout.write(USAGE)
    return 0
  }
  const facade = await startFacade(operatorOptions(values, env))
  return withShutdownSignals('onnxd facade', async (shutdown) => {
    const signal = await shutdown
    facade.app.log.info({ signal }, 'closing')
    await facade.close()
    return 0
  })
}
