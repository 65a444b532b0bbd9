// The `onnxd` command run from src/ under tsx (`node --import tsx test/helpers/onnxd-src.ts <command> ...`), for tests
// that need it in a process of its own without building dist/ first. bin/onnxd.js runs the same main() from dist/.
import { main } from '../../src/cli.js'

await main(process.argv.slice(2))
