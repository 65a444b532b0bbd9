// The `onnxd` command: a table of subcommands, each in its own module under src/cli/, loaded on demand.
import { isOnnxdError } from './shared/errors.js'

type Command = { summary: string; load: () => Promise<{ run(argv: string[]): Promise<number | void> }> }

const COMMANDS: Record<string, Command> = {
  generate: { summary: 'generate a completion in this process: onnxd generate --model DIR "prompt"', load: () => import('./cli/generate.js') },
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
    process.stderr.write(`onnxd ${name}: ${isOnnxdError(e) || !(e instanceof Error) ? String((e as Error).message ?? e) : (e.stack ?? e.message)}\n`)
    process.exitCode = 1
  }
}
