// The one options loader (src/shared/options.ts) on a small schema: precedence, strict conversion, parse and
// normalize hooks, cross-option checks, every problem listed, frozen result, arguments untouched.
import { describe, expect, it } from 'vitest'
import { Type } from '@sinclair/typebox'
import { flagInput, loadOptions, optionFlags, optionName, type OptionsSpec } from '../../src/shared/options.js'

const Schema = Type.Object(
  {
    port: Type.Integer({ minimum: 0, maximum: 65535, default: 1 }),
    ratio: Type.Number({ minimum: 0, default: 0.5 }),
    verbose: Type.Boolean({ default: false }),
    tags: Type.Array(Type.String({ minLength: 1 }), { default: [] }),
    name: Type.Optional(Type.String({ minLength: 1 })),
  },
  { additionalProperties: false },
)
const ENV = { port: 'X_PORT', ratio: 'X_RATIO', verbose: 'X_VERBOSE', tags: 'X_TAGS', name: 'X_NAME' }
const spec: OptionsSpec<typeof Schema> = {
  name: 'test',
  schema: Schema,
  env: ENV,
  parse: {
    tags: (raw) => {
      if (raw.startsWith('[')) throw new Error('must be a comma-separated list')
      return raw.split(',')
    },
  },
  normalize: { tags: (v) => (Array.isArray(v) ? v.map((t) => String(t).toLowerCase()) : v) },
  check: (v) => (v.verbose === true && v.name === undefined ? ['name is required with verbose'] : []),
}

function problems(fn: () => unknown): string[] {
  try {
    fn()
  } catch (e) {
    return (e as { details: { problems: string[] } }).details.problems
  }
  throw new Error('expected a config error')
}

describe('loadOptions', () => {
  it('fills defaults; flags win over the environment, which wins over the file, which wins over defaults', () => {
    expect(loadOptions(spec, {})).toEqual({ port: 1, ratio: 0.5, verbose: false, tags: [] })
    const o = loadOptions(spec, { X_PORT: '2', X_RATIO: '0.25' }, { port: '3' }, { port: 4, ratio: 0.75, name: 'file' }, { name: 'default' })
    expect(o).toEqual({ port: 3, ratio: 0.25, verbose: false, tags: [], name: 'file' })
  })

  it('converts strings strictly by type, and only strings from the environment or flags', () => {
    expect(loadOptions(spec, { X_VERBOSE: 'yes', X_NAME: ' n ', X_TAGS: 'A,b' })).toMatchObject({ verbose: true, name: 'n', tags: ['a', 'b'] })
    expect(problems(() => loadOptions(spec, { X_PORT: '1.5', X_RATIO: 'half', X_VERBOSE: 'maybe' }))).toEqual([
      'port (X_PORT, --port): must be an integer. Given: "1.5"',
      'ratio (X_RATIO, --ratio): must be a number. Given: "half"',
      'verbose (X_VERBOSE, --verbose): must be true or false (also 1/0, yes/no, on/off). Given: "maybe"',
    ])
    expect(problems(() => loadOptions(spec, {}, {}, { port: '5' }))).toEqual(['port (X_PORT, --port): must be an integer. Given: "5"'])
  })

  it('lists parse failures, nested and unknown options, and cross-option rules together', () => {
    expect(problems(() => loadOptions(spec, { X_TAGS: '[x]', X_VERBOSE: '1' }, {}, { colour: 'blue' }))).toEqual([
      'tags (X_TAGS): must be a comma-separated list. Given: "[x]"',
      'colour: unknown option',
      'name is required with verbose',
    ])
    expect(problems(() => loadOptions(spec, {}, {}, { tags: ['ok', ''] }))).toEqual(['tags (X_TAGS, --tags) at /tags/1: must not be empty. Given: ""'])
  })

  it('freezes the result and never changes its arguments', () => {
    const file = { tags: ['A'] }
    const o = loadOptions(spec, {}, {}, file)
    expect(o.tags).toEqual(['a'])
    expect(Object.isFrozen(o) && Object.isFrozen(o.tags)).toBe(true)
    expect(file).toEqual({ tags: ['A'] })
    expect(Object.isFrozen(file.tags)).toBe(false)
  })

  it('names flags after options and reads parseArgs values by them', () => {
    expect(optionFlags({ maxRunning: 'X', port: 'Y' })).toEqual({ maxRunning: 'max-running', port: 'port' })
    expect(flagInput(optionFlags(ENV), { port: '9', other: 1 })).toEqual({ port: '9' })
    expect(optionName({ maxRunning: 'X_MAX_RUNNING' }, 'maxRunning')).toBe('maxRunning (X_MAX_RUNNING, --max-running)')
  })
})
