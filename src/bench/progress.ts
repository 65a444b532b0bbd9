// The terminal progress of a run: step messages and one line per level, plus a cli-progress bar while a level
// runs on a TTY (requests done, output tok/s so far). Writes to stderr so stdout stays the report. cli-progress is
// a devDependency, loaded by Progress.open in `bar` mode (dev-deps.ts).
import type cliProgress from 'cli-progress'
import type { RequestRecord } from './client.js'
import { devDependency } from './dev-deps.js'

export interface LevelProgress {
  onRecord(r: RequestRecord): void
  done(summary: string): void
}

/** `bar`: lines, and a bar on a TTY; `lines`: no bar; `silent`: nothing (tests). */
export type ProgressMode = 'bar' | 'lines' | 'silent'

export class Progress {
  private readonly tty: boolean
  private readonly enabled: boolean

  /** A run's progress; `bar` mode loads cli-progress first (whether or not `out` is a TTY, so a run fails alike). */
  static async open(mode: ProgressMode, out: NodeJS.WriteStream = process.stderr): Promise<Progress> {
    const bars = mode === 'bar' ? (await devDependency('cli-progress', () => import('cli-progress'))).default : null
    return new Progress(mode, out, bars)
  }

  constructor(
    mode: ProgressMode,
    private readonly out: NodeJS.WriteStream = process.stderr,
    /** cli-progress, when bars are drawn. */
    private readonly bars: typeof cliProgress | null = null,
  ) {
    this.enabled = mode !== 'silent'
    this.tty = mode === 'bar' && out.isTTY === true && bars !== null
  }

  step(message: string): void {
    if (this.enabled) this.out.write(`${message}\n`)
  }

  /** A bar for one level of `total` requests (a deadline may end it early). */
  level(label: string, total: number, deadlineS: number | null): LevelProgress {
    const started = performance.now()
    let tokens = 0
    let n = 0
    let failed = 0
    const bars = this.bars
    const bar = this.tty && bars
      ? new bars.SingleBar(
          {
            stream: this.out,
            format: `${label.padEnd(22)} [{bar}] {value}/{total} req | {tps} out tok/s | {failed} failed | {elapsed}s${deadlineS === null ? '' : ` (cut at ${deadlineS}s)`}`,
            hideCursor: true,
            clearOnComplete: false,
            etaBuffer: 20,
          },
          bars.Presets.shades_classic,
        )
      : null
    bar?.start(total, 0, { tps: '0.0', failed: 0, elapsed: '0' })
    return {
      onRecord: (r) => {
        n++
        tokens += r.outputTokens
        if (!r.ok && !r.cut) failed++
        const s = (performance.now() - started) / 1000
        bar?.update(n, { tps: (tokens / s).toFixed(1), failed, elapsed: s.toFixed(0) })
      },
      done: (summary) => {
        bar?.stop()
        if (this.enabled) this.out.write(`${label}: ${summary}\n`)
      },
    }
  }
}
