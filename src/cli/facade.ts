// `onnxd facade --nodes URL,...`: runs the public /v1 facade alone, in front of running nodes, until SIGINT/SIGTERM.
import { parseArgs } from 'node:util'
import { FACADE_ARG_FLAGS, operatorOptions } from './operator.js'
import { startFacade } from '../facade/server.js'
import { checkProductionSecret } from '../facade/auth/secret-strength.js'
import { withShutdownSignals } from '../shared/signals.js'
import { openTracing } from '../shared/tracing.js'

const USAGE = `usage: onnxd facade [--nodes URL|dns+http://NAME:PORT,...] [--port N] [--host H] [--data-dir DIR]
                    [--database-url postgres://...] [--database-pool-size N] [--redis-url redis://...]
                    [--key-rpm N] [--fleet-rpm N] [--key-max-sequences N]
                    [--health-interval-ms N] [--dns-interval-ms N] [--affinity-prefix-chars N]
                    [--body-limit BYTES] [--log-level L] [--config FILE]
                    [--prices JSON] [--default-price JSON] [--billing-flush-ms N] [--billing-flush-tokens N]
                    [--node-timeout-ms N] [--jwks-url URL | --jwks-file FILE] [--jwt-issuer S] [--jwt-audience S]
                    [--jwt-max-ttl-s S]
Every option also has an ONNXD_* environment variable (see docs/configuration.md); flags win over the environment.
`

export async function run(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const str = { type: 'string' } as const
  const options: Record<string, { type: 'string' } | { type: 'boolean'; short: string }> = { config: str, help: { type: 'boolean', short: 'h' } }
  for (const flag of FACADE_ARG_FLAGS) options[flag] = str
  const { values } = parseArgs({ args: argv, options, strict: true, allowPositionals: false })
  if (values.help === true) {
    process.stdout.write(USAGE)
    return 0
  }
  const facadeOptions = operatorOptions(values, env)
  await checkProductionSecret(facadeOptions.jwtSecret, env)
  // Off unless OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set; the SDK is loaded only then.
  const tracing = await openTracing(env, 'onnxd-facade')
  let facade: Awaited<ReturnType<typeof startFacade>>
  try {
    facade = await startFacade(facadeOptions, { tracing })
  } catch (e) {
    await tracing?.shutdown()
    throw e
  }
  return withShutdownSignals('onnxd facade', async (shutdown) => {
    const signal = await shutdown
    facade.app.log.info({ signal }, 'closing')
    await facade.close()
    // The spans of the last requests leave before the process does.
    await tracing?.shutdown()
    return 0
  })
}
