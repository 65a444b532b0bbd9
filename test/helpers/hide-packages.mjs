// `node --import ./test/helpers/hide-packages.mjs`: the packages named in ONNXD_TEST_HIDE_PACKAGES (comma-separated)
// do not resolve, as in an install without them (`npm install --omit=dev` for devDependencies): importing one fails
// with Node's own ERR_MODULE_NOT_FOUND and message. A module-resolution hook (node:module register), so that a test
// can run a command without them while they stay installed for everything else.
import { register } from 'node:module'

const hook = `
const hidden = new Set((process.env.ONNXD_TEST_HIDE_PACKAGES ?? '').split(',').filter(Boolean))
export async function resolve(specifier, context, next) {
  const parts = specifier.split('/')
  const name = specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]
  if (hidden.has(name)) {
    const err = new Error("Cannot find package '" + name + "' imported from " + context.parentURL)
    err.code = 'ERR_MODULE_NOT_FOUND'
    throw err
  }
  return next(specifier, context)
}
`
register(`data:text/javascript,${encodeURIComponent(hook)}`)
