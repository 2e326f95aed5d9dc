import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countOrderEmails, notifications } from '../../src/consumers/notifications/notifications.ts';
import { readCustomerReport, reporting } from '../../src/consumers/reporting/reporting.ts';
import { findSubscriber, subscribers, UnknownSubscriberError } from '../../src/consumers/subscribers.ts';
import { countRows, createSubscriberDb, ownStream, placedEvent, publishRaw, testRunner, waitFor } from '../support/consumer.ts';
import { createTestApp } from '../support/db.ts';
import { startNats, type NatsServer } from '../support/nats.ts';
import { drainOutbox, natsClient, relayDeps } from '../support/relay.ts';

let nats: NatsServer;
beforeAll(async () => {
  nats = await startNats();
});
afterAll(async () => {
  await nats[Symbol.asyncDispose]();
});

describe('consumers - end to end', () => {
  it('applies every order placed and cancelled over HTTP exactly once in both subscribers, even when they start before the stream exists', async () => {
    const stream = ownStream('E2E');
    const t = await createTestApp();
    const reportDb = await createSubscriberDb();
    const mailDb = await createSubscriberDb();
    try {
      const placed = 24;
      const cancelled = 4;
      const events = placed + cancelled;
      // Both runners start first: they create the stream and their durable consumers themselves.
      const stop = new AbortController();
      const reportRun = testRunner(reportDb, nats.url, reporting, stream).run({ signal: stop.signal, timeLimitMs: 40_000 });
      const mailRun = testRunner(mailDb, nats.url, notifications, stream).run({ signal: stop.signal, timeLimitMs: 40_000 });

      const orders: Array<{ orderId: string; customerId: string; totalCents: number }> = [];
      for (let i = 0; i < placed; i++) {
        const customerId = i % 2 === 0 ? 'alice' : 'bob';
        const res = await t.app.request('/orders', {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ customerId, currency: 'EUR', items: [{ sku: `sku-${i}`, quantity: 1 + (i % 3), unitPriceCents: 100 + i }] }),
        });
        expect(res.status).toBe(201);
        const body = (await res.json()) as { orderId: string; totalCents: number };
        orders.push({ orderId: body.orderId, customerId, totalCents: body.totalCents });
      }
      const toCancel = [orders[0]!, orders[1]!, orders[2]!, orders[5]!];
      for (const o of toCancel) {
        const res = await t.app.request(`/orders/${o.orderId}/cancel`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
        expect(res.status).toBe(200);
      }
      await waitFor('the runners to create the stream', async () => {
        const nc = await natsClient(nats.url);
        try {
          await (await jetstreamManager(nc)).consumers.info(stream.name, 'notifications');
          return true;
        } catch {
          return false;
        } finally {
          await nc.close();
        }
      });
      const relayed = await drainOutbox(relayDeps(t, nats.url, { stream, settings: { prefix: stream.prefix } }));
      expect(relayed.published).toBe(events);

      await waitFor('both subscribers to apply every event', async () => {
        const rows = await Promise.all([countRows(reportDb.client, 'inbox'), countRows(mailDb.client, 'inbox')]);
        return rows.every((n) => n >= events);
      });
      stop.abort();
      const [r, n] = await Promise.all([reportRun, mailRun]);
      expect(r).toMatchObject({ processed: events, deadLettered: 0 });
      expect(n).toMatchObject({ processed: events, deadLettered: 0 });

      for (const customerId of ['alice', 'bob']) {
        const mine = orders.filter((o) => o.customerId === customerId);
        const gone = toCancel.filter((o) => o.customerId === customerId);
        const kept = mine.filter((o) => !gone.includes(o));
        expect(await readCustomerReport(reportDb.db, customerId)).toEqual({
          customerId,
          ordersPlaced: mine.length,
          ordersCancelled: gone.length,
          totalCents: kept.reduce((sum, o) => sum + o.totalCents, 0),
        });
      }
      expect(await countRows(mailDb.client, 'notification_emails')).toBe(placed);
      for (const o of orders) expect(await countOrderEmails(mailDb.db, o.orderId)).toBe(1);
      expect(await readCustomerReport(reportDb.db, 'nobody')).toEqual({ customerId: 'nobody', ordersPlaced: 0, ordersCancelled: 0, totalCents: 0 });
    } finally {
      reportDb.close();
      mailDb.close();
      t.close();
    }
  });
});

describe('consumers - durable consumer and registry', () => {
  it('creates the durable pull consumer with explicit acks, the aggregate filter, ack_wait and unlimited broker redelivery, and updates a consumer that limits it', async () => {
    const stream = ownStream('CFG');
    const sdb = await createSubscriberDb();
    const nc = await natsClient(nats.url);
    try {
      await testRunner(sdb, nats.url, reporting, stream).run({ untilIdle: true, timeLimitMs: 20_000 });
      const jsm = await jetstreamManager(nc);
      const created = (await jsm.consumers.info(stream.name, 'reporting')).config;
      expect(created).toMatchObject({
        durable_name: 'reporting',
        ack_policy: 'explicit',
        deliver_policy: 'all',
        filter_subject: `${stream.prefix}.order.>`,
        ack_wait: nanos(30_000),
        max_deliver: -1, // the inbox dead-letters by itself; the broker must never drop a message silently
      });

      // a consumer left with a delivery limit (by an operator or an older version) loses it
      await jsm.consumers.update(stream.name, 'reporting', { max_deliver: 10 });
      await testRunner(sdb, nats.url, reporting, stream, { ackWaitMs: 5000, maxDeliver: 4 }).run({ untilIdle: true, timeLimitMs: 20_000 });
      const updated = (await jsm.consumers.info(stream.name, 'reporting')).config;
      expect(updated).toMatchObject({ ack_wait: nanos(5000), max_deliver: -1 });
    } finally {
      await nc.close();
      sdb.close();
    }
  });

  it('applies an event delivered more often than max_deliver by processes that died before applying it: only handler failures lead to a dead letter', async () => {
    const stream = ownStream('MAXD');
    const sdb = await createSubscriberDb();
    const nc = await natsClient(nats.url);
    try {
      const settings = { ackWaitMs: 1000, maxDeliver: 2 };
      await testRunner(sdb, nats.url, reporting, stream, settings).run({ untilIdle: true, timeLimitMs: 20_000 });
      const event = placedEvent({ customerId: 'crashy', totalCents: 700 });
      await publishRaw(nc, stream, event, event.eventId);
      // three processes in a row take the message and die before applying it (nothing acks it)
      const consumer = await jetstream(nc).consumers.get(stream.name, 'reporting');
      for (let i = 1; i <= 3; i++) {
        const got = await consumer.next({ expires: 5000 });
        expect(got?.info.deliveryCount).toBe(i);
        await new Promise((r) => setTimeout(r, 1200)); // ack_wait passes
      }
      await testRunner(sdb, nats.url, reporting, stream, settings).run({ untilIdle: true, timeLimitMs: 20_000 });
      expect(await readCustomerReport(sdb.db, 'crashy')).toMatchObject({ ordersPlaced: 1, totalCents: 700 });
      expect(await countRows(sdb.client, 'dead_letters')).toBe(0);
    } finally {
      await nc.close();
      sdb.close();
    }
  });

  it('finds the example subscribers by name and names the known ones for an unknown name', () => {
    expect(Object.keys(subscribers).sort()).toEqual(['notifications', 'reporting']);
    expect(findSubscriber('reporting')).toBe(reporting);
    expect(findSubscriber('notifications').aggregateTypes).toEqual(['order']);
    expect(() => findSubscriber('billing')).toThrow(UnknownSubscriberError);
    expect(() => findSubscriber('toString')).toThrow('known: reporting, notifications');
  });
});

describe('consumers - a stream or consumer that disappeared', () => {
  for (const deleted of ['stream', 'durable consumer'] as const) {
    it(`re-creates its ${deleted} when an operator deletes it while the runner runs, and applies the events published afterwards`, async () => {
      const stream = ownStream('GONE');
      const sdb = await createSubscriberDb();
      const nc = await natsClient(nats.url);
      try {
        const jsm = await jetstreamManager(nc);
        const exists = async () => jsm.consumers.info(stream.name, 'reporting').then(() => true, () => false);
        const stop = new AbortController();
        const runner = testRunner(sdb, nats.url, reporting, stream);
        const running = runner.run({ signal: stop.signal, timeLimitMs: 40_000 });
        await waitFor('the stream and the consumer', exists);
        const before = placedEvent({ customerId: 'gone-cust', totalCents: 1 });
        await publishRaw(nc, stream, before, before.eventId);
        await waitFor('the first event applied', async () => (await readCustomerReport(sdb.db, 'gone-cust')).ordersPlaced === 1);

        if (deleted === 'stream') await jsm.streams.delete(stream.name);
        else await jsm.consumers.delete(stream.name, 'reporting');
        await waitFor(`the ${deleted} re-created`, exists);
        const after = placedEvent({ customerId: 'gone-cust', totalCents: 2 });
        await publishRaw(nc, stream, after, after.eventId);
        await waitFor('the later event applied', async () => (await readCustomerReport(sdb.db, 'gone-cust')).ordersPlaced === 2);
        stop.abort();
        const summary = await running;

        expect(summary.brokerErrors).toBeGreaterThanOrEqual(1);
        expect(await readCustomerReport(sdb.db, 'gone-cust')).toMatchObject({ ordersPlaced: 2, totalCents: 3 });
        expect(await countRows(sdb.client, 'inbox')).toBe(2);
        expect(runner.state()).toBe('connected');
      } finally {
        await nc.close();
        sdb.close();
      }
    });
  }
});
