#!/usr/bin/env node
// The `onnxd` command: runs the compiled CLI (built by `npm install` through the prepare script).
import('../dist/cli.js').then((m) => m.main(process.argv.slice(2)))
