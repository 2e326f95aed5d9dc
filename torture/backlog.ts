// The torture run's backlog phase: commands queue while the broker is down, a poison account among them.
import { createClient } from '@libsql/client';
import { aggregateHash } from '../src/outbox/partition.ts';
import type { Broker } from './broker.ts';
import { runLoad, type LedgerEntry } from './load.ts';

export type BacklogOptions = {
  seed: number;
  /** Pending outbox rows to queue. */
  backlog: number;
  /** The stream's largest message: the poison account's opened event is larger. */
  maxMsgSize: number;
  /** The fixture API's URL. */
  baseUrl: string;
  /** The fixture service's database. */
  dbUrl: string;
  /** The broker: every node goes down for the phase. */
  nats: Pick<Broker, 'kill' | 'restart'>;
  /** Receives the poison account's id: the checker expects its rows parked, not published. */
  parkedAccounts: string[];
  log: (line: string) => void;
  /** Starts the lock phase (resolves once the lock is held), once the broker is back. */
  lockSubscriber: () => Promise<void>;
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The backlog phase: the broker goes down, `backlog` commands queue their rows in the outbox (one poison account
 * among them, credited and closed halfway through, so its aggregate has later events held behind a row the stream
 * refuses), then the broker comes back and, while the backlog drains, the balances subscriber's database is
 * locked past its whole delivery budget (when a lock phase is asked for). Returns the phase's ledger.
 */
export async function backlogPhase(p: BacklogOptions): Promise<LedgerEntry[]> {
  const baseUrl = () => p.baseUrl;
  await p.nats.kill();
  const accountId = await openPoisonAccount(p.dbUrl, p.seed, p.maxMsgSize);
  p.parkedAccounts.push(accountId);
  // commands until the outbox holds `backlog` pending rows, the poison account's deposit and closing in the middle
  const load = async (seed: number, rows: number) => {
    const out: LedgerEntry[] = [];
    for (let round = 0; (await countPending(p.dbUrl)) < rows; round++) {
      const missing = rows - (await countPending(p.dbUrl));
      out.push(
        ...(await runLoad({
          baseUrl,
          seed: seed * 100 + round,
          commands: Math.max(10, Math.ceil(missing * 1.1)),
          concurrency: 32,
          rate: 100_000,
          requestTimeoutMs: 30_000,
        })),
      );
    }
    return out;
  };
  const first = await load(p.seed * 1000 + 1, Math.ceil(p.backlog / 2));
  const later = [
    { n: -2, kind: 'deposit' as const, key: `deposit-poison-${p.seed}`, path: `/accounts/${accountId}/deposit`, body: { amountCents: 100 } },
    { n: -1, kind: 'close' as const, key: `close-poison-${p.seed}`, path: `/accounts/${accountId}/close`, body: {} },
  ];
  const held: LedgerEntry[] = [];
  for (const c of later) {
    const res = await postCommand(p.baseUrl, c.path, c.key, c.body);
    held.push({ ...c, body: JSON.stringify(c.body), outcome: 'ack', status: res.status, accountId });
  }
  const second = await load(p.seed * 1000 + 2, p.backlog);
  p.log(`torture: ${await countPending(p.dbUrl)} rows queued with the broker down (${first.length + second.length + held.length} commands)`);
  await p.nats.restart();
  await p.lockSubscriber();
  return [...first.map((e) => ({ ...e, n: 1_000_000 + e.n })), ...held, ...second.map((e) => ({ ...e, n: 2_000_000 + e.n }))];
}

/**
 * Opens the poison account `poison-<seed>` as POST /accounts would (its row and its `account.opened.v1` outbox row,
 * in the account's partition, in one write transaction), but with an event of more than `maxMsgSize` bytes: no
 * fixture command makes an event that large (an owner is at most 64 characters), so the row is written straight into the database. The event is
 * valid (the registry accepts it: `data.accountId` has no length limit), so only the operator's small stream refuses
 * it. Returns the account's id.
 */
async function openPoisonAccount(dbUrl: string, seed: number, maxMsgSize: number): Promise<string> {
  const id = `poison-${seed}`;
  const now = new Date();
  const event = {
    eventId: `poison-opened-${seed}`,
    type: 'account.opened.v1',
    aggregateType: 'account',
    aggregateId: id,
    aggregateVersion: 1,
    occurredAt: now.toISOString(),
    data: { accountId: `${id}-${'x'.repeat(maxMsgSize)}`, owner: 'poison' },
  };
  const c = createClient({ url: dbUrl, timeout: 30_000 });
  try {
    await c.batch(
      [
        { sql: "INSERT INTO accounts (id, owner, balance_cents, status, version, opened_at) VALUES (?, 'poison', 0, 'open', 1, ?)", args: [id, now.getTime()] },
        {
          // in its aggregate's partition, as appendToOutbox stores a row: the account's later events land in the same one
          sql: "INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, headers, status, attempts, occurred_at, available_at, aggregate_hash, partition) VALUES (?, 'account', ?, 'account.opened.v1', ?, '{}', 'pending', 0, ?, ?, ?, ? % (SELECT count FROM outbox_partitions WHERE id = 1))",
          args: [event.eventId, id, JSON.stringify(event), now.getTime(), now.getTime(), aggregateHash('account', id), aggregateHash('account', id)],
        },
      ],
      'write',
    );
  } finally {
    c.close();
  }
  return id;
}

/** One command with its Idempotency-Key; throws unless it is acknowledged (the phase needs both commands). */
async function postCommand(baseUrl: string, path: string, key: string, body: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  for (let tries = 0; ; tries++) {
    const res = await fetch(`${baseUrl}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(body),
    }).catch(() => undefined);
    if (res && res.status < 300) return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    if (tries > 100) throw new Error(`torture: ${path} answered ${res?.status ?? 'nothing'}: ${await res?.text()}`);
    await sleep(100);
  }
}

/** Outbox rows waiting for the broker. */
async function countPending(dbUrl: string): Promise<number> {
  const c = createClient({ url: dbUrl });
  try {
    return Number((await c.execute("SELECT count(*) FROM outbox WHERE status = 'pending'")).rows[0]![0]);
  } finally {
    c.close();
  }
}
