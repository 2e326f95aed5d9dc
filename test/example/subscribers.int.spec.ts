// The example's subscribers: the reporting read model (per-customer counters) and the notifications queue, fed by
// orders placed and cancelled over HTTP through the relay. (The inbox guarantees themselves: test/int/inbox*.)
import { describe, expect, it } from 'vitest';
import { findSubscriber, registryOf } from '../../src/compose/define-modules.ts';
import { APP_MIGRATIONS } from '../../src/entry/boot.ts';
import { modules } from '../../src/modules.ts';
import { countOrderEmails, notifications } from '../../src/subscribers/notifications/subscriber.ts';
import { readCustomerReport, reporting } from '../../src/subscribers/reporting/subscriber.ts';
import { createSubscriberDb, testRunner } from '../support/consumer.ts';
import { countRows } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { orderBody } from '../support/example-orders.ts';
import { postJson } from '../support/http.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { ownStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { createExampleApp } from './support.ts';

const nats = useNats();
const subscriberDb = (name: string) => createSubscriberDb({ migrations: APP_MIGRATIONS.subscriber(name) });

describe('example subscribers - reporting and notifications', () => {
  it('count every order placed and cancelled over HTTP once: per-customer counters, and one confirmation email per placed order', async () => {
    const stream = ownStream('EX');
    await using t = await createExampleApp();
    await using reportDb = await subscriberDb('reporting');
    await using mailDb = await subscriberDb('notifications');
    const registry = registryOf(modules);

    const orders: Array<{ orderId: string; customerId: string; totalCents: number }> = [];
    for (let i = 0; i < 12; i++) {
      const customerId = i % 2 === 0 ? 'alice' : 'bob';
      const res = await postJson(t.app, '/orders', orderBody({ customerId, items: [{ sku: `sku-${i}`, quantity: 1 + (i % 3), unitPriceCents: 100 + i }] }));
      expect(res.status).toBe(201);
      const body = (await res.json()) as { orderId: string; totalCents: number };
      orders.push({ orderId: body.orderId, customerId, totalCents: body.totalCents });
    }
    const cancelled = [orders[0]!, orders[1]!, orders[5]!];
    for (const o of cancelled) expect((await postJson(t.app, `/orders/${o.orderId}/cancel`, {})).status).toBe(200);
    const events = orders.length + cancelled.length;
    expect((await drainOutbox(relayDeps(t, nats().url, { stream }))).published).toBe(events);

    const [r, n] = await Promise.all([
      testRunner(reportDb, nats().url, reporting, stream, { registry }).run({ untilIdle: true, timeLimitMs: 30_000 }),
      testRunner(mailDb, nats().url, notifications, stream, { registry }).run({ untilIdle: true, timeLimitMs: 30_000 }),
    ]);
    expect(r).toMatchObject({ processed: events, ignored: 0, deadLettered: 0 });
    // notifications handles placements only: the cancellations are acknowledged untouched
    expect(n).toMatchObject({ processed: orders.length, ignored: cancelled.length, deadLettered: 0 });

    for (const customerId of ['alice', 'bob']) {
      const mine = orders.filter((o) => o.customerId === customerId);
      const gone = cancelled.filter((o) => o.customerId === customerId);
      expect(await readCustomerReport(reportDb.db, customerId)).toEqual({
        customerId,
        ordersPlaced: mine.length,
        ordersCancelled: gone.length,
        totalCents: mine.filter((o) => !gone.includes(o)).reduce((sum, o) => sum + o.totalCents, 0),
      });
    }
    expect(await readCustomerReport(reportDb.db, 'nobody')).toEqual({ customerId: 'nobody', ordersPlaced: 0, ordersCancelled: 0, totalCents: 0 });
    expect(await countRows(mailDb.client, 'notification_emails')).toBe(orders.length);
    for (const o of orders) expect(await countOrderEmails(mailDb.db, o.orderId)).toBe(1);
    await eventually(async () => (await countRows(mailDb.client, 'inbox')) === orders.length, { what: 'one inbox row per placed order' });
  });

  it('are in the composition of src/modules.ts, each consuming the order aggregate', () => {
    expect(modules.subscribers.map((s) => s.name)).toEqual(expect.arrayContaining(['reporting', 'notifications']));
    expect(findSubscriber(modules, 'reporting').types).toEqual(['order.placed.v1', 'order.cancelled.v1']);
    expect(findSubscriber(modules, 'notifications').types).toEqual(['order.placed.v1']);
    expect(modules.contexts.map((c) => [c.name, c.basePath])).toContainEqual(['orders', '/orders']);
  });
});
