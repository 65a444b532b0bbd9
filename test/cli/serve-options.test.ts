// `onnxd serve` (what `npm start` runs): which of its flags reach the node, which the facade, and which both.
import { describe, expect, it } from 'vitest'
import { serveOptions } from '../../src/cli/serve.js'

describe('onnxd serve options', () => {
  it('--body-limit and --log-level reach both halves: the facade is where clients meet the limit', () => {
    const o = serveOptions(['--body-limit', '5000', '--log-level', 'warn'], {})!
    expect(o.facade.bodyLimit).toBe(5000)
    expect(o.node.bodyLimit).toBe(5000)
    expect(o.facade.logLevel).toBe('warn')
    expect(o.node.logLevel).toBe('warn')
  })

  it('--port/--host are the facade’s, --node-port/--node-host the node’s, and the facade fronts that node', () => {
    const o = serveOptions(['--port', '9100', '--node-port', '9101', '--node-host', '127.0.0.2'], {})!
    expect(o.facade.port).toBe(9100)
    expect(o.node).toMatchObject({ port: 9101, host: '127.0.0.2' })
    expect(o.facade.nodes).toEqual(['http://127.0.0.2:9101'])
  })

  it('refuses --nodes: the facade’s node is the one serve starts', () => {
    expect(() => serveOptions(['--nodes', 'http://elsewhere:8081'], {})).toThrow(/Unknown option '--nodes'/)
  })

  it('--help is not options', () => {
    expect(serveOptions(['--help'], {})).toBeNull()
  })
})
