import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { sql } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { listDeadLetters } from '../../src/inbox/dead-letters.ts';
import type { Subscriber } from '../../src/inbox/subscriber.ts';
import { createStream, createSubscriberDb, ownStream, placedEvent, publishRaw, testRunner, waitFor, type SubscriberDb } from '../support/consumer.ts';
import { startNats, type NatsServer } from '../support/nats.ts';
import { natsClient } from '../support/relay.ts';

// Events of one aggregate share a subject; a subscriber applies them in stream order even while one of them fails.

let nats: NatsServer;
let nc: NatsConnection;
beforeAll(async () => {
  nats = await startNats();
  nc = await natsClient(nats.url);
});
afterAll(async () => {
  await nc.close();
  await nats[Symbol.asyncDispose]();
});

const dbs: SubscriberDb[] = [];
afterEach(() => {
  for (const d of dbs.splice(0)) d.close();
});

/** A subscriber database with an `applied` table: one row per applied event, in the order the commits made them. */
async function recordingDb(): Promise<SubscriberDb> {
  const sdb = await createSubscriberDb();
  dbs.push(sdb);
  await sdb.client.execute('CREATE TABLE applied (n INTEGER PRIMARY KEY AUTOINCREMENT, aggregate TEXT NOT NULL, event_id TEXT NOT NULL, saw TEXT)');
  return sdb;
}

/** Applied events as `<aggregate>:<event id>`, in application order. */
async function appliedOrder(sdb: SubscriberDb): Promise<string[]> {
  const rows = await sdb.client.execute('SELECT aggregate, event_id FROM applied ORDER BY n');
  return rows.rows.map((r) => `${String(r.aggregate)}:${String(r.event_id)}`);
}

/** A subscriber that records each event it applies and throws instead while `failing(event)` says so. */
function recorder(name: string, failing: (event: IntegrationEvent) => boolean, saw?: (tx: Parameters<Subscriber['handle']>[0]) => Promise<string>): Subscriber {
  return {
    name,
    aggregateTypes: ['order'],
    async handle(tx, event) {
      await tx.run(sql`INSERT INTO applied (aggregate, event_id, saw) VALUES (${event.aggregateId}, ${event.eventId}, ${saw ? await saw(tx) : null})`);
      if (failing(event)) throw new Error(`cannot apply ${event.eventId} yet`);
    },
  };
}

const label = (e: IntegrationEvent) => `${e.aggregateId}:${e.eventId}`;
const consumerInfo = async (stream: string, name: string) => (await jetstreamManager(nc)).consumers.info(stream, name);

describe('inbox - order within an aggregate', () => {
  it('holds the later events of an aggregate while its earlier event is retried, applies other aggregates at once, then applies the held ones in stream order', async () => {
    const stream = ownStream('ORD');
    await createStream(nc, stream);
    const sdb = await recordingDb();
    const a = `agg-a-${process.pid}`;
    const b = `agg-b-${process.pid}`;
    const [a1, a2, a3] = [1, 2, 3].map(() => placedEvent({ orderId: a }));
    const [b1, b2] = [1, 2].map(() => placedEvent({ orderId: b }));

    let broken = true;
    let attempts = 0;
    const subscriber = recorder('ordered', (e) => {
      if (e.eventId !== a1!.eventId) return false;
      attempts++;
      return broken;
    });
    const stop = new AbortController();
    const running = testRunner(sdb, nats.url, subscriber, stream, { maxDeliver: 50 }).run({ signal: stop.signal, timeLimitMs: 30_000 });

    for (const e of [a1!, a2!, b1!]) await publishRaw(nc, stream, e, e.eventId);
    await waitFor('b1 applied while a1 fails', async () => (await appliedOrder(sdb)).includes(label(b1!)) && attempts >= 2);
    // events of both aggregates arriving while a1 is being retried
    for (const e of [a3!, b2!]) await publishRaw(nc, stream, e, e.eventId);
    await waitFor('b2 applied while a1 still fails', async () => (await appliedOrder(sdb)).includes(label(b2!)));
    expect((await appliedOrder(sdb)).filter((x) => x.startsWith(`${a}:`))).toEqual([]);

    broken = false;
    await waitFor('every event applied', async () => (await appliedOrder(sdb)).length === 5);
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
    const stream = ownStream('ORDDL');
    await createStream(nc, stream);
    const sdb = await recordingDb();
    const a = `poisoned-${process.pid}`;
    const b = `healthy-${process.pid}`;
    const [a1, a2, a3] = [1, 2, 3].map(() => placedEvent({ orderId: a }));
    const b1 = placedEvent({ orderId: b });

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
    for (const e of [a1!, a2!, b1, a3!]) await publishRaw(nc, stream, e, e.eventId);
    const summary = await testRunner(sdb, nats.url, subscriber, stream, { maxDeliver: 3 }).run({ untilIdle: true, timeLimitMs: 30_000 });

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
