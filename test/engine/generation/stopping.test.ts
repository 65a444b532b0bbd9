import { describe, expect, it } from 'vitest'
import { StopMatcher } from '../../../src/engine/generation/stopping.js'
import { Rng } from '../../../src/shared/prng.js'

/** Feeds deltas; returns what was emitted per push, whether it stopped, and the flush. */
function run(stops: string[], deltas: string[]): { emits: string[]; text: string; stopped: boolean; stop?: string } {
  const m = new StopMatcher(stops)
  const emits: string[] = []
  let stopped = false
  let stop: string | undefined
  for (const d of deltas) {
    const v = m.push(d)
    emits.push(v.emit)
    if (v.stopped) {
      stopped = true
      stop = v.stop
      break
    }
  }
  const rest = m.flush()
  if (rest) emits.push(rest)
  return { emits, text: emits.join(''), stopped, stop }
}

/** Splits `text` at random points (seeded), sometimes into single characters. */
function randomSplit(text: string, rng: Rng): string[] {
  const out: string[] = []
  let i = 0
  while (i < text.length) {
    const n = 1 + Math.floor(rng.next() * 5)
    out.push(text.slice(i, i + n))
    i += n
  }
  return out
}

describe('StopMatcher', () => {
  it('passes text through when there are no stop strings', () => {
    expect(run([], ['Hello', ' world'])).toEqual({ emits: ['Hello', ' world'], text: 'Hello world', stopped: false, stop: undefined })
  })

  it('stops at a stop string inside one delta and drops it and everything after', () => {
    const r = run(['END'], ['Hello END world'])
    expect(r).toMatchObject({ text: 'Hello ', stopped: true, stop: 'END' })
  })

  it('matches a stop string split across many deltas', () => {
    const r = run(['</answer>'], ['The answer is 4', '</', 'ans', 'w', 'er', '> trailing'])
    expect(r.text).toBe('The answer is 4')
    expect(r.stopped).toBe(true)
  })

  it('holds back a possible stop-string start instead of streaming it and retracting it later', () => {
    const m = new StopMatcher(['END'])
    expect(m.push('abc E')).toEqual({ emit: 'abc ', stopped: false })
    expect(m.push('N')).toEqual({ emit: '', stopped: false })
    // Not a stop after all: the held text comes out with the next delta.
    expect(m.push('x')).toEqual({ emit: 'ENx', stopped: false })
    expect(m.flush()).toBe('')
  })

  it('emits the held-back tail at flush when generation ends without a stop', () => {
    const m = new StopMatcher(['\n\nUser:'])
    expect(m.push('Bye.\n\nUs')).toEqual({ emit: 'Bye.', stopped: false })
    expect(m.flush()).toBe('\n\nUs')
    expect(m.flush()).toBe('')
  })

  it('keeps holding back the longest tail that could still become a stop string', () => {
    // "aab" could be the start of "aabx"; after "aa" + "a", only "aa" can still start "aab…".
    const m = new StopMatcher(['aabx'])
    expect(m.push('xaa').emit).toBe('x')
    expect(m.push('a').emit).toBe('a')
    expect(m.push('b').emit).toBe('')
    expect(m.push('x')).toEqual({ emit: '', stopped: true, stop: 'aabx' })
  })

  it('with several stop strings, stops at the one completing first', () => {
    expect(run(['world', 'lo'], ['Hello world'])).toMatchObject({ text: 'Hel', stop: 'lo' })
    expect(run(['lo w', 'Hel'], ['Hello world'])).toMatchObject({ text: '', stop: 'Hel' })
  })

  it('handles a stop string that is a prefix of another', () => {
    // "ab" completes before "abc" could: stop there, whatever the order of the list.
    expect(run(['abc', 'ab'], ['xabc'])).toMatchObject({ text: 'x', stop: 'ab' })
    expect(run(['ab', 'abc'], ['x', 'a', 'b', 'c'])).toMatchObject({ text: 'x', stop: 'ab' })
    // The longer one alone is held back until it fails.
    expect(run(['abc'], ['xab', 'd'])).toMatchObject({ emits: ['x', 'abd'], stopped: false })
  })

  it('prefers the longest of stop strings that end at the same place, so no part of one leaks', () => {
    expect(run(['bc', 'abc'], ['xabc'])).toMatchObject({ text: 'x', stop: 'abc' })
  })

  it('emits nothing more once stopped', () => {
    const m = new StopMatcher(['.'])
    expect(m.push('One. Two.')).toEqual({ emit: 'One', stopped: true, stop: '.' })
    expect(m.stopped).toBe(true)
    expect(m.push('Three')).toEqual({ emit: '', stopped: true })
    expect(m.flush()).toBe('')
  })

  it('works with non-ASCII stop strings', () => {
    expect(run(['。'], ['日本', '語です', '。次'])).toMatchObject({ text: '日本語です', stopped: true })
    expect(run(['🛑'], ['go ', '\ud83d', '\uded1 no'])).toMatchObject({ text: 'go ', stopped: true })
  })

  it('gives the same verdict and text however the text is split (property)', () => {
    const rng = new Rng(2024)
    const alphabet = 'ab \n'
    const stopsList = [['ab'], ['a b', 'b\n'], ['\n\n', '\n'], ['aaa', 'aab', 'b'], ['abab', 'ba']]
    for (let t = 0; t < 300; t++) {
      const text = Array.from({ length: 1 + Math.floor(rng.next() * 30) }, () => alphabet[Math.floor(rng.next() * 4)]).join('')
      const stops = stopsList[t % stopsList.length]!
      const whole = run(stops, [text])
      // Reference: the earliest-ending match, longest on ties.
      let cut = -1
      let end = Infinity
      for (const s of stops) {
        const at = text.indexOf(s)
        if (at >= 0 && (at + s.length < end || (at + s.length === end && at < cut))) {
          cut = at
          end = at + s.length
        }
      }
      expect(whole.text).toBe(cut >= 0 ? text.slice(0, cut) : text)
      expect(whole.stopped).toBe(cut >= 0)
      const split = run(stops, randomSplit(text, rng))
      expect(split.text, JSON.stringify({ text, stops })).toBe(whole.text)
      expect(split.stopped).toBe(whole.stopped)
    }
  })

  it('never emits text that a later stop would have cut (property)', () => {
    const rng = new Rng(7)
    for (let t = 0; t < 200; t++) {
      const stop = ['xyz', 'xxy', 'yx'][t % 3]!
      const text = Array.from({ length: 20 }, () => 'xyz'[Math.floor(rng.next() * 3)]).join('')
      const at = text.indexOf(stop)
      const r = run([stop], randomSplit(text, rng))
      let emitted = ''
      for (const e of r.emits) {
        emitted += e
        if (at >= 0) expect(emitted.length).toBeLessThanOrEqual(at)
      }
    }
  })
})
