// The benchmark's own packages: vega and vega-lite (the report's chart, chart.ts) and cli-progress (the progress
// bar, progress.ts) are devDependencies, not the product's runtime dependencies, so an install without dev
// dependencies serves (`onnxd serve`, `onnxd node`) without them. Their one importer each loads them with import()
// through devDependency() when a run starts; `onnxd bench` without them stops there with one line saying how to
// install them (test/architecture.test.ts holds that no command imports them statically). Imports: shared errors.
import { OnnxdError } from '../shared/errors.js'

/** What `onnxd bench` says, in one line, when one of its packages is not installed. */
export const INSTALL_DEV = 'install the dev dependencies (`npm install --include=dev` in the onnxd folder)'

/**
 * The module `load` imports (an import() of `pkg`, written in the caller, the package's one importer); where `pkg`
 * is not installed, an OnnxdError of one line naming it. Any other failure (one of its own imports missing, say) is
 * thrown as it is.
 */
export async function devDependency<T>(pkg: string, load: () => Promise<T>): Promise<T> {
  try {
    return await load()
  } catch (e) {
    const err = e as NodeJS.ErrnoException
    if ((err.code === 'ERR_MODULE_NOT_FOUND' || err.code === 'MODULE_NOT_FOUND') && String(err.message).includes(`'${pkg}'`)) {
      throw new OnnxdError('config', `the benchmark needs ${pkg}, which is not installed: ${INSTALL_DEV}`)
    }
    throw e
  }
}
