import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { applyToCustomerReport, readCustomerReport, reporting } from '../../src/consumers/reporting/reporting.ts';
import type { Writer } from '../../src/db/writer.ts';
import { listDeadLetters } from '../../src/inbox/dead-letters.ts';
import type { Subscriber } from '../../src/inbox/subscriber.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { countRows, createStream, createSubscriberDb, ownStream, placedEvent, publishRaw, testRunner, waitFor, type SubscriberDb } from '../support/consumer.ts';
import { startNats, type NatsServer } from '../support/nats.ts';
import { natsClient } from '../support/relay.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';

// The subscriber's own database stops taking writes (another process holds its write lock past the busy timeout):
// no message may lose a delivery, let alone be lost, however long that lasts.

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
async function subscriberDb(): Promise<SubscriberDb> {
  const sdb = await createSubscriberDb({ busyTimeoutMs: 200 });
  dbs.push(sdb);
  return sdb;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const consumerInfo = async (stream: string, name: string) => (await jetstreamManager(nc)).consumers.info(stream, name);
const hasConsumer = (stream: string, name: string) => async () => consumerInfo(stream, name).then(() => true, () => false);

// Small settings, so the lock outlasts the whole delivery budget: max_deliver 3 × (ack_wait 1 s + retry delay ≤ 0.2 s).
const settings = { ackWaitMs: 1000, maxDeliver: 3 };
const LOCK_MS = 8000;

describe('inbox - its database unavailable', () => {
  it('holds every message while another process keeps its database write-locked past max_deliver × (ack_wait + retry delay), then applies each once without spending a delivery', async () => {
    const stream = ownStream('LOCK');
    await createStream(nc, stream);
    const sdb = await subscriberDb();
    await using holder = await startWriteLockHolder(sdb.url);
    const metrics = createMetrics();
    const runner = testRunner(sdb, nats.url, reporting, stream, { ...settings, metrics });
    const stop = new AbortController();
    const running = runner.run({ signal: stop.signal, timeLimitMs: 50_000 });
    await waitFor('the durable consumer', hasConsumer(stream.name, 'reporting'));

    await holder.lock();
    const events = Array.from({ length: 12 }, (_, i) => placedEvent({ customerId: `locked-${i % 3}`, totalCents: 10 + i }));
    for (const e of events) await publishRaw(nc, stream, e, e.eventId);
    await sleep(LOCK_MS);

    expect(runner.databaseState()).toBe('unavailable');
    expect(await countRows(sdb.client, 'inbox')).toBe(0);
    const during = await consumerInfo(stream.name, 'reporting');
    expect(during).toMatchObject({ num_ack_pending: 12, num_redelivered: 0, num_pending: 0 });
    expect(during.delivered.consumer_seq).toBe(12);
    expect(await metrics.render()).toContain('inbox_database_available{consumer="reporting"} 0');

    await holder.release();
    await waitFor('every event applied', async () => (await countRows(sdb.client, 'inbox')) === 12);
    stop.abort();
    const summary = await running;

    expect(summary).toMatchObject({ processed: 12, duplicates: 0, deadLettered: 0, retried: 0 });
    expect(summary.databaseErrors).toBeGreaterThan(0);
    expect(runner.databaseState()).toBe('ok');
    expect(await countRows(sdb.client, 'dead_letters')).toBe(0);
    for (let c = 0; c < 3; c++) {
      const mine = events.filter((_, i) => i % 3 === c);
      expect(await readCustomerReport(sdb.db, `locked-${c}`)).toMatchObject({ ordersPlaced: mine.length, totalCents: mine.reduce((s, e) => s + (e.data as { totalCents: number }).totalCents, 0) });
    }
    // each message was delivered once and acknowledged: no delivery of the budget was spent on the outage
    const after = await consumerInfo(stream.name, 'reporting');
    expect(after).toMatchObject({ num_ack_pending: 0, num_redelivered: 0, num_pending: 0 });
    expect(after.delivered.consumer_seq).toBe(12);
    const text = await metrics.render();
    expect(text).toMatch(new RegExp(`inbox_infrastructure_errors_total\\{consumer="reporting"\\} ${summary.databaseErrors}\\n`));
    expect(text).toContain('inbox_database_available{consumer="reporting"} 1');
  });

  it('keeps a message whose dead-letter write fails on the database lock until the dead letter is committed, and the later event of its aggregate waits for it', async () => {
    const stream = ownStream('DLQ');
    await createStream(nc, stream);
    const sdb = await subscriberDb();
    await using holder = await startWriteLockHolder(sdb.url);
    const poison = placedEvent({ customerId: 'dlq-cust', orderId: `dlq-order-${process.pid}`, totalCents: 1 });
    const next = placedEvent({ customerId: 'dlq-cust', orderId: poison.aggregateId, totalCents: 2 });

    let failures = 0;
    let lockBeforeNextWrite = false;
    let lockedAt = 0;
    const picky: Subscriber = {
      name: 'picky',
      aggregateTypes: ['order'],
      async handle(tx, event) {
        await applyToCustomerReport(tx, event);
        if (event.eventId !== poison.eventId) return;
        // the max_deliver-th failure: the write that stores its dead letter comes next, and finds the database locked
        if (++failures === settings.maxDeliver) lockBeforeNextWrite = true;
        throw new Error('cannot handle this order');
      },
    };
    const writer: Writer = {
      async write(fn) {
        if (lockBeforeNextWrite) {
          lockBeforeNextWrite = false;
          await holder.lock(); // our transaction rolled back already, so the other process gets the lock at once
          lockedAt = Date.now();
        }
        return sdb.writer.write(fn);
      },
      idle: () => sdb.writer.idle(),
    };
    const runner = testRunner(sdb, nats.url, picky, stream, { ...settings, writer });
    const stop = new AbortController();
    const running = runner.run({ signal: stop.signal, timeLimitMs: 40_000 });
    await publishRaw(nc, stream, poison, poison.eventId);
    await publishRaw(nc, stream, next, next.eventId);

    await waitFor('the dead-letter write to meet the lock', async () => lockedAt > 0);
    await sleep(3 * settings.ackWaitMs);
    expect(runner.databaseState()).toBe('unavailable');
    expect(await listDeadLetters(sdb.db, 'picky')).toEqual([]);
    expect(await readCustomerReport(sdb.db, 'dlq-cust')).toMatchObject({ ordersPlaced: 0 });
    // still held at the broker on its first delivery: the failures were counted in-process, the outage not at all
    expect(await consumerInfo(stream.name, 'picky')).toMatchObject({ num_ack_pending: 2, num_redelivered: 0 });

    await holder.release();
    await waitFor('the later event applied', async () => (await readCustomerReport(sdb.db, 'dlq-cust')).ordersPlaced === 1);
    stop.abort();
    const summary = await running;

    const [dead, ...others] = await listDeadLetters(sdb.db, 'picky');
    expect(others).toEqual([]);
    expect(dead).toMatchObject({ eventId: poison.eventId, deliveries: settings.maxDeliver });
    expect(dead!.error).toContain('cannot handle this order');
    expect(await readCustomerReport(sdb.db, 'dlq-cust')).toMatchObject({ ordersPlaced: 1, totalCents: 2 });
    expect(summary).toMatchObject({ processed: 1, deadLettered: 1, retried: settings.maxDeliver - 1 });
    expect(summary.databaseErrors).toBeGreaterThan(0);
    expect(await consumerInfo(stream.name, 'picky')).toMatchObject({ num_ack_pending: 0, num_redelivered: 0 });
  });
});
