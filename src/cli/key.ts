// `onnxd key`: create (the secret is printed once, in `key`), list and revoke API keys.
import { parseArgs } from 'node:util'
import { OnnxdError } from '../shared/errors.js'
import { apiKeyJson, createApiKey } from '../facade/accounts.js'
import { operatorOptions, printJson, withStore } from './operator.js'

const USAGE = `usage:
  onnxd key create <account-id> [--name N] [--rpm N]   (--rpm 0 = unlimited; default: ONNXD_KEY_RPM)
  onnxd key list <account-id>
  onnxd key revoke <key-id>
options: --data-dir DIR (ONNXD_DATA_DIR), --config FILE
`

export async function run(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      name: { type: 'string' },
      rpm: { type: 'string' },
      'data-dir': { type: 'string' },
      config: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  })
  const [action, ...args] = positionals
  if (values.help) {
    process.stdout.write(USAGE)
    return 0
  }
  const opts = operatorOptions(values, env)
  return withStore(opts, async (store) => {
    if (action === 'create' && args.length === 1) {
      let rpmLimit: number | null = null
      if (values.rpm !== undefined) {
        if (!/^\d+$/.test(values.rpm)) throw new OnnxdError('invalid_value', `--rpm must be an integer >= 0. Given: ${values.rpm}`)
        rpmLimit = Number(values.rpm)
      }
      printJson(await createApiKey(store, args[0]!, { name: values.name ?? null, rpmLimit }))
      return 0
    }
    if (action === 'list' && args.length === 1) {
      if (!(await store.getAccount(args[0]!))) throw new OnnxdError('not_found', `no account '${args[0]}'`)
      printJson((await store.listKeys(args[0]!)).map((k) => apiKeyJson(k)))
      return 0
    }
    if (action === 'revoke' && args.length === 1) {
      const key = await store.revokeKey(null, args[0]!)
      if (!key) throw new OnnxdError('not_found', `no API key '${args[0]}'`)
      printJson(apiKeyJson(key))
      return 0
    }
    process.stderr.write(USAGE)
    return 2
  })
}
