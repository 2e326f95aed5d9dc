import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { ensureStream } from '../../src/nats/ensure-stream.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEventRegistry } from '../../src/events/registry.ts';
import { orderEventSchemas } from '../../src/orders/order-events.ts';
import { placeOrder } from '../../src/orders/place-order.ts';
import { cancelOrder } from '../../src/orders/cancel-order.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { relayPass } from '../../src/outbox/relay-pass.ts';
import { requeueFailed } from '../../src/outbox/failed-rows.ts';
import { createTestDb, orderBody, type TestDb } from '../support/db.ts';
import { startNats, type NatsServer } from '../support/nats.ts';
import { drainOutbox, natsClient, readStream, relayDeps, TEST_STREAM } from '../support/relay.ts';
import { eventually } from '../support/service.ts';

let nats: NatsServer;
beforeAll(async () => {
  nats = await startNats();
});
afterAll(async () => {
  await nats[Symbol.asyncDispose]();
});

/** Each test gets its own stream name and prefix on the shared server, so no test sees another's messages. */
let streamNo = 0;
function ownStream() {
  streamNo++;
  return { ...TEST_STREAM, name: `RELAY_T${streamNo}`, prefix: `t${streamNo}` };
}

async function place(t: TestDb, n: number, customerId = 'c1') {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const order = await t.deps.writer.write((tx) => placeOrder(tx, t.deps, { ...orderBody({ customerId }) } as never));
    ids.push(order.id);
  }
  return ids;
}

async function outboxRows(t: TestDb) {
  const res = await t.client.execute('SELECT seq, id, status, attempts, sent_at, last_error, aggregate_id FROM outbox ORDER BY seq');
  return res.rows.map((r) => ({
    seq: Number(r.seq),
    id: String(r.id),
    status: String(r.status),
    attempts: Number(r.attempts),
    sentAt: r.sent_at === null ? null : Number(r.sent_at),
    lastError: r.last_error === null ? null : String(r.last_error),
    aggregateId: String(r.aggregate_id),
  }));
}

describe('relay - publishing', () => {
  it('publishes committed events to the stream in seq order with the documented subject and headers', async () => {
    const t = await createTestDb();
    const nc = await natsClient(nats.url);
    try {
      const stream = ownStream();
      const ids = await place(t, 5);
      await t.deps.writer.write((tx) => cancelOrder(tx, t.deps, { orderId: ids[0]!, reason: 'changed mind' }, { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' }));
      const summary = await drainOutbox(relayDeps(t, nats.url, { stream, settings: { prefix: stream.prefix } }));
      expect(summary.published).toBe(6);

      const rows = await outboxRows(t);
      expect(rows.every((r) => r.status === 'sent' && r.sentAt !== null)).toBe(true);
      const msgs = await readStream(nc, stream.name);
      expect(msgs.map((m) => m.headers['Nats-Msg-Id'])).toEqual(rows.map((r) => r.id));
      const last = msgs[5]!;
      expect(last.subject).toBe(`${stream.prefix}.order.${ids[0]}`);
      expect(last.headers).toMatchObject({
        'Event-Type': 'order.cancelled.v1',
        'Aggregate-Type': 'order',
        'Aggregate-Id': ids[0],
        'Aggregate-Version': '2',
        'Content-Type': 'application/json',
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      });
      expect(last.headers['Occurred-At']).toBe(last.event.occurredAt);
      expect(last.event).toMatchObject({ eventId: rows[5]!.id, type: 'order.cancelled.v1', aggregateVersion: 2 });
    } finally {
      await nc.close();
      t.close();
    }
  });

  it('a crash between PubAck and mark-sent re-publishes, and the broker acknowledges the copies as duplicates', async () => {
    const t = await createTestDb();
    const nc = await natsClient(nats.url);
    try {
      const stream = ownStream();
      await place(t, 4);
      const crashing = relayDeps(t, nats.url, {
        stream,
        settings: { prefix: stream.prefix },
        faults: {
          afterPubAcks() {
            throw new Error('crash after PubAck');
          },
        },
      });
      await expect(createRelay(crashing).run({ untilIdle: true })).rejects.toThrow('crash after PubAck');
      expect((await outboxRows(t)).every((r) => r.status === 'pending')).toBe(true);
      expect(await readStream(nc, stream.name)).toHaveLength(4);

      const summary = await drainOutbox(relayDeps(t, nats.url, { stream, settings: { prefix: stream.prefix } }));
      expect(summary).toMatchObject({ published: 0, duplicates: 4 });
      expect((await outboxRows(t)).every((r) => r.status === 'sent')).toBe(true);
      expect(await readStream(nc, stream.name)).toHaveLength(4);
    } finally {
      await nc.close();
      t.close();
    }
  });

  it('keeps per-aggregate order when the 2nd of 3 events of an aggregate fails once', async () => {
    const t = await createTestDb();
    const nc = await natsClient(nats.url);
    try {
      const stream = ownStream();
      const [a] = await place(t, 1, 'cust-a');
      const [b] = await place(t, 1, 'cust-b');
      // a second and third event of order `a`: a cancellation, then a hand-made v3 event of the same aggregate
      await t.deps.writer.write((tx) => cancelOrder(tx, t.deps, { orderId: a!, reason: null }));
      await t.client.execute({
        sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at)
              SELECT 'third-' || aggregate_id, aggregate_type, aggregate_id, message_type,
                     json_set(json_set(payload, '$.eventId', 'third-' || aggregate_id), '$.aggregateVersion', 3), 'pending', occurred_at, occurred_at
              FROM outbox WHERE aggregate_id = ? AND message_type = 'order.cancelled.v1'`,
        args: [a!],
      });
      const rows = await outboxRows(t);
      const second = rows.filter((r) => r.aggregateId === a)[1]!;
      let failedOnce = false;
      const deps = relayDeps(t, nats.url, {
        stream,
        settings: { prefix: stream.prefix, backoffBaseMs: 50 },
        faults: {
          beforePublish(row) {
            if (row.id === second.id && !failedOnce) {
              failedOnce = true;
              return new Error('rejected once by a fault');
            }
            return undefined;
          },
        },
      });
      await ensureStream(await jetstreamManager(nc), stream);
      const first = await relayPass(deps, jetstream(nc));
      expect(first).toMatchObject({ published: 2, failed: 1 }); // a#1 and b#1; a#2 failed, a#3 held back
      const afterFirst = await outboxRows(t);
      expect(afterFirst.find((r) => r.id === second.id)).toMatchObject({ status: 'pending', attempts: 1, lastError: 'rejected once by a fault' });
      // the held-back third event is not published while the second waits out its retry delay
      const early = await relayPass(deps, jetstream(nc));
      expect(early.published).toBe(0);

      const rest = await createRelay(deps).run({ maxMessages: 2, timeLimitMs: 10_000 });
      expect(rest.published).toBe(2);
      const msgs = await readStream(nc, stream.name);
      const ofA = msgs.filter((m) => m.subject === `${stream.prefix}.order.${a}`).map((m) => m.event.aggregateVersion);
      expect(ofA).toEqual([1, 2, 3]);
      expect(msgs.filter((m) => m.subject === `${stream.prefix}.order.${b}`)).toHaveLength(1);
    } finally {
      await nc.close();
      t.close();
    }
  });

  it('parks a poison row as failed after the maximum attempts while other aggregates keep flowing, and a re-queue retries it', async () => {
    const t = await createTestDb();
    const nc = await natsClient(nats.url);
    try {
      const stream = ownStream();
      await t.client.execute({
        sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at)
              VALUES ('poison-1', 'order', 'p1', 'order.shipped.v1', ?, 'pending', 0, 0)`,
        args: [JSON.stringify({ eventId: 'poison-1', type: 'order.shipped.v1', aggregateType: 'order', aggregateId: 'p1', aggregateVersion: 1, occurredAt: '2026-01-01T00:00:00.000Z', data: {} })],
      });
      const deps = relayDeps(t, nats.url, { stream, settings: { prefix: stream.prefix, backoffBaseMs: 10, maxBackoffMs: 20 } });
      const stop = new AbortController();
      const running = createRelay(deps).run({ signal: stop.signal, timeLimitMs: 20_000 });
      const good = await place(t, 3);
      deps.wake.notify();
      for (let i = 0; i < 400; i++) {
        const rows = await outboxRows(t);
        if (rows.find((r) => r.id === 'poison-1')?.status === 'failed' && rows.filter((r) => r.status === 'sent').length === 3) break;
        await new Promise((r) => setTimeout(r, 25));
      }
      const rows = await outboxRows(t);
      const poison = rows.find((r) => r.id === 'poison-1')!;
      expect(poison).toMatchObject({ status: 'failed', attempts: 5 });
      expect(poison.lastError).toContain('order.shipped.v1');
      expect(rows.filter((r) => good.includes(r.aggregateId)).every((r) => r.status === 'sent')).toBe(true);

      // re-queued under a registry that now knows the type, it is published once
      stop.abort();
      await running;
      const requeued = await t.deps.writer.write((tx) => requeueFailed(tx, 'poison-1', Date.now()));
      expect(requeued).toBe(1);
      expect((await outboxRows(t)).find((r) => r.id === 'poison-1')).toMatchObject({ status: 'pending', attempts: 0 });
      const fixed = createEventRegistry({ ...orderEventSchemas, 'order.shipped.v1': (await import('zod')).z.object({}) });
      await drainOutbox(relayDeps(t, nats.url, { stream, registry: fixed, settings: { prefix: stream.prefix } }));
      expect((await outboxRows(t)).find((r) => r.id === 'poison-1')?.status).toBe('sent');
      expect((await readStream(nc, stream.name)).filter((m) => m.headers['Nats-Msg-Id'] === 'poison-1')).toHaveLength(1);
    } finally {
      await nc.close();
      t.close();
    }
  });

  it('a commit in the same process wakes the relay without waiting for the poll interval', async () => {
    const t = await createTestDb();
    try {
      const stream = ownStream();
      const deps = relayDeps(t, nats.url, { stream, pollMs: 60_000, settings: { prefix: stream.prefix } });
      const stop = new AbortController();
      const running = createRelay(deps).run({ signal: stop.signal, maxMessages: 1 });
      await new Promise((r) => setTimeout(r, 300)); // the relay is now asleep for up to a minute
      await place(t, 1);
      deps.wake.notify();
      const summary = await Promise.race([running, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 10_000))]);
      stop.abort();
      expect(summary).toMatchObject({ published: 1 });
    } finally {
      t.close();
    }
  });
});

describe('relay - database contention', () => {
  it('a database locked by another process past the busy timeout makes the relay back off, not stop, and nothing is lost', async () => {
    const t = await createTestDb();
    const { createClient } = await import('@libsql/client');
    const { createDatabase } = await import('../../src/db/open-database.ts');
    const { createWriter } = await import('../../src/db/writer.ts');
    const relayClient = createClient({ url: t.url, timeout: 100 });
    const locker = createClient({ url: t.url });
    const nc = await natsClient(nats.url);
    try {
      const stream = ownStream();
      await place(t, 3);
      const db = createDatabase(relayClient);
      const deps = relayDeps(t, nats.url, { db, writer: createWriter(db), stream, settings: { prefix: stream.prefix } });
      const lock = await locker.transaction('write');
      await lock.execute("UPDATE outbox SET headers = headers WHERE id = 'none'");
      const stop = new AbortController();
      const running = createRelay(deps).run({ signal: stop.signal, timeLimitMs: 20_000 });
      // published, but the mark-sent write cannot get the lock
      expect(await eventually(async () => (await readStream(nc, stream.name).catch(() => [])).length === 3)).toBe(true);
      await new Promise((r) => setTimeout(r, 400));
      expect((await outboxRows(t)).every((r) => r.status === 'pending')).toBe(true);
      await lock.rollback();
      expect(await eventually(async () => (await outboxRows(t)).every((r) => r.status === 'sent'))).toBe(true);
      stop.abort();
      await running;
      expect(await readStream(nc, stream.name)).toHaveLength(3);
    } finally {
      await nc.close();
      relayClient.close();
      locker.close();
      t.close();
    }
  });
});
