// A worker thread's entry that runs a TypeScript module (workerData.entry, a file URL) under tsx. Passing
// `execArgv: ['--import', 'tsx']` to a Worker whose own file is .ts fails on Node 20 ("Unknown file extension"):
// the hooks are registered here, in the worker, before the import.
import { workerData } from 'node:worker_threads'
import { register } from 'tsx/esm/api'

register()
await import(workerData.entry)
