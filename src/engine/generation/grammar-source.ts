// A structured output's grammar text: the EBNF (root rule `root`) of a response_format or of constrained tool calls,
// and for free text with calls (tool_choice auto) the structural tag around it. The grammar thread builds it, on a
// cache miss, inside its compile's time bound (a schema's patterns can take a while to become automata); the
// replica only checks the bounds first (cheap). Pure: shared code and the converters.
import type { StructuredOutput } from '../../shared/sampling.js'
import { TOOL_CALL_CLOSE, TOOL_CALL_OPEN } from '../../shared/tools.js'
import { checkGrammarBounds } from './grammar-bounds.js'
import { JSON_OBJECT_GRAMMAR, jsonSchemaGrammar } from './json-schema-grammar.js'

/** The request field a grammar comes from, for errors. */
export function fieldOf(spec: StructuredOutput): string {
  return spec.type === 'json_object' ? 'response_format' : spec.type === 'json_schema' ? 'response_format.json_schema.schema' : 'tools'
}

/** Refuses (422) a schema past grammar-bounds.ts's bounds, before anything is sent to the grammar thread. */
export function checkBounds(spec: StructuredOutput): void {
  if (spec.type === 'json_schema') checkGrammarBounds([spec.schema], 'response_format.json_schema.schema')
  else if (spec.type === 'tool_call') checkGrammarBounds(spec.functions.map((f) => f.parameters ?? {}), 'tools[].function.parameters')
}

/** The grammar's text (EBNF, root rule `root`), and for free text with calls (auto) the structural tag around it. */
export function grammarOf(spec: StructuredOutput): { ebnf: string; auto: Record<string, unknown> | null } {
  checkBounds(spec)
  if (spec.type === 'json_object') return { ebnf: JSON_OBJECT_GRAMMAR, auto: null }
  if (spec.type === 'json_schema') return { ebnf: jsonSchemaGrammar(spec.schema), auto: null }
  const auto = spec.mode === 'auto'
  const ebnf = toolCallGrammar(spec.functions, !auto)
  if (!auto) return { ebnf, auto: null }
  // Free text, in which whatever follows the call tag is one call (xgrammar's triggered tags).
  return {
    ebnf,
    auto: { type: 'structural_tag', format: { type: 'triggered_tags', triggers: [TOOL_CALL_OPEN], tags: [{ type: 'tag', begin: `${TOOL_CALL_OPEN}\n`, content: { type: 'grammar', grammar: ebnf }, end: `\n${TOOL_CALL_CLOSE}` }] } },
  }
}

/**
 * A call's JSON to one of `functions`: its name, and arguments valid under its parameters (any object without);
 * `tagged`, inside Hermes's <tool_call> tags.
 */
function toolCallGrammar(functions: { name: string; parameters: Record<string, unknown> | null }[], tagged: boolean): string {
  const schema = {
    anyOf: functions.map((f) => ({ type: 'object', properties: { name: { const: f.name }, arguments: f.parameters ?? { type: 'object' } }, required: ['name', 'arguments'] })),
  }
  return jsonSchemaGrammar(schema, tagged ? [`${TOOL_CALL_OPEN}\n`, `\n${TOOL_CALL_CLOSE}`] : undefined, 'tools[].function.parameters')
}
