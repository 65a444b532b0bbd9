// `onnxd account`: create accounts, add credit, switch the subscription; prints the account as JSON.
import { parseArgs } from 'node:util'
import { OnnxdError } from '../shared/errors.js'
import { accountJson } from '../facade/accounts.js'
import { parseMoney } from '../facade/billing/money.js'
import { operatorOptions, printJson, protectNegatives, unprotect, withStore } from './operator.js'

const USAGE = `usage:
  onnxd account create <name> [--credits N] [--email E] [--inactive]
  onnxd account credit <account-id> <amount>        (amount in currency units, may be negative)
  onnxd account subscription <account-id> active|inactive
  onnxd account show <account-id>
  onnxd account list
options: --data-dir DIR (ONNXD_DATA_DIR), --config FILE
Amounts are decimal currency units with up to 6 decimals; JSON shows balance_micros (1 unit = 1000000).
`

export async function run(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const { values, positionals } = parseArgs({
    args: protectNegatives(argv),
    allowPositionals: true,
    options: {
      credits: { type: 'string' },
      email: { type: 'string' },
      inactive: { type: 'boolean' },
      'data-dir': { type: 'string' },
      config: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  })
  const [action, ...args] = positionals.map(unprotect)
  if (values.help) {
    process.stdout.write(USAGE)
    return 0
  }
  const opts = operatorOptions(values, env)
  const notFound = (id: string): OnnxdError => new OnnxdError('not_found', `no account '${id}'`)

  return withStore(opts, async (store) => {
    switch (action) {
      case 'create': {
        if (args.length !== 1) break
        const account = await store.createAccount({
          name: args[0]!,
          email: values.email ?? null,
          balanceMicros: values.credits !== undefined ? parseMoney(unprotect(values.credits)) : 0,
          subscription: values.inactive ? 'inactive' : 'active',
        })
        printJson(accountJson(account))
        return 0
      }
      case 'credit': {
        if (args.length !== 2) break
        const account = await store.creditAccount(args[0]!, parseMoney(args[1]!))
        if (!account) throw notFound(args[0]!)
        printJson(accountJson(account))
        return 0
      }
      case 'subscription': {
        if (args.length !== 2 || (args[1] !== 'active' && args[1] !== 'inactive')) break
        const account = await store.setSubscription(args[0]!, args[1])
        if (!account) throw notFound(args[0]!)
        printJson(accountJson(account))
        return 0
      }
      case 'show': {
        if (args.length !== 1) break
        const account = await store.getAccount(args[0]!)
        if (!account) throw notFound(args[0]!)
        printJson(accountJson(account))
        return 0
      }
      case 'list': {
        if (args.length !== 0) break
        printJson((await store.listAccounts()).map(accountJson))
        return 0
      }
    }
    process.stderr.write(USAGE)
    return 2
  })
}
