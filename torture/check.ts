import { createClient } from '@libsql/client';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type { LedgerEntry } from './load.ts';

export type CheckInput = {
  apiDbUrl: string;
  subscriberDbUrls: { reporting: string; notifications: string };
  natsUrl: string;
  stream: string;
  ledger: LedgerEntry[];
  /**
   * Orders whose placed event is a deliberate poison row (larger than the stream accepts): it must end parked
   * (`failed`), every later event of the order still `pending` behind it, and none of them on the stream or
   * applied by a subscriber.
   */
  parkedOrders?: string[];
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

type StreamEvent = { seq: number; msgId: string; subject: string; eventId: string; type: string; aggregateId: string; aggregateVersion: number };

async function readAll(url: string, sql: string) {
  const c = createClient({ url });
  try {
    return (await c.execute(sql)).rows;
  } finally {
    c.close();
  }
}

async function readStreamEvents(natsUrl: string, stream: string): Promise<StreamEvent[]> {
  const nc = await connect({ servers: [natsUrl] });
  try {
    const jsm = await jetstreamManager(nc);
    const info = await jsm.streams.info(stream);
    const out: StreamEvent[] = [];
    for (let seq = info.state.first_seq; info.state.messages > 0 && seq <= info.state.last_seq; seq++) {
      const m = await jsm.streams.getMessage(stream, { seq }).catch(() => null);
      if (!m) continue;
      const e = m.json<{ eventId: string; type: string; aggregateId: string; aggregateVersion: number }>();
      out.push({ seq: m.seq, msgId: m.header?.get('Nats-Msg-Id') ?? '', subject: m.subject, eventId: e.eventId, type: e.type, aggregateId: e.aggregateId, aggregateVersion: e.aggregateVersion });
    }
    return out;
  } finally {
    await nc.close();
  }
}

/**
 * Checks the end state against the ledger: every acknowledged command is wholly present, every unknown one is
 * wholly present or wholly absent, every committed event is in the stream once and applied once per
 * subscriber, nothing exists that no committed command explains, and per-aggregate stream order follows
 * commit order.
 */
export async function checkRun(input: CheckInput): Promise<CheckReport> {
  const violations: string[] = [];
  const v = (kind: keyof CheckReport['counts'], msg: string) => {
    counts[kind]++;
    if (violations.length < 50) violations.push(`${kind}: ${msg}`);
  };
  const counts: CheckReport['counts'] = {
    acknowledged: 0, rejected: 0, unknownPresent: 0, unknownAbsent: 0, lost: 0, duplicatedEffects: 0, phantoms: 0, orderViolations: 0, pendingOutbox: 0, failedOutbox: 0, inboxGaps: 0, deadLetters: 0,
  };

  const orders = new Map((await readAll(input.apiDbUrl, 'SELECT id, customer_id, status, total_cents FROM orders')).map((r) => [String(r.id), { customer: String(r.customer_id), status: String(r.status), total: Number(r.total_cents) }]));
  const outbox = (await readAll(input.apiDbUrl, 'SELECT seq, id, aggregate_id, message_type, status FROM outbox ORDER BY seq')).map((r) => ({ seq: Number(r.seq), id: String(r.id), aggregateId: String(r.aggregate_id), type: String(r.message_type), status: String(r.status) }));
  const keys = new Map((await readAll(input.apiDbUrl, 'SELECT key, response_body FROM idempotency_keys')).map((r) => [String(r.key), JSON.parse(String(r.response_body)) as { orderId?: string; status?: string }]));
  const stream = await readStreamEvents(input.natsUrl, input.stream);

  const parked = new Set(input.parkedOrders ?? []);
  for (const id of parked) {
    const rows = outbox.filter((r) => r.aggregateId === id).map((r) => r.status);
    if (rows[0] !== 'failed' || rows.slice(1).some((s) => s !== 'pending')) v('orderViolations', `poison order ${id}: outbox statuses [${rows.join(', ')}], expected failed then pending`);
  }
  counts.pendingOutbox = outbox.filter((r) => r.status === 'pending' && !parked.has(r.aggregateId)).length;
  counts.failedOutbox = outbox.filter((r) => r.status === 'failed' && !parked.has(r.aggregateId)).length;
  if (counts.pendingOutbox) violations.push(`outbox: ${counts.pendingOutbox} rows still pending`);
  if (counts.failedOutbox) violations.push(`outbox: ${counts.failedOutbox} rows failed`);

  // ledger: acknowledged, rejected, unknown → present / absent
  for (const e of input.ledger) {
    if (e.outcome === 'ack') counts.acknowledged++;
    else if (e.outcome === 'rejected') counts.rejected++;
    const stored = keys.get(e.key);
    if (e.outcome === 'ack' && !stored) v('lost', `acknowledged ${e.kind} #${e.n} (${e.key}) has no committed key row`);
    if (e.outcome === 'ack' && e.path === '/orders' && e.orderId && !orders.has(e.orderId)) v('lost', `acknowledged order ${e.orderId} is missing`);
    if (e.outcome === 'ack' && e.path.endsWith('/cancel') && e.orderId && orders.get(e.orderId)?.status !== 'cancelled') v('lost', `acknowledged cancel of ${e.orderId} is not applied`);
    if (e.outcome === 'rejected' && e.kind !== 'retry' && stored) v('phantoms', `rejected ${e.kind} #${e.n} has a committed key row`);
    if (e.outcome === 'unknown') {
      if (stored) counts.unknownPresent++;
      else counts.unknownAbsent++;
    }
  }

  // every order is explained by exactly one committed place request; every cancelled order by a cancel
  const orderKeys = new Map<string, number>();
  for (const [key, body] of keys) if (key.startsWith('place-') && body.orderId) orderKeys.set(body.orderId, (orderKeys.get(body.orderId) ?? 0) + 1);
  for (const id of orders.keys()) if (orderKeys.get(id) !== 1) v('phantoms', `order ${id} is explained by ${orderKeys.get(id) ?? 0} committed place requests`);
  for (const id of orderKeys.keys()) if (!orders.has(id)) v('lost', `committed place request names order ${id}, which is missing`);

  // outbox: exactly one placed event per order, one cancelled event per cancelled order, nothing else
  const eventsByOrder = new Map<string, typeof outbox>();
  for (const r of outbox) eventsByOrder.set(r.aggregateId, [...(eventsByOrder.get(r.aggregateId) ?? []), r]);
  for (const [id, o] of orders) {
    const evs = eventsByOrder.get(id) ?? [];
    const expected = o.status === 'cancelled' ? ['order.placed.v1', 'order.cancelled.v1'] : ['order.placed.v1'];
    if (evs.map((e) => e.type).join() !== expected.join()) v(evs.length > expected.length ? 'phantoms' : 'lost', `order ${id} (${o.status}) has outbox events [${evs.map((e) => e.type).join(', ')}]`);
  }
  for (const id of eventsByOrder.keys()) if (!orders.has(id)) v('phantoms', `outbox events for unknown order ${id}`);

  // stream: one copy per outbox row, nothing else; per aggregate in commit order
  const outboxIds = new Set(outbox.map((r) => r.id));
  const seen = new Map<string, number>();
  for (const m of stream) {
    seen.set(m.msgId, (seen.get(m.msgId) ?? 0) + 1);
    if (!outboxIds.has(m.msgId) || m.msgId !== m.eventId) v('phantoms', `stream message ${m.seq} (${m.msgId}) has no outbox row`);
  }
  for (const [id, n] of seen) if (n > 1) v('duplicatedEffects', `event ${id} is ${n} times in the stream`);
  for (const r of outbox) {
    if (parked.has(r.aggregateId)) {
      if (seen.has(r.id)) v('orderViolations', `event ${r.id} (${r.type}) of poison order ${r.aggregateId} reached the stream`);
    } else if (!seen.has(r.id)) v('lost', `outbox row ${r.id} (${r.type}) is not in the stream`);
  }
  const lastVersion = new Map<string, number>();
  for (const m of stream) {
    const prev = lastVersion.get(m.aggregateId) ?? 0;
    if (m.aggregateVersion <= prev) v('orderViolations', `aggregate ${m.aggregateId}: version ${m.aggregateVersion} after ${prev} in the stream`);
    lastVersion.set(m.aggregateId, Math.max(prev, m.aggregateVersion));
  }

  // subscribers: inbox == outbox ids, effects agree, no dead letters
  for (const [name, url] of Object.entries(input.subscriberDbUrls)) {
    const inbox = new Set((await readAll(url, `SELECT event_id FROM inbox WHERE consumer = '${name}'`)).map((r) => String(r.event_id)));
    for (const r of outbox) if (!parked.has(r.aggregateId) && !inbox.has(r.id)) v('inboxGaps', `${name} has no inbox row for event ${r.id}`);
    for (const id of inbox) if (!outboxIds.has(id)) v('phantoms', `${name} applied unknown event ${id}`);
    const dead = await readAll(url, 'SELECT event_id, error FROM dead_letters');
    counts.deadLetters += dead.length;
    for (const d of dead) violations.push(`dead letter in ${name}: ${String(d.event_id)} ${String(d.error).slice(0, 120)}`);
  }

  const emails = new Map<string, number>();
  for (const r of await readAll(input.subscriberDbUrls.notifications, 'SELECT order_id FROM notification_emails')) emails.set(String(r.order_id), (emails.get(String(r.order_id)) ?? 0) + 1);
  for (const id of orders.keys()) {
    const n = emails.get(id) ?? 0;
    if (parked.has(id)) {
      if (n > 0) v('orderViolations', `poison order ${id} has a notification email`);
      continue;
    }
    if (n === 0) v('lost', `order ${id} has no notification email`);
    if (n > 1) v('duplicatedEffects', `order ${id} has ${n} notification emails`);
  }
  for (const id of emails.keys()) if (!orders.has(id)) v('phantoms', `email for unknown order ${id}`);

  const expected = new Map<string, { placed: number; cancelled: number; total: number }>();
  for (const [id, o] of orders) {
    if (parked.has(id)) continue;
    const e = expected.get(o.customer) ?? { placed: 0, cancelled: 0, total: 0 };
    e.placed++;
    if (o.status === 'cancelled') e.cancelled++;
    else e.total += o.total;
    expected.set(o.customer, e);
  }
  const reports = new Map((await readAll(input.subscriberDbUrls.reporting, 'SELECT customer_id, orders_placed, orders_cancelled, total_cents FROM customer_reports')).map((r) => [String(r.customer_id), { placed: Number(r.orders_placed), cancelled: Number(r.orders_cancelled), total: Number(r.total_cents) }]));
  for (const customer of new Set([...expected.keys(), ...reports.keys()])) {
    const want = expected.get(customer) ?? { placed: 0, cancelled: 0, total: 0 };
    const got = reports.get(customer) ?? { placed: 0, cancelled: 0, total: 0 };
    if (got.placed !== want.placed || got.cancelled !== want.cancelled || got.total !== want.total) {
      const kind = got.placed > want.placed || got.cancelled > want.cancelled ? 'duplicatedEffects' : got.placed < want.placed || got.cancelled < want.cancelled ? 'lost' : 'phantoms';
      v(kind, `report of ${customer}: ${JSON.stringify(got)}, orders imply ${JSON.stringify(want)}`);
    }
  }
  return { counts, violations };
}
