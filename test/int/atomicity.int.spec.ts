import { createClient, type Client } from '@libsql/client';
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import { afterEach, describe, expect, it } from 'vitest';
import type { Tx } from '../../src/db/open-database.ts';
import type { Deps } from '../../src/deps.ts';
import { createAppRegistry } from '../../src/events/catalog.ts';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { createEventRegistry, InvalidEventError, UnknownEventTypeError } from '../../src/events/registry.ts';
import { cancelOrder } from '../../src/orders/cancel-order.ts';
import type { PlaceOrder } from '../../src/orders/order.ts';
import { orderEventSchemas } from '../../src/orders/order-events.ts';
import { placeOrder } from '../../src/orders/place-order.ts';
import { appendToOutbox } from '../../src/outbox/append-to-outbox.ts';
import { createTestApp, createTestDb, tableCounts, type TestDb } from '../support/db.ts';

const EMPTY = { orders: 0, order_lines: 0, outbox: 0, idempotency_keys: 0 };
const T0 = Date.parse('2026-03-01T10:00:00.000Z');

const cmd = (customerId = 'cust-1'): PlaceOrder => ({
  customerId,
  currency: 'EUR',
  items: [
    { sku: 'sku-1', quantity: 2, unitPriceCents: 1250 },
    { sku: 'sku-2', quantity: 1, unitPriceCents: 499 },
  ],
});

/** A clock that advances 1 ms per call, so every command has its own, predictable time. */
function steppingClock(start = T0): () => Date {
  let t = start;
  return () => new Date(t++);
}

/** A registry whose schema for `type` rejects every payload. */
function registryRejecting(type: string) {
  return createEventRegistry({ ...orderEventSchemas, [type]: z.never() });
}

type OutboxRow = {
  seq: number;
  id: string;
  aggregate_type: string;
  aggregate_id: string;
  message_type: string;
  payload: string;
  headers: string;
  status: string;
  attempts: number;
  last_error: string | null;
  occurred_at: number;
  available_at: number;
  sent_at: number | null;
};

async function outboxRows(client: Client): Promise<OutboxRow[]> {
  const rs = await client.execute('SELECT * FROM outbox ORDER BY seq');
  return rs.rows.map((r) => ({ ...r }) as unknown as OutboxRow);
}

const dbs: TestDb[] = [];
const clients: Client[] = [];
async function testDb(overrides: Partial<Deps> = {}): Promise<TestDb> {
  const t = await createTestDb(overrides);
  dbs.push(t);
  return t;
}
/** A second connection to the same file: it sees only committed data. */
function otherConnection(t: TestDb): Client {
  const c = createClient({ url: t.url, timeout: 5000 });
  clients.push(c);
  return c;
}

afterEach(() => {
  for (const c of clients.splice(0)) c.close();
  for (const t of dbs.splice(0)) t.close();
});

describe('atomicity - a failure inside the transaction', () => {
  it('a placed event rejected by the registry leaves neither the order, its lines nor any outbox row', async () => {
    const t = await testDb({ registry: registryRejecting('order.placed.v1') });
    await expect(t.deps.writer.write((tx) => placeOrder(tx, t.deps, cmd()))).rejects.toBeInstanceOf(InvalidEventError);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it('a failure after the outbox insert leaves neither the order nor its events', async () => {
    const t = await testDb();
    let seenInside = -1;
    const write = t.deps.writer.write(async (tx) => {
      await placeOrder(tx, t.deps, cmd());
      // Prove the injection point really is after the outbox insert.
      seenInside = Number((await tx.all<{ n: number }>(sql`SELECT count(*) AS n FROM outbox`))[0]!.n);
      throw new Error('boom');
    });
    await expect(write).rejects.toThrow('boom');
    expect(seenInside).toBe(1);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it('a cancelled event rejected by the registry leaves the order placed at version 1 with only its placed event', async () => {
    const t = await testDb();
    const order = await t.deps.writer.write((tx) => placeOrder(tx, t.deps, cmd()));
    const rejecting = { ...t.deps, registry: registryRejecting('order.cancelled.v1') };
    await expect(
      t.deps.writer.write((tx) => cancelOrder(tx, rejecting, { orderId: order.id, reason: 'no' })),
    ).rejects.toBeInstanceOf(InvalidEventError);
    const row = (await t.client.execute({ sql: 'SELECT status, version, cancelled_at FROM orders WHERE id = ?', args: [order.id] })).rows[0]!;
    expect({ ...row }).toEqual({ status: 'placed', version: 1, cancelled_at: null });
    expect((await outboxRows(t.client)).map((r) => r.message_type)).toEqual(['order.placed.v1']);
  });

  it('an HTTP command whose event is rejected answers a problem and stores nothing', async () => {
    const t = await createTestApp({ registry: registryRejecting('order.placed.v1') });
    dbs.push(t);
    const res = await t.app.request('/orders', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': 'k-1' },
      body: JSON.stringify(cmd()),
    });
    expect(res.status).toBe(500);
    expect(res.headers.get('content-type')).toBe('application/problem+json');
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });
});

describe('atomicity - a successful command', () => {
  it('stores the order and exactly its outbox row: pending, attempts 0, payload = the integration event with eventId = outbox id', async () => {
    const t = await testDb({ clock: () => new Date(T0) });
    const order = await t.deps.writer.write((tx) => placeOrder(tx, t.deps, cmd()));
    expect(await tableCounts(t.client)).toEqual({ orders: 1, order_lines: 2, outbox: 1, idempotency_keys: 0 });

    const [row] = await outboxRows(t.client);
    expect(row).toMatchObject({
      aggregate_type: 'order',
      aggregate_id: order.id,
      message_type: 'order.placed.v1',
      headers: '{}',
      status: 'pending',
      attempts: 0,
      last_error: null,
      occurred_at: T0,
      available_at: T0,
      sent_at: null,
    });
    expect(JSON.parse(row!.payload)).toEqual({
      eventId: row!.id,
      type: 'order.placed.v1',
      aggregateType: 'order',
      aggregateId: order.id,
      aggregateVersion: 1,
      occurredAt: new Date(T0).toISOString(),
      data: {
        orderId: order.id,
        customerId: 'cust-1',
        currency: 'EUR',
        items: cmd().items,
        totalCents: 2 * 1250 + 499,
        placedAt: new Date(T0).toISOString(),
      },
    });
    // The stored payload is exactly what the registry accepts (the relay will re-validate it).
    expect(() => createAppRegistry().parse(JSON.parse(row!.payload))).not.toThrow();
  });

  it('numbers outbox rows in commit order, with aggregate versions 1 then 2 for placed then cancelled', async () => {
    const t = await testDb({ clock: steppingClock() });
    const a = await t.deps.writer.write((tx) => placeOrder(tx, t.deps, cmd('a')));
    const b = await t.deps.writer.write((tx) => placeOrder(tx, t.deps, cmd('b')));
    const cancelled = await t.deps.writer.write((tx) => cancelOrder(tx, t.deps, { orderId: a.id, reason: 'changed mind' }));
    expect(cancelled.outcome).toBe('cancelled');
    const c = await t.deps.writer.write((tx) => placeOrder(tx, t.deps, cmd('c')));

    const rows = await outboxRows(t.client);
    expect(rows.map((r) => [r.aggregate_id, r.message_type])).toEqual([
      [a.id, 'order.placed.v1'],
      [b.id, 'order.placed.v1'],
      [a.id, 'order.cancelled.v1'],
      [c.id, 'order.placed.v1'],
    ]);
    const seqs = rows.map((r) => r.seq);
    expect(seqs).toEqual([...seqs].sort((x, y) => x - y));
    expect(new Set(seqs).size).toBe(seqs.length);

    const ofA = rows.filter((r) => r.aggregate_id === a.id).map((r) => JSON.parse(r.payload));
    expect(ofA.map((e) => [e.type, e.aggregateVersion])).toEqual([
      ['order.placed.v1', 1],
      ['order.cancelled.v1', 2],
    ]);
    expect(ofA[1]).toMatchObject({
      eventId: rows[2]!.id,
      data: { orderId: a.id, customerId: 'a', reason: 'changed mind', totalCents: 2999 },
    });
    for (const r of rows) expect(r).toMatchObject({ status: 'pending', attempts: 0 });
    expect(new Set(rows.map((r) => r.id)).size).toBe(rows.length);

    const stored = (await t.client.execute({ sql: 'SELECT status, version FROM orders WHERE id = ?', args: [a.id] })).rows[0]!;
    expect({ ...stored }).toEqual({ status: 'cancelled', version: 2 });
  });

  it('carries a valid traceparent and correlation id from the request into the outbox headers', async () => {
    const t = await createTestApp();
    dbs.push(t);
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const res = await t.app.request('/orders', {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent, 'x-correlation-id': 'corr-42' },
      body: JSON.stringify(cmd()),
    });
    expect(res.status).toBe(201);
    const [row] = await outboxRows(t.client);
    expect(JSON.parse(row!.headers)).toEqual({ traceparent, correlationId: 'corr-42' });
  });

  it('outbox rows stay invisible to other connections until the transaction commits', async () => {
    const t = await testDb();
    const other = otherConnection(t);
    let seenOutside = -1;
    await t.deps.writer.write(async (tx) => {
      await placeOrder(tx, t.deps, cmd());
      seenOutside = Number((await other.execute('SELECT count(*) FROM outbox')).rows[0]![0]);
    });
    expect(seenOutside).toBe(0);
    expect(Number((await other.execute('SELECT count(*) FROM outbox')).rows[0]![0])).toBe(1);
  });
});

describe('atomicity - appendToOutbox refuses what cannot be published', () => {
  const valid = (over: Partial<IntegrationEvent> = {}): IntegrationEvent => ({
    eventId: crypto.randomUUID(),
    type: 'order.cancelled.v1',
    aggregateType: 'order',
    aggregateId: 'order-1',
    aggregateVersion: 2,
    occurredAt: '2026-03-01T10:00:00.000Z',
    data: { orderId: 'order-1', customerId: 'c', reason: null, totalCents: 10, cancelledAt: '2026-03-01T10:00:00.000Z' },
    ...over,
  });

  async function append(t: TestDb, events: IntegrationEvent[]): Promise<void> {
    await t.deps.writer.write((tx: Tx) => appendToOutbox(tx, events, { registry: t.deps.registry, now: new Date(T0) }));
  }

  it('stores a valid event (the baseline the refusals below differ from)', async () => {
    const t = await testDb();
    await append(t, [valid()]);
    expect((await tableCounts(t.client)).outbox).toBe(1);
  });

  it('refuses an unregistered type and stores nothing', async () => {
    const t = await testDb();
    await expect(append(t, [valid({ type: 'order.shipped.v1' })])).rejects.toBeInstanceOf(UnknownEventTypeError);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it('refuses a payload that fails its registered schema and stores nothing', async () => {
    const t = await testDb();
    await expect(append(t, [valid({ data: { orderId: 'order-1' } })])).rejects.toBeInstanceOf(InvalidEventError);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it.each([
    ['a dot', 'order.1'],
    ['a star', 'order*'],
    ['a greater-than', 'order>'],
    ['a space', 'order 1'],
    ['a tab', 'order\t1'],
    ['a newline', 'order\n1'],
    ['a control character', 'order\u00011'],
    ['an empty string', ''],
  ])('refuses an aggregate id containing %s and stores nothing', async (_label, aggregateId) => {
    const t = await testDb();
    await expect(append(t, [valid({ aggregateId })])).rejects.toBeInstanceOf(InvalidEventError);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it('refuses an aggregate type that is not a subject token', async () => {
    const t = await testDb();
    await expect(append(t, [valid({ aggregateType: 'order.v1' })])).rejects.toBeInstanceOf(InvalidEventError);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it('refuses the whole batch when one event of it is bad', async () => {
    const t = await testDb();
    await expect(append(t, [valid(), valid({ aggregateId: 'x>y' })])).rejects.toBeInstanceOf(InvalidEventError);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });
});

describe('atomicity - group-commit writer', () => {
  it('concurrent writes where one throws: the others commit, the thrower is rolled back, each promise gets its own result', async () => {
    const t = await testDb();
    const other = otherConnection(t);
    const visibleOutsideWhileGrouped: number[] = [];
    const boom = new Error('boom in job 2');
    const jobs = [0, 1, 2, 3, 4].map((i) =>
      t.deps.writer.write(async (tx) => {
        const order = await placeOrder(tx, t.deps, cmd(`cust-${i}`));
        // Queued in the same tick, the jobs share one transaction: earlier jobs are not yet visible outside.
        visibleOutsideWhileGrouped.push(Number((await other.execute('SELECT count(*) FROM orders')).rows[0]![0]));
        if (i === 2) throw boom;
        return { i, id: order.id };
      }),
    );
    const settled = await Promise.allSettled(jobs);

    // the group ran optimistically up to the thrower, rolled back, and ran again with a savepoint per job
    expect(visibleOutsideWhileGrouped).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);
    expect(settled.map((s) => s.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
    expect((settled[2] as PromiseRejectedResult).reason).toBe(boom);
    const ok = settled.filter((s) => s.status === 'fulfilled').map((s) => (s as PromiseFulfilledResult<{ i: number; id: string }>).value);
    expect(ok.map((v) => v.i)).toEqual([0, 1, 3, 4]);

    const orders = (await other.execute('SELECT id, customer_id FROM orders ORDER BY customer_id')).rows.map((r) => [r[0], r[1]]);
    expect(orders).toEqual(ok.map((v) => [v.id, `cust-${v.i}`]));
    const outbox = (await other.execute('SELECT aggregate_id FROM outbox ORDER BY seq')).rows.map((r) => r[0]);
    expect(outbox).toEqual(ok.map((v) => v.id));
    expect(await tableCounts(t.client)).toEqual({ orders: 4, order_lines: 8, outbox: 4, idempotency_keys: 0 });
  });

  it('answers a grouped write only after its commit is visible to other connections', async () => {
    const t = await testDb();
    const other = otherConnection(t);
    const seenAtResolve = await Promise.all(
      [0, 1, 2].map(async (i) => {
        const order = await t.deps.writer.write((tx) => placeOrder(tx, t.deps, cmd(`c${i}`)));
        const rs = await other.execute({ sql: 'SELECT count(*) FROM outbox WHERE aggregate_id = ?', args: [order.id] });
        return Number(rs.rows[0]![0]);
      }),
    );
    expect(seenAtResolve).toEqual([1, 1, 1]);
  });

  it('a write queued after a failed one still commits', async () => {
    const t = await testDb();
    await expect(t.deps.writer.write(async () => Promise.reject(new Error('first fails')))).rejects.toThrow('first fails');
    await t.deps.writer.write((tx) => placeOrder(tx, t.deps, cmd()));
    await t.deps.writer.idle();
    expect((await tableCounts(t.client)).orders).toBe(1);
  });
});
