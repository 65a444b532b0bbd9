// The `onnxd` command: a table of subcommands, each in its own module under src/cli/, loaded on demand.
import { isOnnxdError } from './shared/errors.js'

type Command = { summary: string; load: () => Promise<{ run(argv: string[]): Promise<number | void> }> }

const COMMANDS: Record<string, Command> = {
  serve: { summary: 'run a node and the /v1 facade in front of it (what npm start runs)', load: () => import('./cli/serve.js') },
  model: { summary: 'build the embedded default model: onnxd model build tiny|small|135m [--out DIR] [--seed N] [--dtype q4,int8,fp16]; onnxd model quality DIR --dtype q4', load: () => import('./cli/model.js') },
  generate: { summary: 'generate a completion in this process: onnxd generate --model DIR "prompt"', load: () => import('./cli/generate.js') },
  node: { summary: 'run a worker node: onnxd node [--model DIR|OWNER/NAME] [--port N] [--provider cpu|webgpu|cuda|tensorrt] ...', load: () => import('./cli/node.js') },
  facade: { summary: 'run the public /v1 facade alone: onnxd facade --nodes URL,...', load: () => import('./cli/facade.js') },
  account: { summary: 'manage accounts: onnxd account create|credit|subscription|show|list', load: () => import('./cli/account.js') },
  key: { summary: 'manage API keys: onnxd key create <account-id> [--name N] [--rpm N] | list | revoke', load: () => import('./cli/key.js') },
  token: { summary: 'mint a session token: onnxd token <account-id> [--ttl S]', load: () => import('./cli/token.js') },
  bench: { summary: 'serving benchmark with references: onnxd bench [--preset 135m] [--concurrency 1,4,16,64] [--attention plain,gqa] [--runtime js,capi] [--scenario long] | context [...] | compare A.json B.json', load: () => import('./cli/bench.js') },
}

export function usage(): string {
  const rows = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(20)} ${c.summary}`)
  return `usage: onnxd <command> [options]\n\ncommands:\n${rows.join('\n')}\n`
}

export async function main(argv: string[]): Promise<void> {
  const [name, ...rest] = argv
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(usage())
    return
  }
  const cmd = COMMANDS[name]
  if (!cmd) {
    process.stderr.write(`onnxd: unknown command '${name}'\n\n${usage()}`)
    process.exitCode = 2
    return
  }
  try {
    const code = await (await cmd.load()).run(rest)
    if (typeof code === 'number') process.exitCode = code
  } catch (e) {
    const listen = listenProblem(e)
    process.stderr.write(`onnxd ${name}: ${listen ?? (isOnnxdError(e) || !(e instanceof Error) ? String((e as Error).message ?? e) : (e.stack ?? e.message))}\n`)
    process.exitCode = 1
  }
}

/** One line for a server socket that cannot be bound (busy port, privileged port, foreign address); else null. */
export function listenProblem(e: unknown): string | null {
  const err = e as NodeJS.ErrnoException & { address?: unknown; port?: unknown }
  if (!(e instanceof Error) || err.syscall !== 'listen' || typeof err.port !== 'number') return null
  const where = `port ${err.port} on ${String(err.address)}`
  switch (err.code) {
    case 'EADDRINUSE':
      return `${where} is already in use: stop what holds it or choose another port (see --help)`
    case 'EACCES':
      return `no permission to listen on ${where} (ports below 1024 need privileges; choose another port)`
    case 'EADDRNOTAVAIL':
      return `cannot listen on ${where}: ${String(err.address)} is not an address of this machine`
    default:
      return null
  }
}
