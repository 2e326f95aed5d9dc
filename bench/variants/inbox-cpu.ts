// node --import tsx bench/variants/inbox-cpu.ts [--events 20000] [--rounds 3] [--batch 256]
// The inbox's own cost without the broker: the same pre-built deliveries applied in batches by handleBatch with and
// without the inbox claim (applyWithoutInbox: the same spans, metrics and write), each round on fresh subscriber databases, alternating; prints
// CPU µs per event of this process (steadier than wall time on a shared machine) and their ratio. No assertion.
import { registryOf } from '../../src/compose/define-modules.ts';
import { subscriberMigrationsFolder } from '../../src/entry/boot.ts';
import { createInboxDeps, handleBatch } from '../../src/inbox/handle-once.ts';
import type { InboxMessage } from '../../src/inbox/inbox-message.ts';
import { applyWithoutInbox } from '../../src/inbox/without-inbox.ts';
import { createUuidV7 } from '../../src/ids.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { modules } from '../../src/modules.ts';
import { reporting } from '../../src/subscribers/reporting/subscriber.ts';
import { createSubscriberDb } from '../../test/support/consumer.ts';
import { numberArg, percentile, round } from '../support.ts';

const M = numberArg('events', 20_000);
const ROUNDS = numberArg('rounds', 3);
const BATCH = numberArg('batch', 256);

function deliveries(n: number): InboxMessage[] {
  const newId = createUuidV7();
  return Array.from({ length: n }, (_, i) => {
    const orderId = newId();
    const at = new Date(Date.UTC(2026, 0, 1) + i).toISOString();
    const items = [{ sku: `sku-${i % 97}`, quantity: 1 + (i % 3), unitPriceCents: 1250 }];
    const event = {
      eventId: newId(),
      type: 'order.placed.v1',
      aggregateType: 'order',
      aggregateId: orderId,
      aggregateVersion: 1,
      occurredAt: at,
      data: {
        orderId,
        customerId: `c${i % 500}`,
        currency: 'EUR',
        items,
        totalCents: items.reduce((s, l) => s + l.quantity * l.unitPriceCents, 0),
        placedAt: at,
      },
    };
    const headers = { 'Event-Type': event.type, 'Content-Type': 'application/json', 'Nats-Msg-Id': event.eventId };
    return {
      subject: `cb.order.${orderId}`,
      aggregate: `order.${orderId}`,
      headers,
      payload: JSON.stringify(event),
      deliveryCount: 1,
      fallbackId: event.eventId,
    };
  });
}

async function once(msgs: InboxMessage[], withInbox: boolean): Promise<number> {
  const sdb = await createSubscriberDb({ migrations: subscriberMigrationsFolder('reporting') });
  try {
    const registry = registryOf(modules);
    const inbox = createInboxDeps(reporting, { writer: sdb.writer, registry, metrics: createMetrics() });
    const plain = applyWithoutInbox(inbox);
    const cpu0 = process.cpuUsage();
    for (let i = 0; i < msgs.length; i += BATCH) {
      const batch = msgs.slice(i, i + BATCH);
      await (withInbox ? handleBatch(inbox, batch) : plain(batch));
    }
    const cpu = process.cpuUsage(cpu0);
    return (cpu.user + cpu.system) / msgs.length;
  } finally {
    sdb.close();
  }
}

const msgs = deliveries(M);
// warm up both paths with a whole round each: after a shorter one the first counted round still ran ≈ 25 % slower,
// and the inbox path, which opens round 0, took that cost
await once(msgs, true);
await once(msgs, false);
const a: number[] = [];
const b: number[] = [];
for (let r = 0; r < ROUNDS; r++) {
  for (const withInbox of r % 2 === 0 ? [true, false] : [false, true]) (withInbox ? a : b).push(await once(msgs, withInbox));
}
const ua = percentile(a, 50);
const ub = percentile(b, 50);
console.log(
  `inbox ${round(ua)} µs CPU/event, without ${round(ub)} µs (medians of ${ROUNDS}; ${M} events, batch ${BATCH}); events per CPU-second ratio ${round(ub / ua)}; samples ${a.map((x) => round(x, 1)).join(' ')} | ${b.map((x) => round(x, 1)).join(' ')}`,
);
