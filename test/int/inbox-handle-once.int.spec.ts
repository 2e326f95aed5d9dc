import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { registryOf } from '../../src/compose/define-modules.ts';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { listDeadLetters } from '../../src/inbox/dead-letters.ts';
import { createInboxDeps, handleBatch, handleOnce } from '../../src/inbox/handle-once.ts';
import type { InboxMessage } from '../../src/inbox/inbox-message.ts';
import { defineSubscriber, type Subscriber } from '../../src/inbox/subscriber.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { creditedEvent, openedEvent, testSubscriber } from '../support/accounts.ts';
import { createSubscriberDb } from '../support/consumer.ts';
import { countRows } from '../support/db.ts';
import { fixtureModules, type FixtureEvents } from '../support/fixture/modules.ts';
import { balances, readOwnerBalance } from '../support/fixture/subscribers/balances/subscriber.ts';

// handleOnce takes a plain message (what the runner copies out of a JetStream delivery), so its outcome contract
// is checked here against a real database without a broker; the broker paths are in inbox.int.spec.ts.

function asMessage(event: IntegrationEvent, deliveryCount = 1): InboxMessage {
  // the relay's subject: one per aggregate
  return {
    subject: `events.account.${event.aggregateId}`,
    headers: { 'Nats-Msg-Id': event.eventId },
    payload: JSON.stringify(event),
    deliveryCount,
    fallbackId: event.eventId,
  };
}

async function setup(subscriber: Subscriber = balances, maxDeliver = 3) {
  const sdb = await createSubscriberDb({ subscriber: 'balances' });
  const metrics = createMetrics();
  const deps = createInboxDeps(subscriber, { writer: sdb.writer, registry: registryOf(fixtureModules), metrics, maxDeliver });
  return { sdb, deps, [Symbol.dispose]: () => sdb.close() };
}

describe('handleOnce - outcomes', () => {
  it('returns processed for a new event and duplicate for any later copy, applying it once', async () => {
    using s = await setup();
    const e = creditedEvent({ owner: 'h1', amountCents: 40 });

    expect(await handleOnce(s.deps, asMessage(e))).toEqual({ outcome: 'processed', eventId: e.eventId });
    expect(await handleOnce(s.deps, asMessage(e, 2))).toEqual({ outcome: 'duplicate', eventId: e.eventId });
    expect(await handleOnce(s.deps, asMessage(e, 1))).toEqual({ outcome: 'duplicate', eventId: e.eventId });

    expect(await readOwnerBalance(s.sdb.db, 'h1')).toMatchObject({ creditedCents: 40 });
    expect(s.deps.metrics.processed.get({ consumer: 'balances' })).toBe(1);
    expect(s.deps.metrics.duplicates.get({ consumer: 'balances' })).toBe(2);
  });

  it('acknowledges a registered type the subscriber does not handle as ignored: no handler call, no inbox row, counted as ignored only', async () => {
    const handled: string[] = [];
    const openings = defineSubscriber<FixtureEvents>()({
      name: 'openings',
      on: { 'account.opened.v1': async (_tx, e) => void handled.push(e.data.owner) },
    });
    using s = await setup(openings);
    const credit = creditedEvent({ owner: 'ignored-owner' });

    expect(await handleOnce(s.deps, asMessage(credit))).toEqual({ outcome: 'ignored', eventId: credit.eventId });
    expect(await handleOnce(s.deps, asMessage(openedEvent({ owner: 'opened-owner' })))).toMatchObject({ outcome: 'processed' });
    expect(handled).toEqual(['opened-owner']);
    expect(await countRows(s.sdb.client, 'inbox')).toBe(1);
    expect(s.deps.metrics.processed.get({ consumer: 'openings' })).toBe(1);
    expect(s.deps.metrics.ignored.get({ consumer: 'openings' })).toBe(1);
  });

  it('asks for a retry while deliveries remain, leaving no inbox row, and dead-letters on the max_deliver-th failure', async () => {
    const failing = testSubscriber('failing', async (tx, event) => {
      await balances.handle(tx, event);
      throw new Error('downstream unavailable');
    });
    using s = await setup(failing, 3);
    const e = creditedEvent({ owner: 'h2' });

    expect(await handleOnce(s.deps, asMessage(e, 1))).toMatchObject({ outcome: 'retry', error: 'downstream unavailable' });
    expect(await handleOnce(s.deps, asMessage(e, 2))).toMatchObject({ outcome: 'retry' });
    expect(await countRows(s.sdb.client, 'inbox')).toBe(0);
    expect(await countRows(s.sdb.client, 'owner_balances')).toBe(0);

    const last = await handleOnce(s.deps, asMessage(e, 3));
    expect(last).toMatchObject({ outcome: 'dead-lettered', eventId: e.eventId });
    expect(last.outcome === 'dead-lettered' && last.error).toBe('failed on 3 deliveries (max_deliver 3); last error: downstream unavailable');
    expect(await listDeadLetters(s.sdb.db, 'failing')).toMatchObject([{ eventId: e.eventId, deliveries: 3 }]);
    expect(await countRows(s.sdb.client, 'inbox')).toBe(0);
    expect(await countRows(s.sdb.client, 'owner_balances')).toBe(0);
  });
});

describe('handleBatch - one write per batch', () => {
  it('retries only the message whose handler threw, commits the rest in order, and treats a second copy within the batch as a duplicate', async () => {
    const applied: string[] = [];
    const bad = creditedEvent({ owner: 'b-bad' });
    const recording = testSubscriber('recording', async (tx, event) => {
      await balances.handle(tx, event);
      if (event.eventId === bad.eventId) throw new Error('bad credit');
      applied.push(event.eventId);
    });
    using s = await setup(recording);
    const a = creditedEvent({ owner: 'b-ok', amountCents: 1 });
    const b = creditedEvent({ owner: 'b-ok', amountCents: 2 });
    const c = creditedEvent({ owner: 'b-ok', amountCents: 4 });
    const notJson: InboxMessage = { subject: 'events.account.x', headers: {}, payload: 'not json', deliveryCount: 1, fallbackId: 'seq-9' };

    const results = await handleBatch(s.deps, [asMessage(a), asMessage(bad), asMessage(b), asMessage(a), notJson, asMessage(c)]);

    expect(results.map((r) => r.outcome)).toEqual(['processed', 'retry', 'processed', 'duplicate', 'dead-lettered', 'processed']);
    expect(results[4]!.eventId).toBe('seq-9');
    // `a` ran in the rolled-back first attempt too; what counts is what committed, in delivery order
    expect(applied.slice(-3)).toEqual([a.eventId, b.eventId, c.eventId]);
    expect(await readOwnerBalance(s.sdb.db, 'b-ok')).toMatchObject({ creditedCents: 7 });
    expect(await readOwnerBalance(s.sdb.db, 'b-bad')).toMatchObject({ creditedCents: 0 });
    const inbox = await s.sdb.client.execute('SELECT event_id FROM inbox ORDER BY event_id');
    expect(inbox.rows.map((r) => r.event_id)).toEqual([a.eventId, b.eventId, c.eventId].sort());
    expect(await listDeadLetters(s.sdb.db, 'recording')).toMatchObject([{ eventId: 'seq-9', payload: 'not json' }]);
  });
});

describe('handleBatch - inbox claims', () => {
  it('applies each new event of a batch mixing types, events applied by an earlier batch and copies within itself once, and a batch of copies not at all', async () => {
    using s = await setup();
    const earlier = [openedEvent({ owner: 'm1' }), creditedEvent({ owner: 'm1', amountCents: 10 })];
    expect(
      (
        await handleBatch(
          s.deps,
          earlier.map((e) => asMessage(e)),
        )
      ).map((r) => r.outcome),
    ).toEqual(['processed', 'processed']);
    const credit = creditedEvent({ owner: 'm1', amountCents: 100 });
    const opening = openedEvent({ owner: 'm2' });

    // new and old interleaved in both types: the claim that finds some rows there already learns which ones
    const mixed = [asMessage(credit), asMessage(earlier[1]!, 2), asMessage(opening), asMessage(credit), asMessage(earlier[0]!, 2)];
    expect((await handleBatch(s.deps, mixed)).map((r) => r.outcome)).toEqual(['processed', 'duplicate', 'processed', 'duplicate', 'duplicate']);
    // nothing but copies: the claim that inserts no row applies nothing
    const copies = [...earlier, credit, opening].map((e) => asMessage(e, 3));
    expect((await handleBatch(s.deps, copies)).map((r) => r.outcome)).toEqual(['duplicate', 'duplicate', 'duplicate', 'duplicate']);

    expect(await readOwnerBalance(s.sdb.db, 'm1')).toMatchObject({ accountsOpened: 1, creditedCents: 110 });
    expect(await readOwnerBalance(s.sdb.db, 'm2')).toMatchObject({ accountsOpened: 1 });
    const rows = await s.sdb.client.execute('SELECT event_id, message_type FROM inbox ORDER BY event_id');
    expect(rows.rows.map((r) => [r.event_id, r.message_type])).toEqual(
      [...earlier, credit, opening].map((e) => [e.eventId, e.type]).sort((x, y) => (x[0]! < y[0]! ? -1 : 1)),
    );
    expect(s.deps.metrics.processed.get({ consumer: 'balances' })).toBe(4);
    expect(s.deps.metrics.duplicates.get({ consumer: 'balances' })).toBe(7);
  });
});

describe('handleBatch - order and infrastructure failures', () => {
  it("defers the later messages of a failing message's aggregate so none overtakes it, and commits the other aggregates", async () => {
    const a1 = openedEvent({ owner: 'ord-owner', accountId: 'account-a' });
    const a2 = creditedEvent({ owner: 'ord-owner', accountId: 'account-a' });
    const a3 = creditedEvent({ owner: 'ord-owner', accountId: 'account-a' });
    const b1 = openedEvent({ owner: 'ord-owner', accountId: 'account-b' });
    const failing = testSubscriber('failing-first', async (tx, event) => {
      await balances.handle(tx, event);
      if (event.eventId === a1.eventId) throw new Error('not yet');
    });
    using s = await setup(failing, 3);

    const results = await handleBatch(
      s.deps,
      [a1, b1, a2, a3].map((e) => asMessage(e)),
    );

    expect(results.map((r) => r.outcome)).toEqual(['retry', 'processed', 'deferred', 'deferred']);
    const inbox = await s.sdb.client.execute('SELECT event_id FROM inbox');
    expect(inbox.rows.map((r) => r.event_id)).toEqual([b1.eventId]);
    expect(await readOwnerBalance(s.sdb.db, 'ord-owner')).toMatchObject({ accountsOpened: 1, creditedCents: 0 });
  });

  it("rejects without charging any message when the handler's own statement finds the disk full, and commits the same batch once there is room", async () => {
    let fill = true;
    const filling = testSubscriber('filling', async (tx, event) => {
      await balances.handle(tx, event);
      if (!fill) return;
      // the database may not grow any more: the next page it needs is a full disk (SQLITE_FULL)
      const [row] = await tx.all<{ pages: number }>(sql`SELECT page_count AS pages FROM pragma_page_count()`);
      await tx.run(sql.raw(`PRAGMA max_page_count = ${row!.pages}`));
      await tx.run(
        sql`INSERT INTO dead_letters (event_id, consumer, subject, payload, error, deliveries, dead_at) VALUES ('filler', 'x', 's', zeroblob(200000), 'e', 1, 0)`,
      );
    });
    // max_deliver 1: had the full disk counted as a handler failure, the event would be dead-lettered at once
    using s = await setup(filling, 1);
    const e = creditedEvent({ owner: 'full-owner', amountCents: 5 });

    await expect(handleBatch(s.deps, [asMessage(e)])).rejects.toMatchObject({ cause: { code: 'SQLITE_FULL' } });
    expect(await countRows(s.sdb.client, 'inbox')).toBe(0);
    expect(await countRows(s.sdb.client, 'dead_letters')).toBe(0);

    fill = false;
    s.sdb.client.reconnect(); // room again: the connection that was capped is gone
    expect(await handleBatch(s.deps, [asMessage(e)])).toEqual([{ outcome: 'processed', eventId: e.eventId }]);
    expect(await readOwnerBalance(s.sdb.db, 'full-owner')).toMatchObject({ creditedCents: 5 });
    expect(await countRows(s.sdb.client, 'dead_letters')).toBe(0);
  });
});

describe('replay - a dead letter deleted while a replay runs', () => {
  it('is not applied: a replay that read it before an operator deleted it reports it not found and changes nothing', async () => {
    using s = await setup();
    const e = creditedEvent({ owner: 'gone', amountCents: 70 });
    await s.sdb.client.execute({
      sql: `INSERT INTO dead_letters (event_id, consumer, subject, headers, payload, error, deliveries, dead_at) VALUES (?, 'balances', ?, '{}', ?, 'failed', 3, 1)`,
      args: [e.eventId, `hono-outbox.account.${e.aggregateId}`, JSON.stringify(e)],
    });
    // the operator's delete lands between the replay's read and its write
    const writer = {
      ...s.deps.writer,
      async write<T>(fn: Parameters<typeof s.deps.writer.write<T>>[0]): Promise<T> {
        await s.sdb.client.execute({ sql: 'DELETE FROM dead_letters WHERE event_id = ?', args: [e.eventId] });
        return s.deps.writer.write(fn);
      },
    };
    const { replayDeadLetters } = await import('../../src/inbox/dead-letters.ts');
    const report = await replayDeadLetters({ ...s.deps, writer, db: s.sdb.db }, 'all');
    expect(report).toEqual({ replayed: [], duplicates: [], failed: [], notFound: [e.eventId] });
    expect(await readOwnerBalance(s.sdb.db, 'gone')).toMatchObject({ creditedCents: 0 });
    expect(await countRows(s.sdb.client, 'inbox')).toBe(0);
  });
});
