import { createRandom } from '../test/support/random.ts';

export type Outcome = 'ack' | 'rejected' | 'unknown';
/** The fixture's commands: POST /accounts, POST /accounts/:id/deposit, POST /accounts/:id/close, or a retry of one. */
export type CommandKind = 'open' | 'deposit' | 'close';
export type LedgerEntry = {
  n: number;
  kind: CommandKind | 'retry';
  /** Idempotency-Key sent with the request; every request carries one, so an unknown outcome can be resolved. */
  key: string;
  path: string;
  body: string;
  outcome: Outcome;
  status?: number;
  accountId?: string;
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

const OWNERS = 25;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** True when the request never reached a server (nothing listened): it cannot have had an effect. */
function neverSent(error: unknown): boolean {
  const code = (error as { cause?: { code?: string } })?.cause?.code;
  return code === 'ECONNREFUSED';
}

/** The command of an Idempotency-Key (`open-…`, `deposit-…`, `close-…`); retries reuse the key of what they retry. */
export function commandOfKey(key: string): CommandKind | undefined {
  const kind = key.slice(0, key.indexOf('-'));
  return kind === 'open' || kind === 'deposit' || kind === 'close' ? kind : undefined;
}

/**
 * Sends `commands` HTTP commands to the fixture's accounts (open 35 %, deposit 45 %, close 10 %, retry of an
 * earlier request with the same Idempotency-Key 10 %) with `concurrency` workers at about `rate` per second, and
 * records each in a ledger: acknowledged (2xx), rejected (4xx: e.g. a deposit to a closed account) or unknown
 * (the connection broke or timed out: a process died). A connection refused before sending is retried: it had no
 * effect.
 */
export async function runLoad(o: LoadOptions): Promise<LedgerEntry[]> {
  const ledger: LedgerEntry[] = [];
  const opened: string[] = [];
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
        const body = res.status < 300 ? (JSON.parse(text) as { accountId?: string }) : undefined;
        return { ...entry, outcome: res.status < 300 ? 'ack' : 'rejected', status: res.status, ...(body?.accountId ? { accountId: body.accountId } : {}) };
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
      if (roll < 0.1 && ledger.length > 0) {
        const earlier = rnd.pick(ledger);
        entry = { n, kind: 'retry', key: earlier.key, path: earlier.path, body: earlier.body, ...(earlier.accountId ? { accountId: earlier.accountId } : {}) };
      } else if (roll < 0.2 && opened.length > 0) {
        const accountId = rnd.pick(opened);
        entry = { n, kind: 'close', key: `close-${o.seed}-${n}`, path: `/accounts/${accountId}/close`, body: '{}', accountId };
      } else if (roll < 0.65 && opened.length > 0) {
        const accountId = rnd.pick(opened);
        entry = {
          n,
          kind: 'deposit',
          key: `deposit-${o.seed}-${n}`,
          path: `/accounts/${accountId}/deposit`,
          body: JSON.stringify({ amountCents: rnd.int(1, 20_000) }),
          accountId,
        };
      } else {
        entry = { n, kind: 'open', key: `open-${o.seed}-${n}`, path: '/accounts', body: JSON.stringify({ owner: `owner-${rnd.int(1, OWNERS)}` }) };
      }
      const done = await send(entry);
      ledger.push(done);
      if (done.kind === 'open' && done.outcome === 'ack' && done.accountId) opened.push(done.accountId);
    }
  }

  await Promise.all(Array.from({ length: o.concurrency }, worker));
  return ledger.sort((a, b) => a.n - b.n);
}
