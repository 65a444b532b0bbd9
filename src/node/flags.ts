// The node's command-line flags: one per NodeOptions field (named in NODE_FLAGS), read with node:util parseArgs
// over the ONNXD_* environment and the config file's `node` section. What `onnxd node`, `onnxd serve` and the
// bench's node target parse. Imports: node options, shared errors.
import { parseArgs } from 'node:util'
import { OnnxdError } from '../shared/errors.js'
import { loadNodeOptions, NODE_FLAGS, NodeOptions, nodeFlags, readNodeConfig } from './options.js'

export type ArgOption = { type: 'string' | 'boolean'; short?: string }

/** parseArgs options for every node flag except those in `except` (`onnxd serve` renames --port and --host). */
export function nodeArgOptions(except: readonly string[] = []): Record<string, ArgOption> {
  const options: Record<string, ArgOption> = {}
  for (const [field, flag] of Object.entries(NODE_FLAGS)) {
    if (except.includes(flag)) continue
    options[flag] = { type: NodeOptions.properties[field as keyof NodeOptions].type === 'boolean' ? 'boolean' : 'string' }
  }
  return options
}

/**
 * `onnxd node` arguments (every node flag, `--config FILE`, `--help`) as options: flags over ONNXD_* variables over
 * the config file. null for `--help`. An unknown flag or a missing value is a config error, followed by `usage`.
 */
export function nodeOptionsFromArgv(argv: string[], env: NodeJS.ProcessEnv, usage = ''): NodeOptions | null {
  const options: Record<string, ArgOption> = { config: { type: 'string' }, help: { type: 'boolean', short: 'h' }, ...nodeArgOptions() }
  let values: Record<string, string | boolean | undefined>
  try {
    ;({ values } = parseArgs({ args: argv, options, strict: true, allowPositionals: false }))
  } catch (e) {
    // A configuration mistake: say so plainly (with the usage, where there is one).
    throw new OnnxdError('config', usage ? `${(e as Error).message}\n\n${usage}` : (e as Error).message)
  }
  if (values.help === true) return null
  return loadNodeOptions(env, nodeFlags(values), readNodeConfig(typeof values.config === 'string' ? values.config : undefined))
}
