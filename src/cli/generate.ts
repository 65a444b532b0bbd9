// `onnxd generate --model DIR "prompt"`: one completion in this process, printed with its token counts.
import { parseArgs } from 'node:util'
import { Engine, parseWebgpuOptions, type SeqEvent } from '../engine/index.js'
import { OnnxdError, fromErrorData } from '../shared/errors.js'
import { DEFAULT_MODEL_DIR, PROVIDERS, type Dtype, type Provider } from '../shared/model.js'
import { resolveModelDir } from './model-dir.js'

const HELP = `usage: onnxd generate [--model DIR|OWNER/NAME] [options] "prompt"

  --model DIR          model bundle (default: ${DEFAULT_MODEL_DIR}, built on first use), or a Hugging Face hub id
                       (fetched into the hub cache for --dtype; HF_TOKEN, HF_ENDPOINT, HF_HUB_OFFLINE apply)
  --revision R         the hub id's branch, tag or commit (default main)
  --chat               treat the prompt as one user message and apply the chat template
  --max-tokens N       (default 64)
  --temperature T      (default 0: greedy)
  --top-p P --top-k K --min-p P --seed N --stop S (repeatable)
  --ignore-eos         generate max-tokens tokens
  --dtype fp32|fp16|q4|int8|quantized
  --provider P         execution provider: cpu (default), webgpu, cuda, tensorrt
  --graph-capture      WebGPU graph capture of the decode step (webgpu, a GroupQueryAttention model)
  --webgpu-options K=V,...  WebGPU provider options passed on to ORT, as the node's --webgpu-options (webgpu)
  --json               print the result as JSON (with the completion's token ids and the provider that ran it)
`

export async function run(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      model: { type: 'string' },
      revision: { type: 'string' },
      chat: { type: 'boolean' },
      'max-tokens': { type: 'string' },
      temperature: { type: 'string' },
      'top-p': { type: 'string' },
      'top-k': { type: 'string' },
      'min-p': { type: 'string' },
      seed: { type: 'string' },
      stop: { type: 'string', multiple: true },
      'ignore-eos': { type: 'boolean' },
      dtype: { type: 'string' },
      provider: { type: 'string' },
      'graph-capture': { type: 'boolean' },
      'webgpu-options': { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  })
  if (values.help || positionals.length !== 1) {
    process.stdout.write(HELP)
    return values.help ? 0 : 2
  }
  const num = (name: string, v: string | undefined): number | undefined => {
    if (v === undefined) return undefined
    const n = Number(v)
    if (!Number.isFinite(n)) throw new OnnxdError('config', `--${name} must be a number. Given: ${v}`)
    return n
  }
  const provider = (values.provider ?? 'cpu') as Provider
  if (!PROVIDERS.includes(provider)) throw new OnnxdError('config', `--provider must be one of ${PROVIDERS.join(', ')}. Given: ${values.provider}`)
  const webgpu = values['webgpu-options'] === undefined ? null : parseWebgpuOptions(values['webgpu-options'])
  if (webgpu && provider !== 'webgpu') throw new OnnxdError('config', `--webgpu-options applies to --provider webgpu; given provider ${provider}`)
  if (webgpu?.problems.length) throw new OnnxdError('config', `--webgpu-options: ${webgpu.problems.join('; ')}`)
  const modelDir = await resolveModelDir(values.model, { revision: values.revision, dtype: values.dtype as Dtype | undefined })
  const engine = await Engine.load({ modelDir, dtype: values.dtype as Dtype | undefined, provider, graphCapture: values['graph-capture'], webgpuOptions: webgpu?.options })
  try {
    const prompt = positionals[0]
    const started = performance.now()
    const events: SeqEvent[] = []
    await new Promise<void>((resolve) => {
      engine.submit(
        {
          model: engine.model.id,
          request_id: 'cli',
          ...(values.chat ? { messages: [{ role: 'user', content: prompt }] } : { prompt }),
          max_tokens: num('max-tokens', values['max-tokens']) ?? 64,
          temperature: num('temperature', values.temperature) ?? 0,
          top_p: num('top-p', values['top-p']),
          top_k: num('top-k', values['top-k']),
          min_p: num('min-p', values['min-p']),
          seed: num('seed', values.seed),
          stop: values.stop,
          ignore_eos: values['ignore-eos'],
        },
        (e) => {
          events.push(e)
          if (e.type === 'token' && !values.json) process.stdout.write(e.text)
          if (e.type === 'done' || e.type === 'error') resolve()
        },
      )
    })
    const last = events[events.length - 1]
    if (last.type === 'error') throw fromErrorData(last.error)
    if (last.type !== 'done') throw new Error('generation ended without a result')
    const seconds = (performance.now() - started) / 1000
    const text = events.map((e) => (e.type === 'token' || e.type === 'done' ? e.text : '')).join('')
    const ids = events.flatMap((e) => (e.type === 'token' || e.type === 'done' ? e.ids : []))
    const summary = {
      model: engine.model.id,
      provider: engine.model.session.provider,
      runtime: engine.model.session.runtime,
      device_cache: engine.model.session.deviceResident,
      finish_reason: last.finishReason,
      prompt_tokens: last.usage.prompt_tokens,
      completion_tokens: last.usage.completion_tokens,
      seconds: Number(seconds.toFixed(3)),
      tokens_per_second: Number((last.usage.completion_tokens / seconds).toFixed(1)),
    }
    if (values.json) process.stdout.write(JSON.stringify({ text, ids, ...summary }) + '\n')
    else process.stdout.write(`${last.text}\n\n[${summary.prompt_tokens} prompt tokens, ${summary.completion_tokens} completion tokens, finish_reason ${summary.finish_reason}, ${summary.tokens_per_second} tokens/s]\n`)
    return 0
  } finally {
    await engine.close()
  }
}
