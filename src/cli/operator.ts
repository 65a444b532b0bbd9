// What the operator commands (`onnxd account|key|token|facade|serve`) share: reading the facade's options from
// onnxd.config.json, the environment and flags, opening the store, printing JSON, negative numbers as arguments.
// Imports: facade options, store.
import type { Store } from '../store/interfaces.js'
import { openStore } from '../facade/stores.js'
import { FACADE_FLAGS, FACADE_SECRETS, facadeFlags, loadFacadeOptions, readFacadeConfig, type Env, type FacadeOptions } from '../facade/options.js'

/**
 * The facade's command-line flags: one per option, all read as strings, except the JWT secret's (a secret on a
 * command line is visible to every user of the host: ONNXD_JWT_SECRET or the config file only).
 */
export const FACADE_ARG_FLAGS: readonly string[] = Object.entries(FACADE_FLAGS)
  .filter(([field]) => !(FACADE_SECRETS as readonly string[]).includes(field))
  .map(([, flag]) => flag)

export function operatorOptions(values: Record<string, unknown>, env: Env): FacadeOptions {
  const config = typeof values.config === 'string' ? values.config : undefined
  return loadFacadeOptions(env, facadeFlags(values), readFacadeConfig(config))
}

/** Runs `fn` with the configured store (PostgreSQL at ONNXD_DATABASE_URL, else SQLite in the data directory), closing it afterwards. */
export async function withStore<T>(opts: FacadeOptions, fn: (store: Store) => Promise<T>): Promise<T> {
  const store = await openStore(opts)
  try {
    return await fn(store)
  } finally {
    await store.close()
  }
}

export function printJson(value: unknown, out: NodeJS.WritableStream = process.stdout): void {
  out.write(`${JSON.stringify(value, null, 2)}\n`)
}

/**
 * parseArgs (Node 20) reads `-5` as an option: escape negative numbers so they stay positionals.
 * Returns argv with such tokens prefixed by NEG, and a function to undo it.
 */
const NEG = '\u0000'
export function protectNegatives(argv: string[]): string[] {
  return argv.map((a) => (/^-\d/.test(a) ? NEG + a : a))
}
export const unprotect = (a: string): string => (a.startsWith(NEG) ? a.slice(1) : a)
