import { jetstreamManager } from '@nats-io/jetstream';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readCustomerReport, reporting } from '../../src/consumers/reporting/reporting.ts';
import { countRows, createStream, createSubscriberDb, ownStream, placedEvent, publishRaw, testRunner, waitFor } from '../support/consumer.ts';
import { startNats, type NatsServer } from '../support/nats.ts';
import { natsClient } from '../support/relay.ts';

// Its own server: the test restarts it.
let nats: NatsServer;
beforeAll(async () => {
  nats = await startNats();
});
afterAll(async () => {
  await nats[Symbol.asyncDispose]();
});

describe('inbox - broker outages', () => {
  it('resumes from its durable consumer after the broker restarts mid-consumption, with every event applied exactly once', async () => {
    const stream = ownStream('RS');
    const sdb = await createSubscriberDb();
    try {
      let nc = await natsClient(nats.url);
      await createStream(nc, stream);
      for (let i = 0; i < 150; i++) {
        const e = placedEvent({ customerId: 'restart-cust', totalCents: 10 });
        await publishRaw(nc, stream, e, e.eventId);
      }
      await nc.close();

      let seen = 0;
      let restarted: Promise<void> | undefined;
      const stop = new AbortController();
      const runner = testRunner(sdb, nats.url, reporting, stream, {
        batch: 10,
        faults: {
          // After 40 commits, kill and relaunch the broker while this runner holds unacknowledged messages.
          async afterCommit() {
            if (++seen === 40) {
              restarted = nats.restart();
              await restarted;
            }
          },
        },
      });
      const running = runner.run({ signal: stop.signal, timeLimitMs: 45_000 });

      await waitFor('the restart', async () => restarted !== undefined, 30_000);
      await restarted;
      nc = await natsClient(nats.url);
      for (let i = 0; i < 50; i++) {
        const e = placedEvent({ customerId: 'restart-cust', totalCents: 10 });
        await publishRaw(nc, stream, e, e.eventId);
      }
      await nc.close();

      await waitFor('all 200 events applied', async () => (await readCustomerReport(sdb.db, 'restart-cust')).ordersPlaced >= 200, 40_000);
      stop.abort();
      const summary = await running;

      expect(await readCustomerReport(sdb.db, 'restart-cust')).toMatchObject({ ordersPlaced: 200, totalCents: 2000 });
      expect(await countRows(sdb.client, 'inbox')).toBe(200);
      expect(summary.processed).toBe(200);
      expect(runner.state()).toBe('connected');
    } finally {
      sdb.close();
    }
  });

  it('waits for a broker that is down when it starts, then consumes what was published meanwhile', async () => {
    const stream = ownStream('DN');
    const sdb = await createSubscriberDb();
    try {
      await nats.stop();
      const stop = new AbortController();
      const runner = testRunner(sdb, nats.url, reporting, stream);
      const running = runner.run({ signal: stop.signal, timeLimitMs: 30_000 });
      await waitFor('the runner to notice the outage', async () => runner.state() === 'unavailable');

      await nats.restart();
      const nc = await natsClient(nats.url);
      await createStream(nc, stream);
      const e = placedEvent({ customerId: 'late-cust', totalCents: 42 });
      await publishRaw(nc, stream, e, e.eventId);
      await nc.close();

      await waitFor('the event applied', async () => (await readCustomerReport(sdb.db, 'late-cust')).ordersPlaced === 1);
      stop.abort();
      const summary = await running;
      expect(summary.brokerErrors).toBeGreaterThanOrEqual(1);
      expect(summary.processed).toBe(1);
      expect(await readCustomerReport(sdb.db, 'late-cust')).toMatchObject({ ordersPlaced: 1, totalCents: 42 });
    } finally {
      sdb.close();
    }
  });

  // last in this file: it wipes the server's store, every stream of the tests above with it
  it('re-creates its stream and consumer when the broker comes back without its store, and applies the events published afterwards', async () => {
    const stream = ownStream('LOST');
    const sdb = await createSubscriberDb();
    try {
      const stop = new AbortController();
      const runner = testRunner(sdb, nats.url, reporting, stream);
      const running = runner.run({ signal: stop.signal, timeLimitMs: 45_000 });
      const consumerExists = async () => {
        const nc = await natsClient(nats.url);
        try {
          return await (await jetstreamManager(nc)).consumers.info(stream.name, 'reporting').then(() => true, () => false);
        } finally {
          await nc.close();
        }
      };
      await waitFor('the stream and the consumer', consumerExists);
      let nc = await natsClient(nats.url);
      const before = placedEvent({ customerId: 'lost-cust', totalCents: 1 });
      await publishRaw(nc, stream, before, before.eventId);
      await nc.close();
      await waitFor('the first event applied', async () => (await readCustomerReport(sdb.db, 'lost-cust')).ordersPlaced === 1);

      await nats.kill();
      rmSync(join(nats.storeDir, 'jetstream'), { recursive: true, force: true });
      await nats.restart();
      await waitFor('the stream and the consumer re-created', consumerExists, 30_000);
      nc = await natsClient(nats.url);
      const after = placedEvent({ customerId: 'lost-cust', totalCents: 2 });
      await publishRaw(nc, stream, after, after.eventId);
      await nc.close();
      await waitFor('the later event applied', async () => (await readCustomerReport(sdb.db, 'lost-cust')).ordersPlaced === 2);
      stop.abort();
      const summary = await running;

      expect(summary).toMatchObject({ processed: 2, deadLettered: 0 });
      expect(summary.brokerErrors).toBeGreaterThanOrEqual(1);
      expect(await countRows(sdb.client, 'inbox')).toBe(2);
    } finally {
      sdb.close();
    }
  });
});
