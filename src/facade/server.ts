// Runs a facade: build, listen, and close on demand. What `onnxd facade` and `onnxd serve` call.
// Imports: facade app.
import { buildFacade, type FacadeApp, type FacadeDeps } from './app.js'
import type { FacadeOptions } from './options.js'

export interface RunningFacade {
  app: FacadeApp
  /** The address it listens on, e.g. `http://127.0.0.1:8080`. */
  url: string
  close(): Promise<void>
}

export async function startFacade(options: FacadeOptions, deps: Partial<FacadeDeps> = {}): Promise<RunningFacade> {
  const app = await buildFacade(options, deps)
  try {
    const url = await app.listen({ port: options.port, host: options.host })
    app.log.info({ url, nodes: options.nodes, dataDir: options.dataDir }, 'facade listening')
    return { app, url, close: () => app.close() }
  } catch (e) {
    await app.close()
    throw e
  }
}
