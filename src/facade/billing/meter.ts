// Billing: who may spend (402 before dispatch) and what a completion costs, recorded with its usage in one
// store transaction. Imports: store, shared errors, facade options.
import type { Account, ApiKey, Store } from '../../store/interfaces.js'
import { OnnxdError } from '../../shared/errors.js'
import type { ModelPrice } from '../options.js'

/** Tokens a completion consumed: what the node reported, or what was counted when a stream ended early. */
export interface TokenCounts {
  promptTokens: number
  completionTokens: number
}

export class PriceTable {
  /** Nano-units per token: prices are units per 1M tokens, i.e. micro-units per token, kept to 3 decimals. */
  private readonly nanos = new Map<string, { prompt: number; completion: number }>()

  constructor(prices: Readonly<Record<string, ModelPrice>>) {
    for (const [model, p] of Object.entries(prices)) {
      this.nanos.set(model, { prompt: Math.round(p.prompt * 1000), completion: Math.round(p.completion * 1000) })
    }
  }

  /** Integer micro-units, rounded up per completion. */
  costMicros(model: string, t: TokenCounts): number {
    const p = this.nanos.get(model) ?? this.nanos.get('*')
    if (!p) return 0
    return Math.ceil((t.promptTokens * p.prompt + t.completionTokens * p.completion) / 1000)
  }
}

export class Meter {
  constructor(
    private readonly store: Store,
    readonly prices: PriceTable,
    private readonly now: () => number = Date.now,
  ) {}

  /** 402 when the account may not spend: subscription inactive, or balance exhausted. */
  checkCanSpend(account: Account): void {
    if (account.subscription !== 'active') {
      throw new OnnxdError('payment_required', 'Subscription inactive: reactivate the subscription to use the API')
    }
    if (account.balanceMicros <= 0) {
      throw new OnnxdError('payment_required', 'Account balance exhausted: add credit to continue')
    }
  }

  /** Records one completion's usage and debits its cost, atomically. */
  async record(account: Account, key: ApiKey, model: string, t: TokenCounts): Promise<number> {
    const costMicros = this.prices.costMicros(model, t)
    const at = this.now()
    await this.store.recordCompletion({
      accountId: account.id,
      keyId: key.id,
      model,
      promptTokens: t.promptTokens,
      completionTokens: t.completionTokens,
      costMicros,
      at,
      // last_used_at has minute resolution: one write per key per minute, not one per completion.
      touchKey: key.lastUsedAt === null || at / 1000 - key.lastUsedAt >= 60,
    })
    return costMicros
  }
}
