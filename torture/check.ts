import { createClient } from '@libsql/client';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type { IntegrationEvent } from '../src/events/integration-event.ts';
import { partitionOf } from '../src/outbox/partition.ts';
import { commandOfKey, type LedgerEntry } from './load.ts';

export type CheckInput = {
  apiDbUrl: string;
  /** The fixture's subscribers' databases: `balances` (owner_balances) and `audit` (audit_log). */
  subscriberDbUrls: { balances: string; audit: string };
  /** One NATS URL, or several comma-separated (a cluster). */
  natsUrl: string;
  stream: string;
  /** The stream's subject prefix: an event of account `id` in outbox partition `p` is published on `<prefix>.account.<id>.<p>`. */
  prefix: string;
  ledger: LedgerEntry[];
  /**
   * Accounts whose opened event is a deliberate poison row (larger than the stream accepts): it must end parked
   * (`failed`), every later event of the account still `pending` behind it, and none of them on the stream or
   * applied by a subscriber.
   */
  parkedAccounts?: string[];
};

export type CheckReport = {
  counts: {
    acknowledged: number;
    rejected: number;
    unknownPresent: number;
    unknownAbsent: number;
    lost: number;
    duplicatedEffects: number;
    phantoms: number;
    orderViolations: number;
    pendingOutbox: number;
    failedOutbox: number;
    inboxGaps: number;
    deadLetters: number;
  };
  violations: string[];
};

type StreamEvent = { seq: number; msgId: string; subject: string; eventId: string; aggregateId: string; aggregateVersion: number };
type OutboxRow = { seq: number; id: string; aggregateId: string; type: string; status: string; version: number; amountCents: number; partition: number };
type Account = { owner: string; status: string; balance: number; version: number };

const OPENED = 'account.opened.v1';
const CREDITED = 'account.credited.v1';
const CLOSED = 'account.closed.v1';

async function readAll(url: string, sql: string) {
  const c = createClient({ url });
  try {
    return (await c.execute(sql)).rows;
  } finally {
    c.close();
  }
}

/**
 * Every message of the stream, in stream order, through an ordered consumer (one pass, no request per message); it
 * throws rather than skip a message it could not read, so a read error is never mistaken for a lost event.
 */
async function readStreamEvents(natsUrl: string, stream: string): Promise<StreamEvent[]> {
  const nc = await connect({ servers: natsUrl.split(',') });
  try {
    const info = await (await jetstreamManager(nc)).streams.info(stream);
    const out: StreamEvent[] = [];
    if (info.state.messages === 0) return out;
    const consumer = await jetstream(nc).consumers.get(stream);
    const messages = await consumer.consume({ max_messages: 1000 });
    let idle: NodeJS.Timeout | undefined;
    const arm = () => {
      clearTimeout(idle);
      idle = setTimeout(() => void messages.close(), 30_000);
    };
    arm();
    try {
      for await (const m of messages) {
        arm();
        const event = m.json<IntegrationEvent>();
        out.push({
          seq: m.seq,
          msgId: m.headers?.get('Nats-Msg-Id') ?? '',
          subject: m.subject,
          eventId: event.eventId,
          aggregateId: event.aggregateId,
          aggregateVersion: event.aggregateVersion,
        });
        if (m.seq >= info.state.last_seq) break;
      }
    } finally {
      clearTimeout(idle);
      await messages.close();
    }
    if (out.length !== info.state.messages || out.at(-1)?.seq !== info.state.last_seq)
      throw new Error(
        `torture: read ${out.length} messages of stream ${stream} up to seq ${out.at(-1)?.seq}; it holds ${info.state.messages} up to ${info.state.last_seq}`,
      );
    return out;
  } finally {
    await nc.close();
  }
}

/** Groups `items` by `key`, keeping their order. */
function groupBy<T>(items: Iterable<T>, key: (item: T) => string): Map<string, T[]> {
  const out = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    const list = out.get(k);
    if (list) list.push(item);
    else out.set(k, [item]);
  }
  return out;
}

/**
 * Checks the end state of a torture run on the fixture's accounts against the ledger: every acknowledged command
 * is wholly present, every unknown one wholly present or wholly absent (each balance is the sum of its committed
 * deposits), every committed event is in the stream once and applied once per subscriber, nothing exists that no
 * committed command explains, per-aggregate order holds in the outbox (each row in its aggregate's partition), the
 * stream (aggregateVersion increasing per aggregate, each on the subject naming its partition) and the audit log,
 * and the balances read model equals what the accounts table implies.
 */
export async function checkRun(input: CheckInput): Promise<CheckReport> {
  const violations: string[] = [];
  const counts: CheckReport['counts'] = {
    acknowledged: 0,
    rejected: 0,
    unknownPresent: 0,
    unknownAbsent: 0,
    lost: 0,
    duplicatedEffects: 0,
    phantoms: 0,
    orderViolations: 0,
    pendingOutbox: 0,
    failedOutbox: 0,
    inboxGaps: 0,
    deadLetters: 0,
  };
  const v = (kind: keyof CheckReport['counts'], msg: string) => {
    counts[kind]++;
    if (violations.length < 50) violations.push(`${kind}: ${msg}`);
  };

  const accounts = new Map(
    (await readAll(input.apiDbUrl, 'SELECT id, owner, status, balance_cents, version FROM accounts')).map((r) => [
      String(r.id),
      { owner: String(r.owner), status: String(r.status), balance: Number(r.balance_cents), version: Number(r.version) } satisfies Account,
    ]),
  );
  const outbox: OutboxRow[] = (
    await readAll(input.apiDbUrl, 'SELECT seq, id, aggregate_id, message_type, status, payload, partition FROM outbox ORDER BY seq')
  ).map((r) => {
    const e = JSON.parse(String(r.payload)) as { aggregateVersion: number; data: { amountCents?: number } };
    return {
      seq: Number(r.seq),
      id: String(r.id),
      aggregateId: String(r.aggregate_id),
      type: String(r.message_type),
      status: String(r.status),
      version: e.aggregateVersion,
      amountCents: e.data.amountCents ?? 0,
      partition: Number(r.partition),
    };
  });
  const keys = new Map(
    (await readAll(input.apiDbUrl, 'SELECT key, response_body FROM idempotency_keys')).map((r) => [
      String(r.key),
      JSON.parse(String(r.response_body)) as { accountId?: string },
    ]),
  );
  const stream = await readStreamEvents(input.natsUrl, input.stream);

  const parked = new Set(input.parkedAccounts ?? []);
  for (const id of parked) {
    const rows = outbox.filter((r) => r.aggregateId === id).map((r) => r.status);
    if (rows[0] !== 'failed' || rows.length < 2 || rows.slice(1).some((s) => s !== 'pending'))
      v('orderViolations', `poison account ${id}: outbox statuses [${rows.join(', ')}], expected failed then pending`);
  }
  counts.pendingOutbox = outbox.filter((r) => r.status === 'pending' && !parked.has(r.aggregateId)).length;
  counts.failedOutbox = outbox.filter((r) => r.status === 'failed' && !parked.has(r.aggregateId)).length;
  if (counts.pendingOutbox) violations.push(`outbox: ${counts.pendingOutbox} rows still pending`);
  if (counts.failedOutbox) violations.push(`outbox: ${counts.failedOutbox} rows failed`);

  // ledger: acknowledged, rejected, unknown → present / absent
  const requests = new Map<string, LedgerEntry>();
  for (const e of input.ledger) {
    if (!requests.has(e.key)) requests.set(e.key, e);
    if (e.outcome === 'ack') counts.acknowledged++;
    else if (e.outcome === 'rejected') counts.rejected++;
    const stored = keys.get(e.key);
    if (e.outcome === 'ack' && !stored) v('lost', `acknowledged ${e.kind} #${e.n} (${e.key}) has no committed key row`);
    if (e.outcome === 'ack' && e.kind === 'open' && e.accountId && !accounts.has(e.accountId)) v('lost', `acknowledged account ${e.accountId} is missing`);
    if (e.outcome === 'ack' && e.kind === 'close' && e.accountId && accounts.get(e.accountId)?.status !== 'closed')
      v('lost', `acknowledged close of ${e.accountId} is not applied`);
    if (e.outcome === 'rejected' && e.kind !== 'retry' && stored) v('phantoms', `rejected ${e.kind} #${e.n} has a committed key row`);
    if (e.outcome === 'unknown') {
      if (stored) counts.unknownPresent++;
      else counts.unknownAbsent++;
    }
  }

  // what the committed commands imply per account: its opening, its deposits (amounts from the ledger), its closing
  type Implied = { opens: number; deposits: number; cents: number; closes: number };
  const implied = new Map<string, Implied>();
  const of = (id: string) => implied.get(id) ?? implied.set(id, { opens: 0, deposits: 0, cents: 0, closes: 0 }).get(id)!;
  for (const [key, body] of keys) {
    const kind = commandOfKey(key);
    const request = requests.get(key);
    if (!kind || !request) {
      v('phantoms', `committed key ${key} was never sent`);
      continue;
    }
    const id = kind === 'open' ? body.accountId : request.accountId;
    if (!id) continue;
    const a = of(id);
    if (kind === 'open') a.opens++;
    if (kind === 'close') a.closes++;
    if (kind === 'deposit') {
      a.deposits++;
      a.cents += (JSON.parse(request.body) as { amountCents: number }).amountCents;
    }
  }
  for (const [id, a] of accounts) {
    if (parked.has(id)) continue;
    const want = implied.get(id) ?? { opens: 0, deposits: 0, cents: 0, closes: 0 };
    if (want.opens !== 1) v('phantoms', `account ${id} is explained by ${want.opens} committed open requests`);
    if (want.closes !== (a.status === 'closed' ? 1 : 0))
      v(want.closes > 1 || a.status === 'closed' ? 'phantoms' : 'lost', `account ${id} (${a.status}) has ${want.closes} committed close requests`);
    if (a.balance !== want.cents)
      v(
        a.balance < want.cents ? 'lost' : 'duplicatedEffects',
        `account ${id} holds ${a.balance} cents, its ${want.deposits} committed deposits add up to ${want.cents}`,
      );
    if (a.version !== 1 + want.deposits + want.closes)
      v('phantoms', `account ${id} is at version ${a.version} after ${want.deposits} deposits and ${want.closes} closes`);
  }
  for (const [id, a] of implied) if (a.opens > 0 && !accounts.has(id)) v('lost', `committed open request names account ${id}, which is missing`);

  // outbox: per account opened, one credited per committed deposit, closed if closed; versions 1..n in commit order
  const eventsByAccount = groupBy(outbox, (r) => r.aggregateId);
  for (const [id, a] of accounts) {
    const evs = eventsByAccount.get(id) ?? [];
    const deposits = parked.has(id) ? evs.filter((e) => e.type === CREDITED).length : (implied.get(id)?.deposits ?? 0);
    const expected = [OPENED, ...Array<string>(deposits).fill(CREDITED), ...(a.status === 'closed' ? [CLOSED] : [])];
    if (evs.map((e) => e.type).join() !== expected.join())
      v(evs.length > expected.length ? 'phantoms' : 'lost', `account ${id} (${a.status}) has outbox events [${evs.map((e) => e.type).join(', ')}]`);
    if (evs.some((e, i) => e.version !== i + 1))
      v('orderViolations', `account ${id}: outbox versions [${evs.map((e) => e.version).join(', ')}] in commit order`);
    const credited = evs.reduce((s, e) => s + e.amountCents, 0);
    if (!parked.has(id) && credited !== a.balance) v('lost', `account ${id}: credited events add up to ${credited} cents, its balance is ${a.balance}`);
  }
  for (const id of eventsByAccount.keys()) if (!accounts.has(id)) v('phantoms', `outbox events for unknown account ${id}`);
  // every row of an aggregate in one partition, the one its hash names: two relays never publish one aggregate at once
  const partitions = Number((await readAll(input.apiDbUrl, 'SELECT count FROM outbox_partitions WHERE id = 1'))[0]?.count);
  for (const r of outbox) {
    const want = partitionOf('account', r.aggregateId, partitions);
    if (r.partition !== want)
      v('orderViolations', `outbox row ${r.id} of account ${r.aggregateId} is in partition ${r.partition}, its aggregate's is ${want} of ${partitions}`);
  }

  // stream: one copy per outbox row, on its account's subject (with its partition), nothing else; per aggregate in version order
  const outboxById = new Map(outbox.map((r) => [r.id, r]));
  const seen = new Map<string, number>();
  for (const m of stream) {
    seen.set(m.msgId, (seen.get(m.msgId) ?? 0) + 1);
    const row = outboxById.get(m.msgId);
    if (!row || m.msgId !== m.eventId) v('phantoms', `stream message ${m.seq} (${m.msgId}) has no outbox row`);
    else if (m.subject !== `${input.prefix}.account.${row.aggregateId}.${row.partition}`)
      v('phantoms', `stream message ${m.seq} (${m.msgId}) is on ${m.subject}`);
  }
  for (const [id, n] of seen) if (n > 1) v('duplicatedEffects', `event ${id} is ${n} times in the stream`);
  for (const r of outbox) {
    if (parked.has(r.aggregateId)) {
      if (seen.has(r.id)) v('orderViolations', `event ${r.id} (${r.type}) of poison account ${r.aggregateId} reached the stream`);
    } else if (!seen.has(r.id)) v('lost', `outbox row ${r.id} (${r.type}) is not in the stream`);
  }
  // per aggregate (whatever subject or partition its messages are on), versions increase in stream order
  const lastVersion = new Map<string, number>();
  for (const m of stream) {
    const prev = lastVersion.get(m.aggregateId) ?? 0;
    if (m.aggregateVersion <= prev)
      v('orderViolations', `account ${m.aggregateId}: version ${m.aggregateVersion} after ${prev} in the stream (${m.subject}, seq ${m.seq})`);
    lastVersion.set(m.aggregateId, Math.max(prev, m.aggregateVersion));
  }

  // subscribers: inbox == outbox ids (but the parked account's), no dead letters
  const expectedIds = outbox.filter((r) => !parked.has(r.aggregateId)).map((r) => r.id);
  for (const [name, url] of Object.entries(input.subscriberDbUrls)) {
    const inbox = new Set((await readAll(url, `SELECT event_id FROM inbox WHERE consumer = '${name}'`)).map((r) => String(r.event_id)));
    for (const id of expectedIds) if (!inbox.has(id)) v('inboxGaps', `${name} has no inbox row for event ${id}`);
    for (const id of inbox) {
      const row = outboxById.get(id);
      if (!row) v('phantoms', `${name} applied unknown event ${id}`);
      else if (parked.has(row.aggregateId)) v('orderViolations', `${name} applied event ${id} of poison account ${row.aggregateId}`);
    }
    const dead = await readAll(url, 'SELECT event_id, error FROM dead_letters');
    counts.deadLetters += dead.length;
    for (const d of dead) violations.push(`dead letter in ${name}: ${String(d.event_id)} ${String(d.error).slice(0, 120)}`);
  }

  // audit: one row per applied event, and per account in version order
  const audit = (await readAll(input.subscriberDbUrls.audit, 'SELECT event_id, account_id, aggregate_version FROM audit_log ORDER BY n')).map((r) => ({
    eventId: String(r.event_id),
    accountId: String(r.account_id),
    version: Number(r.aggregate_version),
  }));
  const auditRows = groupBy(audit, (r) => r.eventId);
  for (const id of expectedIds) {
    const n = auditRows.get(id)?.length ?? 0;
    if (n === 0) v('lost', `event ${id} has no audit row`);
    if (n > 1) v('duplicatedEffects', `event ${id} has ${n} audit rows`);
  }
  for (const id of auditRows.keys()) {
    const row = outboxById.get(id);
    if (!row) v('phantoms', `audit row for unknown event ${id}`);
    else if (parked.has(row.aggregateId)) v('orderViolations', `audit row for event ${id} of poison account ${row.aggregateId}`);
  }
  for (const [id, rows] of groupBy(audit, (r) => r.accountId)) {
    if (rows.some((r, i) => i > 0 && r.version <= rows[i - 1]!.version))
      v('orderViolations', `account ${id}: audited versions [${rows.map((r) => r.version).join(', ')}] in applied order`);
  }

  // balances: per owner, what the accounts table implies
  type Counters = { opened: number; closed: number; credited: number };
  const expected = new Map<string, Counters>();
  for (const [id, a] of accounts) {
    if (parked.has(id)) continue;
    const e = expected.get(a.owner) ?? { opened: 0, closed: 0, credited: 0 };
    e.opened++;
    if (a.status === 'closed') e.closed++;
    e.credited += a.balance;
    expected.set(a.owner, e);
  }
  const balances = new Map(
    (await readAll(input.subscriberDbUrls.balances, 'SELECT owner, accounts_opened, accounts_closed, credited_cents FROM owner_balances')).map((r) => [
      String(r.owner),
      { opened: Number(r.accounts_opened), closed: Number(r.accounts_closed), credited: Number(r.credited_cents) } satisfies Counters,
    ]),
  );
  const zero: Counters = { opened: 0, closed: 0, credited: 0 };
  for (const owner of new Set([...expected.keys(), ...balances.keys()])) {
    const want = expected.get(owner) ?? zero;
    const got = balances.get(owner) ?? zero;
    if (got.opened !== want.opened || got.closed !== want.closed || got.credited !== want.credited) {
      const kind = got.opened > want.opened || got.closed > want.closed || got.credited > want.credited ? 'duplicatedEffects' : 'lost';
      v(kind, `balances of ${owner}: ${JSON.stringify(got)}, accounts imply ${JSON.stringify(want)}`);
    }
  }
  return { counts, violations };
}
