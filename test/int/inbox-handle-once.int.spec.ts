import { sql } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { applyToCustomerReport, readCustomerReport, reporting } from '../../src/consumers/reporting/reporting.ts';
import { createAppRegistry } from '../../src/events/catalog.ts';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { listDeadLetters } from '../../src/inbox/dead-letters.ts';
import { createInboxDeps, handleBatch, handleOnce } from '../../src/inbox/handle-once.ts';
import type { InboxMessage } from '../../src/inbox/inbox-message.ts';
import type { Subscriber } from '../../src/inbox/subscriber.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { countRows, createSubscriberDb, placedEvent, type SubscriberDb } from '../support/consumer.ts';

// handleOnce takes a plain message (what the runner copies out of a JetStream delivery), so its outcome contract
// is checked here against a real database without a broker; the broker paths are in inbox.int.spec.ts.

const dbs: SubscriberDb[] = [];
afterEach(() => {
  for (const d of dbs.splice(0)) d.close();
});

function asMessage(event: IntegrationEvent, deliveryCount = 1): InboxMessage {
  // the relay's subject: one per aggregate
  return { subject: `events.order.${event.aggregateId}`, headers: { 'Nats-Msg-Id': event.eventId }, payload: JSON.stringify(event), deliveryCount, fallbackId: event.eventId };
}

async function setup(subscriber: Subscriber = reporting, maxDeliver = 3) {
  const sdb = await createSubscriberDb();
  dbs.push(sdb);
  const metrics = createMetrics();
  const deps = createInboxDeps(subscriber, { writer: sdb.writer, registry: createAppRegistry(), metrics, maxDeliver });
  return { sdb, deps, metrics };
}

describe('handleOnce - outcomes', () => {
  it('returns processed for a new event and duplicate for any later copy, applying it once', async () => {
    const { sdb, deps } = await setup();
    const e = placedEvent({ customerId: 'h1', totalCents: 40 });

    expect(await handleOnce(deps, asMessage(e))).toEqual({ outcome: 'processed', eventId: e.eventId });
    expect(await handleOnce(deps, asMessage(e, 2))).toEqual({ outcome: 'duplicate', eventId: e.eventId });
    expect(await handleOnce(deps, asMessage(e, 1))).toEqual({ outcome: 'duplicate', eventId: e.eventId });

    expect(await readCustomerReport(sdb.db, 'h1')).toMatchObject({ ordersPlaced: 1, totalCents: 40 });
    expect(deps.metrics.processed.get({ consumer: 'reporting' })).toBe(1);
    expect(deps.metrics.duplicates.get({ consumer: 'reporting' })).toBe(2);
  });

  it('asks for a retry while deliveries remain, leaving no inbox row, and dead-letters on the max_deliver-th failure', async () => {
    const failing: Subscriber = {
      name: 'failing',
      aggregateTypes: ['order'],
      async handle(tx, event) {
        await applyToCustomerReport(tx, event);
        throw new Error('downstream unavailable');
      },
    };
    const { sdb, deps } = await setup(failing, 3);
    const e = placedEvent({ customerId: 'h2' });

    expect(await handleOnce(deps, asMessage(e, 1))).toMatchObject({ outcome: 'retry', error: 'downstream unavailable' });
    expect(await handleOnce(deps, asMessage(e, 2))).toMatchObject({ outcome: 'retry' });
    expect(await countRows(sdb.client, 'inbox')).toBe(0);
    expect(await countRows(sdb.client, 'customer_reports')).toBe(0);

    const last = await handleOnce(deps, asMessage(e, 3));
    expect(last).toMatchObject({ outcome: 'dead-lettered', eventId: e.eventId });
    expect(last.outcome === 'dead-lettered' && last.error).toBe('failed on 3 deliveries (max_deliver 3); last error: downstream unavailable');
    expect(await listDeadLetters(sdb.db, 'failing')).toMatchObject([{ eventId: e.eventId, deliveries: 3 }]);
    expect(await countRows(sdb.client, 'inbox')).toBe(0);
    expect(await countRows(sdb.client, 'customer_reports')).toBe(0);
  });
});

describe('handleBatch - one write per batch', () => {
  it('retries only the message whose handler threw, commits the rest in order, and treats a second copy within the batch as a duplicate', async () => {
    const applied: string[] = [];
    const bad = placedEvent({ customerId: 'b-bad' });
    const recording: Subscriber = {
      name: 'recording',
      aggregateTypes: ['order'],
      async handle(tx, event) {
        await applyToCustomerReport(tx, event);
        if (event.eventId === bad.eventId) throw new Error('bad order');
        applied.push(event.eventId);
      },
    };
    const { sdb, deps } = await setup(recording);
    const a = placedEvent({ customerId: 'b-ok', totalCents: 1 });
    const b = placedEvent({ customerId: 'b-ok', totalCents: 2 });
    const c = placedEvent({ customerId: 'b-ok', totalCents: 4 });

    const results = await handleBatch(deps, [asMessage(a), asMessage(bad), asMessage(b), asMessage(a), 'not json', asMessage(c)].map((m) =>
      typeof m === 'string' ? { subject: 'events.order.x', headers: {}, payload: m, deliveryCount: 1, fallbackId: 'seq-9' } : m,
    ));

    expect(results.map((r) => r.outcome)).toEqual(['processed', 'retry', 'processed', 'duplicate', 'dead-lettered', 'processed']);
    expect(results[4]!.eventId).toBe('seq-9');
    // `a` ran in the rolled-back first attempt too; what counts is what committed, in delivery order
    expect(applied.slice(-3)).toEqual([a.eventId, b.eventId, c.eventId]);
    expect(await readCustomerReport(sdb.db, 'b-ok')).toMatchObject({ ordersPlaced: 3, totalCents: 7 });
    expect(await readCustomerReport(sdb.db, 'b-bad')).toMatchObject({ ordersPlaced: 0 });
    const inbox = await sdb.client.execute('SELECT event_id FROM inbox ORDER BY event_id');
    expect(inbox.rows.map((r) => r.event_id)).toEqual([a.eventId, b.eventId, c.eventId].sort());
    expect(await listDeadLetters(sdb.db, 'recording')).toMatchObject([{ eventId: 'seq-9', payload: 'not json' }]);
  });
});

describe('handleBatch - order and infrastructure failures', () => {
  it("defers the later messages of a failing message's aggregate so none overtakes it, and commits the other aggregates", async () => {
    const a1 = placedEvent({ customerId: 'ord-cust', orderId: 'order-a' });
    const a2 = placedEvent({ customerId: 'ord-cust', orderId: 'order-a' });
    const a3 = placedEvent({ customerId: 'ord-cust', orderId: 'order-a' });
    const b1 = placedEvent({ customerId: 'ord-cust', orderId: 'order-b' });
    const failing: Subscriber = {
      name: 'failing-first',
      aggregateTypes: ['order'],
      async handle(tx, event) {
        await applyToCustomerReport(tx, event);
        if (event.eventId === a1.eventId) throw new Error('not yet');
      },
    };
    const { sdb, deps } = await setup(failing, 3);

    const results = await handleBatch(deps, [a1, b1, a2, a3].map((e) => asMessage(e)));

    expect(results.map((r) => r.outcome)).toEqual(['retry', 'processed', 'deferred', 'deferred']);
    const inbox = await sdb.client.execute('SELECT event_id FROM inbox');
    expect(inbox.rows.map((r) => r.event_id)).toEqual([b1.eventId]);
    expect(await readCustomerReport(sdb.db, 'ord-cust')).toMatchObject({ ordersPlaced: 1 });
  });

  it("rejects without charging any message when the handler's own statement finds the disk full, and commits the same batch once there is room", async () => {
    let fill = true;
    const filling: Subscriber = {
      name: 'filling',
      aggregateTypes: ['order'],
      async handle(tx, event) {
        await applyToCustomerReport(tx, event);
        if (!fill) return;
        // the database may not grow any more: the next page it needs is a full disk (SQLITE_FULL)
        const [row] = await tx.all<{ pages: number }>(sql`SELECT page_count AS pages FROM pragma_page_count()`);
        await tx.run(sql.raw(`PRAGMA max_page_count = ${row!.pages}`));
        await tx.run(sql`INSERT INTO dead_letters (event_id, consumer, subject, payload, error, deliveries, dead_at) VALUES ('filler', 'x', 's', zeroblob(200000), 'e', 1, 0)`);
      },
    };
    // max_deliver 1: had the full disk counted as a handler failure, the event would be dead-lettered at once
    const { sdb, deps } = await setup(filling, 1);
    const e = placedEvent({ customerId: 'full-cust', totalCents: 5 });

    await expect(handleBatch(deps, [asMessage(e)])).rejects.toMatchObject({ cause: { code: 'SQLITE_FULL' } });
    expect(await countRows(sdb.client, 'inbox')).toBe(0);
    expect(await countRows(sdb.client, 'dead_letters')).toBe(0);

    fill = false;
    sdb.client.reconnect(); // room again: the connection that was capped is gone
    expect(await handleBatch(deps, [asMessage(e)])).toEqual([{ outcome: 'processed', eventId: e.eventId }]);
    expect(await readCustomerReport(sdb.db, 'full-cust')).toMatchObject({ ordersPlaced: 1, totalCents: 5 });
    expect(await countRows(sdb.client, 'dead_letters')).toBe(0);
  });
});
