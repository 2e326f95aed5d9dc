import { createRandom } from './prng.ts';

export type Outcome = 'ack' | 'rejected' | 'unknown';
export type LedgerEntry = {
  n: number;
  kind: 'place' | 'cancel' | 'retry';
  /** Idempotency-Key sent with the request; every request carries one, so an unknown outcome can be resolved. */
  key: string;
  path: string;
  body: string;
  outcome: Outcome;
  status?: number;
  orderId?: string;
  error?: string;
};

export type LoadOptions = {
  baseUrl: () => string;
  seed: number;
  commands: number;
  concurrency: number;
  /** Target commands per second across all workers. */
  rate: number;
  /** Called before command n is sent; fires the faults due at n. */
  onCommand?: (n: number) => void;
  requestTimeoutMs?: number;
};

const CUSTOMERS = 25;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** True when the request never reached a server (nothing listened): it cannot have had an effect. */
function neverSent(error: unknown): boolean {
  const code = (error as { cause?: { code?: string } })?.cause?.code;
  return code === 'ECONNREFUSED';
}

/**
 * Sends `commands` HTTP commands (place 70 %, cancel 20 %, retry of an earlier request with the same
 * Idempotency-Key 10 %) with `concurrency` workers at about `rate` per second, and records each in a ledger:
 * acknowledged (2xx), rejected (4xx) or unknown (the connection broke or timed out: a process died).
 * A connection refused before sending is retried: it had no effect.
 */
export async function runLoad(o: LoadOptions): Promise<LedgerEntry[]> {
  const ledger: LedgerEntry[] = [];
  const placed: string[] = [];
  let next = 0;
  const started = performance.now();

  async function send(entry: Omit<LedgerEntry, 'outcome'>): Promise<LedgerEntry> {
    for (let tries = 0; ; tries++) {
      try {
        const res = await fetch(`${o.baseUrl()}${entry.path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': entry.key },
          body: entry.body,
          signal: AbortSignal.timeout(o.requestTimeoutMs ?? 10_000),
        });
        const text = await res.text();
        if (res.status >= 500) {
          // 503 (database busy) has no effect by contract; other 5xx are unknown
          if (res.status === 503 && tries < 200) {
            await sleep(50);
            continue;
          }
          return { ...entry, outcome: 'unknown', status: res.status, error: text.slice(0, 200) };
        }
        const body = res.status < 300 ? (JSON.parse(text) as { orderId?: string }) : undefined;
        return { ...entry, outcome: res.status < 300 ? 'ack' : 'rejected', status: res.status, ...(body?.orderId ? { orderId: body.orderId } : {}) };
      } catch (error) {
        if (neverSent(error) && tries < 600) {
          await sleep(50);
          continue;
        }
        return { ...entry, outcome: 'unknown', error: String((error as Error).cause ?? error).slice(0, 200) };
      }
    }
  }

  async function worker() {
    for (;;) {
      const n = next++;
      if (n >= o.commands) return;
      const due = started + (n * 1000) / o.rate;
      const wait = due - performance.now();
      if (wait > 0) await sleep(wait);
      o.onCommand?.(n);
      const rnd = createRandom(o.seed * 1_000_003 + n);
      const roll = rnd.next();
      let entry: Omit<LedgerEntry, 'outcome'>;
      if (roll < 0.2 && placed.length > 0) {
        const orderId = rnd.pick(placed);
        entry = { n, kind: 'cancel', key: `cancel-${o.seed}-${n}`, path: `/orders/${orderId}/cancel`, body: JSON.stringify({ reason: `torture ${n}` }), orderId };
      } else if (roll < 0.3 && ledger.length > 0) {
        const earlier = rnd.pick(ledger);
        entry = { n, kind: 'retry', key: earlier.key, path: earlier.path, body: earlier.body, ...(earlier.orderId ? { orderId: earlier.orderId } : {}) };
      } else {
        const items = Array.from({ length: rnd.int(1, 3) }, (_, i) => ({ sku: `sku-${rnd.int(1, 50)}-${i}`, quantity: rnd.int(1, 5), unitPriceCents: rnd.int(0, 20_000) }));
        entry = { n, kind: 'place', key: `place-${o.seed}-${n}`, path: '/orders', body: JSON.stringify({ customerId: `cust-${rnd.int(1, CUSTOMERS)}`, currency: 'EUR', items }) };
      }
      const done = await send(entry);
      ledger.push(done);
      if (done.kind === 'place' && done.outcome === 'ack' && done.orderId) placed.push(done.orderId);
    }
  }

  await Promise.all(Array.from({ length: o.concurrency }, worker));
  return ledger.sort((a, b) => a.n - b.n);
}
