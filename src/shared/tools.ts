// Tool calling's shared shapes: a function tool as OpenAI defines it, and tool_choice. The facade checks them (422),
// the node's contract carries them, the chat template renders the tools, and the engine constrains a call's JSON to
// them when the request requires one. Hermes/Qwen's format is the one a constrained call is written in:
// <tool_call>{"name": ..., "arguments": {...}}</tool_call>. Imports: typebox.
import { Type, type Static } from '@sinclair/typebox'

/** OpenAI's function-name rule. */
export const TOOL_NAME = '^[a-zA-Z0-9_-]{1,64}$'
/** Tools one request may carry. */
export const MAX_TOOLS = 128

export const FunctionTool = Type.Object(
  {
    type: Type.Literal('function'),
    function: Type.Object(
      {
        name: Type.String({ pattern: TOOL_NAME }),
        description: Type.Optional(Type.String()),
        parameters: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
        strict: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
)
export type FunctionTool = Static<typeof FunctionTool>

export const ToolChoice = Type.Union([
  Type.Literal('none'),
  Type.Literal('auto'),
  Type.Literal('required'),
  Type.Object({ type: Type.Literal('function'), function: Type.Object({ name: Type.String() }, { additionalProperties: false }) }, { additionalProperties: false }),
])
export type ToolChoice = Static<typeof ToolChoice>

/** The tag pair around one call, as the Hermes/Qwen templates (and the embedded model's) write it. */
export const TOOL_CALL_OPEN = '<tool_call>'
export const TOOL_CALL_CLOSE = '</tool_call>'

/**
 * How a request's tools constrain its output: a required or named tool_choice, one call to those functions; auto
 * with a strict tool, free text whose calls are held to their parameters (a strict tool's; any object for the
 * others); otherwise nothing. Null: unconstrained.
 */
export function toolConstraint(tools: readonly FunctionTool[] | undefined, choice: ToolChoice | undefined): { mode: 'required' | 'auto'; functions: { name: string; parameters: Record<string, unknown> | null }[] } | null {
  const required = requiredTools(tools, choice)
  if (required.length) return { mode: 'required', functions: required.map((t) => ({ name: t.function.name, parameters: t.function.parameters ?? null })) }
  if (!tools?.length || choice === 'none' || !tools.some((t) => t.function.strict === true)) return null
  return { mode: 'auto', functions: tools.map((t) => ({ name: t.function.name, parameters: t.function.strict === true ? (t.function.parameters ?? null) : null })) }
}

/** The tools a tool_choice makes the model call one of: all (required), the named one, or none (none, auto). */
export function requiredTools(tools: readonly FunctionTool[] | undefined, choice: ToolChoice | undefined): FunctionTool[] {
  if (!tools?.length || choice === undefined || choice === 'none' || choice === 'auto') return []
  if (choice === 'required') return [...tools]
  return tools.filter((t) => t.function.name === choice.function.name)
}
