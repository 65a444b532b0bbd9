// `onnxd node` argument handling that needs no engine: help text, unknown flags and bad values stop start-up
// with a config error naming the problem, before any worker starts.
import { afterEach, describe, expect, it, vi } from 'vitest'
import { run } from '../../src/cli/node.js'
import { NODE_ENV, NODE_FLAGS } from '../../src/node/options.js'
import { isOnnxdError } from '../../src/shared/errors.js'

afterEach(() => {
  vi.restoreAllMocks()
})

async function configError(argv: string[], env: NodeJS.ProcessEnv = {}): Promise<string> {
  try {
    await run(argv, env)
  } catch (e) {
    if (isOnnxdError(e) && e.code === 'config') return e.message
    throw e
  }
  throw new Error('expected a config error')
}

describe('onnxd node', () => {
  it('prints every flag with its variable on --help, and exits 0', async () => {
    let out = ''
    vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
      out += String(chunk)
      return true
    })
    expect(await run(['--help'], {})).toBe(0)
    for (const [field, env] of Object.entries(NODE_ENV)) {
      expect(out).toContain(`--${NODE_FLAGS[field as keyof typeof NODE_FLAGS]}`)
      expect(out).toContain(env)
    }
  })

  it('rejects an unknown flag with the usage', async () => {
    const msg = await configError(['--gpu'])
    expect(msg).toContain("Unknown option '--gpu'")
    expect(msg).toContain('usage: onnxd node')
  })

  it('rejects bad values from flags and the environment in one message', async () => {
    const msg = await configError(['--workers', '0', '--provider', 'rocm'], { ONNXD_NODE_PORT: 'http' })
    expect(msg).toContain('workers (ONNXD_WORKERS, --workers): must be >= 1')
    expect(msg).toContain('provider (ONNXD_PROVIDER, --provider): must be one of cpu, webgpu, cuda, tensorrt')
    expect(msg).toContain('port (ONNXD_NODE_PORT, --port): must be an integer')
  })
})
