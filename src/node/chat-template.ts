// Whether the served bundle has a chat template, for /health (`chat_template`): read from the bundle's
// tokenizer_config.json as the engine's tokenizer reads it (a string `chat_template`), once. Imports: node:fs.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'

/** True or false from the bundle's tokenizer_config.json; undefined when the file cannot be read (the node cannot tell). */
export function bundleHasChatTemplate(modelDir: string): boolean | undefined {
  let config: unknown
  try {
    config = JSON.parse(readFileSync(join(modelDir, 'tokenizer_config.json'), 'utf8'))
  } catch {
    return undefined
  }
  return typeof config === 'object' && config !== null && typeof (config as { chat_template?: unknown }).chat_template === 'string'
}
