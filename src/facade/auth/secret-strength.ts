// What a production facade accepts as its HS256 session-token secret: not one of the placeholders this repository
// ships or shipped (deploy/kubernetes/10-secret.yaml's value, compose.yaml's former default) nor anything marked as
// one, and not guessable: zxcvbn's estimate (dictionary words, repeats, sequences, keyboard patterns, dates) must
// reach 10^40 guesses. It counts about 10 guesses per character of a random string: `openssl rand -base64 48` (64
// characters) gives about 10^62; 32 random bytes in base64 (43 characters) about 10^41-10^43.
// The estimator and its dictionaries (about 60 ms to load) are loaded only when a production facade checks a secret.
// Imports: shared errors; @zxcvbn-ts (lazily).
import { OnnxdError } from '../../shared/errors.js'

/**
 * The placeholders this repository ships or shipped as JWT secrets; test/facade/secret-strength.test.ts checks that
 * every secret value in the tree's deployment files and docs is refused.
 */
export const SHIPPED_PLACEHOLDERS: readonly string[] = ['REPLACE-ME-with-openssl-rand-base64-48', 'local-only-insecure-jwt-secret-do-not-deploy']

/** Words that mark a value as a placeholder, whatever surrounds them (`change_me`, `REPLACE-ME`, `do not deploy`). */
const PLACEHOLDER_MARKS = /replace[-_ ]?me|change[-_ ]?me|do[-_ ]?not[-_ ]?deploy|insecure|placeholder|your[-_ ]?(jwt[-_ ]?)?secret[-_ ]?here/i

/** The least guesses (log10) a production secret must take by zxcvbn's estimate: 10^40, about 2^133. */
export const MIN_GUESSES_LOG10 = 40

/** How to make a secret, as the refusal and the docs say it. */
export const MAKE_SECRET = 'openssl rand -base64 48'

let estimator: Promise<(secret: string) => number> | null = null

/** zxcvbn's estimate of the guesses (log10) `secret` takes, with the common dictionaries and keyboard graphs. */
function guessesLog10(secret: string): Promise<number> {
  estimator ??= (async () => {
    const [{ ZxcvbnFactory }, common] = await Promise.all([import('@zxcvbn-ts/core'), import('@zxcvbn-ts/language-common')])
    const z = new ZxcvbnFactory({ dictionary: common.dictionary, graphs: common.adjacencyGraphs })
    return (s: string) => z.check(s).guessesLog10
  })()
  return estimator.then((estimate) => estimate(secret))
}

/** Why `secret` must not sign production session tokens, or null when it may. */
export async function secretWeakness(secret: string): Promise<string | null> {
  if (SHIPPED_PLACEHOLDERS.includes(secret) || PLACEHOLDER_MARKS.test(secret)) return 'is a placeholder'
  const log10 = await guessesLog10(secret)
  if (log10 < MIN_GUESSES_LOG10) return `is too weak (about 10^${Math.floor(log10)} guesses by zxcvbn's estimate, at least 10^${MIN_GUESSES_LOG10} needed)`
  return null
}

/**
 * Refuses a production facade's JWT secret that is a placeholder or guessable: one config error naming
 * ONNXD_JWT_SECRET and how to make one. Outside production (NODE_ENV unset or not `production`) any secret the
 * options accept goes, as does a facade without one (a JWKS, or the generated secret of a development data dir).
 */
export async function checkProductionSecret(secret: string | undefined, env: { NODE_ENV?: string }): Promise<void> {
  if (env.NODE_ENV !== 'production' || secret === undefined) return
  const weakness = await secretWeakness(secret)
  if (weakness !== null) {
    throw new OnnxdError('config', `ONNXD_JWT_SECRET ${weakness}: NODE_ENV=production needs a random secret, e.g. \`${MAKE_SECRET}\``)
  }
}
