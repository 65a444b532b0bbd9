// Whether onnxruntime-node's WebGPU provider finds an adapter on this machine, probed once per test file (a one-node
// session, session.ts webgpuProbe). CPU-only machines get one from Mesa's lavapipe (.ci/lavapipe installs it);
// without one the WebGPU suites are skipped, their titles saying why.
import { webgpuProbe } from '../../src/engine/model/session.js'

/** Null when WebGPU runs here, else why not. */
export const noWebgpu: string | null = await webgpuProbe()

/** `title`, or `title` with the reason the suite is skipped. */
export const webgpuTitle = (title: string): string =>
  noWebgpu === null ? title : `${title} [skipped: no WebGPU adapter (${noWebgpu}); .ci/lavapipe installs Mesa's lavapipe]`

if (noWebgpu !== null) console.warn(webgpuTitle('WebGPU suites'))
