import { jetstreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureStream } from '../../src/nats/ensure-stream.ts';
import { cancelOrder } from '../../src/orders/cancel-order.ts';
import { placeOrder } from '../../src/orders/place-order.ts';
import type { PlaceOrder } from '../../src/orders/order.ts';
import { requeueFailed } from '../../src/outbox/failed-rows.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import type { PendingRow } from '../../src/outbox/relay-store.ts';
import { createRandom } from '../../torture/prng.ts';
import { createTestDb, orderBody, type TestDb } from '../support/db.ts';
import { startNats, type NatsServer } from '../support/nats.ts';
import { natsClient, readStream, relayDeps, TEST_STREAM, type StreamEntry } from '../support/relay.ts';
import { eventually } from '../support/service.ts';

let nats: NatsServer;
beforeAll(async () => {
  nats = await startNats();
});
afterAll(async () => {
  await nats[Symbol.asyncDispose]();
});

let streamNo = 0;
function ownStream() {
  streamNo++;
  return { ...TEST_STREAM, name: `ORDER_T${streamNo}`, prefix: `o${streamNo}` };
}

const body = (over: Partial<PlaceOrder> = {}) => ({ ...orderBody(), ...over }) as PlaceOrder;

/** Places `n` orders in groups sharing commits (the command path, fast). */
async function placeMany(t: TestDb, n: number): Promise<string[]> {
  const orders = await Promise.all(Array.from({ length: n }, (_, i) => t.deps.writer.write((tx) => placeOrder(tx, t.deps, body({ customerId: `bulk-${i % 50}` })))));
  return orders.map((o) => o.id);
}

async function cancel(t: TestDb, orderId: string) {
  const r = await t.deps.writer.write((tx) => cancelOrder(tx, t.deps, { orderId, reason: null }));
  expect(r.outcome).toBe('cancelled');
}

async function rowsInSeqOrder(t: TestDb) {
  const res = await t.client.execute('SELECT seq, id, aggregate_id, status, attempts FROM outbox ORDER BY seq');
  return res.rows.map((r) => ({ seq: Number(r.seq), id: String(r.id), aggregateId: String(r.aggregate_id), status: String(r.status), attempts: Number(r.attempts) }));
}

/**
 * The invariant: for every aggregate, the events on the stream (first copy of each) are exactly the first k of
 * its outbox rows in seq order — a row never reaches the stream while an earlier row of its aggregate has not.
 */
async function expectPerAggregatePrefix(t: TestDb, msgs: StreamEntry[]) {
  const rows = await rowsInSeqOrder(t);
  const byAggregate = new Map<string, string[]>();
  for (const r of rows) byAggregate.set(r.aggregateId, [...(byAggregate.get(r.aggregateId) ?? []), r.id]);
  const seen = new Set<string>();
  const onStream = new Map<string, string[]>();
  for (const m of msgs) {
    const id = m.headers['Nats-Msg-Id']!;
    if (seen.has(id)) continue;
    seen.add(id);
    const agg = m.headers['Aggregate-Id']!;
    onStream.set(agg, [...(onStream.get(agg) ?? []), id]);
  }
  for (const [agg, ids] of onStream) expect(ids, `order of aggregate ${agg}`).toEqual(byAggregate.get(agg)!.slice(0, ids.length));
  // and every row the database calls sent is on the stream
  for (const r of rows) if (r.status === 'sent') expect(seen.has(r.id), `sent row ${r.id} on the stream`).toBe(true);
}

describe('relay - per-aggregate order under a backlog', () => {
  it('never publishes a cancellation whose order event is parked, when the stream rejects that event and a backlog of full batches surrounds it', async () => {
    const t = await createTestDb();
    const nc = await natsClient(nats.url);
    try {
      const stream = ownStream();
      // An operator created the stream with a small maximum message size: the ~11 KB event is a genuine poison row.
      await ensureStream(await jetstreamManager(nc), { ...stream, maxMsgSize: 4096 });
      const bigItems = Array.from({ length: 100 }, (_, i) => ({ sku: `${'x'.repeat(60)}${i}`, quantity: 1, unitPriceCents: 1 }));
      const big = await t.deps.writer.write((tx) => placeOrder(tx, t.deps, body({ customerId: 'big', items: bigItems })));
      await placeMany(t, 1500);
      await cancel(t, big.id);
      await placeMany(t, 1500);

      const deps = relayDeps(t, nats.url, { stream, settings: { prefix: stream.prefix, batch: 100, backoffBaseMs: 5, maxBackoffMs: 40, maxAttempts: 4 } });
      await createRelay(deps).run({ untilIdle: true, timeLimitMs: 60_000 });
      expect(await eventually(async () => (await rowsInSeqOrder(t)).filter((r) => r.status === 'pending').length === 1, 30_000)).toBe(true);

      const rows = await rowsInSeqOrder(t);
      const ofBig = rows.filter((r) => r.aggregateId === big.id);
      expect(ofBig.map((r) => r.status)).toEqual(['failed', 'pending']);
      const msgs = await readStream(nc, stream.name);
      expect(msgs.filter((m) => m.headers['Aggregate-Id'] === big.id)).toEqual([]);
      expect(msgs).toHaveLength(3000);
      await expectPerAggregatePrefix(t, msgs);
    } finally {
      await nc.close();
      t.close();
    }
  });

  it('publishes a row that failed once before the later rows of its aggregate, and its due retry waits at most one pass under continuous full batches', async () => {
    const t = await createTestDb();
    const nc = await natsClient(nats.url);
    try {
      const stream = ownStream();
      const victim = await t.deps.writer.write((tx) => placeOrder(tx, t.deps, body({ customerId: 'victim' })));
      await placeMany(t, 400);
      await cancel(t, victim.id);
      await placeMany(t, 2000);
      const [placedRow] = (await rowsInSeqOrder(t)).filter((r) => r.aggregateId === victim.id);

      // Time moves one second per pass, so the retry (back-off of at most 40 ms) is due at the very next pass.
      let now = Date.now();
      let pass = 0;
      const passOf = new Map<string, number[]>();
      let failedOnce = false;
      const deps = relayDeps(t, nats.url, {
        stream,
        clock: () => new Date(now),
        settings: { prefix: stream.prefix, batch: 50, backoffBaseMs: 20, maxBackoffMs: 40 },
        faults: {
          beforePublishing(rows: PendingRow[]) {
            pass++;
            now += 1000;
            for (const r of rows) passOf.set(r.id, [...(passOf.get(r.id) ?? []), pass]);
          },
          beforePublish(row) {
            if (row.id === placedRow!.id && !failedOnce) {
              failedOnce = true;
              return new Error('rejected once by a fault');
            }
            return undefined;
          },
        },
      });
      await createRelay(deps).run({ untilIdle: true, timeLimitMs: 60_000 });

      const [failedIn, retriedIn] = passOf.get(placedRow!.id)!;
      expect(retriedIn! - failedIn!).toBeLessThanOrEqual(2); // the pass that recorded the failure, then the next one
      expect(retriedIn!).toBeLessThan(pass - 10); // long before the backlog ended
      const msgs = await readStream(nc, stream.name);
      expect(msgs.filter((m) => m.headers['Aggregate-Id'] === victim.id).map((m) => m.headers['Event-Type'])).toEqual(['order.placed.v1', 'order.cancelled.v1']);
      await expectPerAggregatePrefix(t, msgs);
      expect((await rowsInSeqOrder(t)).every((r) => r.status === 'sent')).toBe(true);
    } finally {
      await nc.close();
      t.close();
    }
  });

  it('a parked row re-queued by an operator during a backlog is published before the later rows of its aggregate', async () => {
    const t = await createTestDb();
    const nc = await natsClient(nats.url);
    try {
      const stream = ownStream();
      const victim = await t.deps.writer.write((tx) => placeOrder(tx, t.deps, body({ customerId: 'victim' })));
      const [placedRow] = (await rowsInSeqOrder(t)).filter((r) => r.aggregateId === victim.id);
      let rejecting = true;
      const faults = { beforePublish: (row: PendingRow) => (rejecting && row.id === placedRow!.id ? new Error('rejected until fixed') : undefined) };
      const settings = { prefix: stream.prefix, batch: 50, backoffBaseMs: 5, maxBackoffMs: 10, maxAttempts: 2 };
      const parking = new AbortController();
      const parkingRun = createRelay(relayDeps(t, nats.url, { stream, settings, faults })).run({ signal: parking.signal, timeLimitMs: 20_000 });
      expect(await eventually(async () => (await rowsInSeqOrder(t)).find((r) => r.id === placedRow!.id)?.status === 'failed', 10_000)).toBe(true);
      parking.abort();
      await parkingRun;

      // a backlog with the parked row's aggregate continuing in the middle of it
      await placeMany(t, 2500);
      await cancel(t, victim.id);
      await placeMany(t, 500);
      const deps = relayDeps(t, nats.url, { stream, settings, faults });
      const stop = new AbortController();
      const running = createRelay(deps).run({ signal: stop.signal, timeLimitMs: 60_000 });
      // the backlog is being drained in full batches when the operator fixes the cause and re-queues the row
      expect(await eventually(async () => (await rowsInSeqOrder(t)).filter((r) => r.status === 'sent').length >= 100, 20_000, 5)).toBe(true);
      rejecting = false;
      expect(await t.deps.writer.write((tx) => requeueFailed(tx, placedRow!.id, Date.now()))).toBe(1);
      expect(await eventually(async () => (await rowsInSeqOrder(t)).every((r) => r.status === 'sent'), 30_000)).toBe(true);
      stop.abort();
      await running;

      const msgs = await readStream(nc, stream.name);
      expect(msgs.filter((m) => m.headers['Aggregate-Id'] === victim.id).map((m) => m.headers['Event-Type'])).toEqual(['order.placed.v1', 'order.cancelled.v1']);
      await expectPerAggregatePrefix(t, msgs);
    } finally {
      await nc.close();
      t.close();
    }
  });

  it('keeps per-aggregate order when the process that wrote the earlier row has a clock 2 s ahead of the relay, and does not wait for that clock', async () => {
    const t = await createTestDb();
    const nc = await natsClient(nats.url);
    try {
      const stream = ownStream();
      const ahead = { ...t.deps, clock: () => new Date(Date.now() + 2000) };
      const behind = { ...t.deps, clock: () => new Date(Date.now() - 2000) };
      const order = await t.deps.writer.write((tx) => placeOrder(tx, ahead, body({ customerId: 'skewed' })));
      const r = await t.deps.writer.write((tx) => cancelOrder(tx, behind, { orderId: order.id, reason: null }));
      expect(r.outcome).toBe('cancelled');

      const summary = await createRelay(relayDeps(t, nats.url, { stream, settings: { prefix: stream.prefix } })).run({ untilIdle: true, timeLimitMs: 20_000 });
      expect(summary.published).toBe(2); // one idle-terminated run: nothing was left waiting for the writer's clock
      const msgs = await readStream(nc, stream.name);
      expect(msgs.map((m) => m.headers['Event-Type'])).toEqual(['order.placed.v1', 'order.cancelled.v1']);
    } finally {
      await nc.close();
      t.close();
    }
  });

  it('holds per-aggregate order for random backlogs, batch sizes, failures, clocks and re-queues (seeded)', async () => {
    for (const seed of [1, 2, 3]) {
      const rnd = createRandom(seed);
      const t = await createTestDb();
      const nc = await natsClient(nats.url);
      try {
        const stream = ownStream();
        const orders: string[] = [];
        for (let i = 0; i < 40; i++) {
          const skew = rnd.int(-3000, 3000);
          const writer = { ...t.deps, clock: () => new Date(Date.now() + skew) };
          orders.push((await t.deps.writer.write((tx) => placeOrder(tx, writer, body({ customerId: `r-${i}` })))).id);
          if (rnd.chance(0.3)) await placeMany(t, rnd.int(1, 60));
        }
        for (const id of orders) if (rnd.chance(0.6)) await cancel(t, id);
        await placeMany(t, 300);

        const doomed = new Set(orders.filter(() => rnd.chance(0.1)));
        const flaky = new Map<string, number>();
        const faults = {
          beforePublish(row: PendingRow) {
            if (doomed.has(row.aggregate_id) && row.message_type === 'order.placed.v1') return new Error('poison');
            const n = flaky.get(row.id) ?? (rnd.chance(0.05) ? rnd.int(1, 2) : 0);
            flaky.set(row.id, Math.max(0, n - 1));
            return n > 0 ? new Error('flaky') : undefined;
          },
        };
        const settings = { prefix: stream.prefix, batch: rnd.int(5, 40), maxInFlight: rnd.int(1, 64), backoffBaseMs: 5, maxBackoffMs: 20, maxAttempts: 3 };
        const stop = new AbortController();
        const running = createRelay(relayDeps(t, nats.url, { stream, settings, faults })).run({ signal: stop.signal, timeLimitMs: 60_000 });
        // an operator re-queues whatever is parked while more commands keep arriving
        for (let k = 0; k < 5; k++) {
          await placeMany(t, 100);
          await new Promise((r) => setTimeout(r, 30));
          if (rnd.chance(0.5)) await t.deps.writer.write((tx) => requeueFailed(tx, undefined, Date.now()));
        }
        const settled = async () => (await rowsInSeqOrder(t)).every((r) => r.status !== 'pending' || doomed.has(r.aggregateId));
        expect(await eventually(settled, 30_000)).toBe(true);
        stop.abort();
        await running;
        await expectPerAggregatePrefix(t, await readStream(nc, stream.name));
      } finally {
        await nc.close();
        t.close();
      }
    }
  });
});
