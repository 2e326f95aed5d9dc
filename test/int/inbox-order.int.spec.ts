import { jetstreamManager } from '@nats-io/jetstream';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import type { Tx } from '../../src/db/open-database.ts';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { listDeadLetters } from '../../src/inbox/dead-letters.ts';
import type { Subscriber } from '../../src/inbox/subscriber.ts';
import { creditedEvent, openedEvent, testSubscriber } from '../support/accounts.ts';
import { createSubscriberDb, testRunner, type SubscriberDb } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

// Events of one aggregate share a subject; a subscriber applies them in stream order even while one of them fails.

const nats = useNats();

/** A subscriber database with an `applied` table: one row per applied event, in the order the commits made them. */
async function recordingDb(): Promise<SubscriberDb> {
  const sdb = await createSubscriberDb();
  await sdb.client.execute('CREATE TABLE applied (n INTEGER PRIMARY KEY AUTOINCREMENT, aggregate TEXT NOT NULL, event_id TEXT NOT NULL, saw TEXT)');
  return sdb;
}

/** Applied events as `<aggregate>:<event id>`, in application order. */
async function appliedOrder(sdb: SubscriberDb): Promise<string[]> {
  const rows = await sdb.client.execute('SELECT aggregate, event_id FROM applied ORDER BY n');
  return rows.rows.map((r) => `${String(r.aggregate)}:${String(r.event_id)}`);
}

/** A subscriber that records each event it applies and throws instead while `failing(event)` says so. */
function recorder(name: string, failing: (event: IntegrationEvent) => boolean, saw?: (tx: Tx) => Promise<string>): Subscriber {
  return testSubscriber(name, async (tx, event) => {
    await tx.run(sql`INSERT INTO applied (aggregate, event_id, saw) VALUES (${event.aggregateId}, ${event.eventId}, ${saw ? await saw(tx) : null})`);
    if (failing(event)) throw new Error(`cannot apply ${event.eventId} yet`);
  });
}

const label = (e: IntegrationEvent) => `${e.aggregateId}:${e.eventId}`;
const consumerInfo = async (stream: string, name: string) => (await jetstreamManager(nats().nc)).consumers.info(stream, name);

describe('inbox - order within an aggregate', () => {
  it('holds the later events of an aggregate while its earlier event is retried, applies other aggregates at once, then applies the held ones in stream order', async () => {
    const stream = await freshStream(nats().nc, 'ORD');
    await using sdb = await recordingDb();
    const a = `agg-a-${process.pid}`;
    const b = `agg-b-${process.pid}`;
    const [a1, a2, a3] = [openedEvent({ accountId: a }), creditedEvent({ accountId: a }), creditedEvent({ accountId: a })];
    const [b1, b2] = [openedEvent({ accountId: b }), creditedEvent({ accountId: b })];

    let broken = true;
    let attempts = 0;
    const subscriber = recorder('ordered', (e) => {
      if (e.eventId !== a1!.eventId) return false;
      attempts++;
      return broken;
    });
    const stop = new AbortController();
    const running = testRunner(sdb, nats().url, subscriber, stream, { maxDeliver: 50 }).run({ signal: stop.signal, timeLimitMs: 30_000 });

    await publishEvents(nats().nc, stream, [a1!, a2!, b1!]);
    await eventually(async () => (await appliedOrder(sdb)).includes(label(b1!)) && attempts >= 2, { what: 'b1 applied while a1 fails' });
    // events of both aggregates arriving while a1 is being retried
    await publishEvents(nats().nc, stream, [a3!, b2!]);
    await eventually(async () => (await appliedOrder(sdb)).includes(label(b2!)), { what: 'b2 applied while a1 still fails' });
    expect((await appliedOrder(sdb)).filter((x) => x.startsWith(`${a}:`))).toEqual([]);

    broken = false;
    await eventually(async () => (await appliedOrder(sdb)).length === 5, { what: 'every event applied' });
    stop.abort();
    const summary = await running;

    const order = await appliedOrder(sdb);
    expect(order.filter((x) => x.startsWith(`${a}:`))).toEqual([a1!, a2!, a3!].map(label));
    expect(order.filter((x) => x.startsWith(`${b}:`))).toEqual([b1!, b2!].map(label));
    expect(order.indexOf(label(b2!))).toBeLessThan(order.indexOf(label(a1!)));
    expect(summary).toMatchObject({ processed: 5, deadLettered: 0 });
    expect(summary.retried).toBe(attempts - 1);
    // retried in-process while the broker kept it on its first delivery
    expect(await consumerInfo(stream.name, 'ordered')).toMatchObject({ num_redelivered: 0, num_ack_pending: 0 });
  });

  it('dead-letters an event of an aggregate that fails max_deliver times, then applies the later events of that aggregate in order', async () => {
    const stream = await freshStream(nats().nc, 'ORDDL');
    await using sdb = await recordingDb();
    const a = `poisoned-${process.pid}`;
    const b = `healthy-${process.pid}`;
    const [a1, a2, a3] = [openedEvent({ accountId: a }), creditedEvent({ accountId: a }), creditedEvent({ accountId: a })];
    const b1 = openedEvent({ accountId: b });

    let attempts = 0;
    const subscriber = recorder(
      'ordered-dl',
      (e) => {
        if (e.eventId !== a1!.eventId) return false;
        attempts++;
        return true;
      },
      // what each applied event could see in its transaction: was a1 already a dead letter?
      async (tx) => String((await tx.all<{ n: number }>(sql`SELECT count(*) AS n FROM dead_letters WHERE event_id = ${a1!.eventId}`))[0]!.n),
    );
    await publishEvents(nats().nc, stream, [a1!, a2!, b1, a3!]);
    const summary = await testRunner(sdb, nats().url, subscriber, stream, { maxDeliver: 3 }).run({ untilIdle: true, timeLimitMs: 30_000 });

    expect(attempts).toBe(3);
    expect(summary).toMatchObject({ processed: 3, deadLettered: 1, retried: 2 });
    const [dead, ...others] = await listDeadLetters(sdb.db, 'ordered-dl');
    expect(others).toEqual([]);
    expect(dead).toMatchObject({ eventId: a1!.eventId, deliveries: 3 });
    const order = await appliedOrder(sdb);
    expect(order.filter((x) => x.startsWith(`${a}:`))).toEqual([a2!, a3!].map(label));
    expect(order).toContain(label(b1));
    const saw = await sdb.client.execute('SELECT event_id, saw FROM applied ORDER BY n');
    const sawDead = Object.fromEntries(saw.rows.map((r) => [String(r.event_id), String(r.saw)]));
    expect([sawDead[a2!.eventId], sawDead[a3!.eventId]]).toEqual(['1', '1']);
  });
});
