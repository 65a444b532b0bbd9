// A promise with its resolve/reject exposed, for synchronizing tests without sleeps.
export interface Deferred<T = void> {
  promise: Promise<T>
  resolve(value: T): void
  reject(err: unknown): void
  readonly settled: boolean
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (v: T) => void
  let reject!: (e: unknown) => void
  let settled = false
  const promise = new Promise<T>((res, rej) => {
    resolve = (v) => {
      settled = true
      res(v)
    }
    reject = (e) => {
      settled = true
      rej(e)
    }
  })
  return {
    promise,
    resolve,
    reject,
    get settled() {
      return settled
    },
  }
}
