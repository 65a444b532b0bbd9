// A command's arguments parsed the way the `onnxd model` commands answer them: --help / -h prints the usage to stdout
// (exit 0); an unknown or malformed option, or positionals the command does not take, print it to stderr (exit 2).
// Imports: node:util only.
import { parseArgs, type ParseArgsConfig } from 'node:util'

type Options = NonNullable<ParseArgsConfig['options']>
type WithHelp<O extends Options> = O & { help: { type: 'boolean'; short: 'h' } }
type Parsed<O extends Options> = ReturnType<typeof parseArgs<{ args: string[]; allowPositionals: true; options: WithHelp<O> }>>

/** The parsed arguments, or the exit code when the command should end here (usage printed). */
export function parseCommand<const O extends Options>(
  command: string,
  usage: string,
  argv: string[],
  options: O,
  positionalsOk: (positionals: string[]) => boolean,
): Parsed<O> | number {
  let parsed: Parsed<O>
  try {
    const withHelp = { ...options, help: { type: 'boolean', short: 'h' } } as WithHelp<O>
    parsed = parseArgs({ args: argv, allowPositionals: true, options: withHelp })
  } catch (e) {
    // parseArgs throws a TypeError for unknown or malformed options: that is a usage error, not a crash.
    process.stderr.write(`${command}: ${(e as Error).message}\n\n${usage}`)
    return 2
  }
  if ((parsed.values as { help?: boolean }).help) {
    process.stdout.write(usage)
    return 0
  }
  if (!positionalsOk(parsed.positionals)) {
    process.stderr.write(usage)
    return 2
  }
  return parsed
}
