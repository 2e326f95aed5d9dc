import { describe, expect, it } from 'vitest';
import { createAckPublisher } from '../../src/nats/ack-publisher.ts';
import { requeueFailed } from '../../src/outbox/failed-rows.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { relayPass } from '../../src/outbox/relay-pass.ts';
import type { PendingRow } from '../../src/outbox/relay-store.ts';
import { accountCommands, expectResponse } from '../support/accounts.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { createRandom } from '../support/random.ts';
import { relayDeps } from '../support/relay.ts';
import { createStream, ownStream, readStream, type StreamEntry } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

async function rowsInSeqOrder(t: TestDb) {
  const res = await t.client.execute('SELECT seq, id, aggregate_id, status, attempts FROM outbox ORDER BY seq');
  return res.rows.map((r) => ({
    seq: Number(r.seq),
    id: String(r.id),
    aggregateId: String(r.aggregate_id),
    status: String(r.status),
    attempts: Number(r.attempts),
  }));
}

/** Closes the account: its second event. */
async function close(t: TestDb, accountId: string) {
  expectResponse(await accountCommands(t.deps).close(accountId));
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
  it('never publishes a later event of an aggregate whose earlier event is parked, when the stream rejects that event and a backlog of full batches surrounds it', async () => {
    await using t = await createTestDb();
    const stream = ownStream('ORDER');
    const accounts = accountCommands(t.deps);
    // An operator created the stream with a small maximum message size: an ~11 KB event is a genuine poison row.
    await createStream(nats().nc, { ...stream, maxMsgSize: 4096 });
    const big = await accounts.open('big');
    await t.client.execute({
      sql: `UPDATE outbox SET payload = json_set(payload, '$.data.accountId', ?) WHERE aggregate_id = ?`,
      args: [big + 'x'.repeat(11_000), big],
    });
    await accounts.openMany(1500);
    await close(t, big);
    await accounts.openMany(1500);

    const deps = relayDeps(t, nats().url, { stream, settings: { batch: 100, backoffBaseMs: 5, maxBackoffMs: 40, maxAttempts: 4 } });
    await createRelay(deps).run({ untilIdle: true, timeLimitMs: 60_000 });
    await eventually(async () => (await rowsInSeqOrder(t)).filter((r) => r.status === 'pending').length === 1, {
      timeoutMs: 30_000,
      what: 'one row left pending',
    });

    const rows = await rowsInSeqOrder(t);
    expect(rows.filter((r) => r.aggregateId === big).map((r) => r.status)).toEqual(['failed', 'pending']);
    const msgs = await readStream(nats().nc, stream);
    expect(msgs.filter((m) => m.headers['Aggregate-Id'] === big)).toEqual([]);
    expect(msgs).toHaveLength(3000);
    await expectPerAggregatePrefix(t, msgs);
  });

  it('publishes a row that failed once before the later rows of its aggregate, and its due retry waits at most one pass under continuous full batches', async () => {
    await using t = await createTestDb();
    const stream = ownStream('ORDER');
    const accounts = accountCommands(t.deps);
    const victim = await accounts.open('victim');
    await accounts.openMany(400);
    await close(t, victim);
    await accounts.openMany(2000);
    const [openedRow] = (await rowsInSeqOrder(t)).filter((r) => r.aggregateId === victim);

    // Time moves one second per pass, so the retry (back-off of at most 40 ms) is due at the very next pass.
    let now = Date.now();
    let pass = 0;
    const passOf = new Map<string, number[]>();
    let failedOnce = false;
    const deps = relayDeps(t, nats().url, {
      stream,
      clock: () => new Date(now),
      settings: { batch: 50, backoffBaseMs: 20, maxBackoffMs: 40 },
      faults: {
        beforePublishing(rows: PendingRow[]) {
          pass++;
          now += 1000;
          for (const r of rows) passOf.set(r.id, [...(passOf.get(r.id) ?? []), pass]);
        },
        beforePublish(row) {
          if (row.id === openedRow!.id && !failedOnce) {
            failedOnce = true;
            return new Error('rejected once by a fault');
          }
          return undefined;
        },
      },
    });
    await createRelay(deps).run({ untilIdle: true, timeLimitMs: 60_000 });

    const [failedIn, retriedIn] = passOf.get(openedRow!.id)!;
    expect(retriedIn! - failedIn!).toBeLessThanOrEqual(2); // the pass that recorded the failure, then the next one
    expect(retriedIn!).toBeLessThan(pass - 10); // long before the backlog ended
    const msgs = await readStream(nats().nc, stream);
    expect(msgs.filter((m) => m.headers['Aggregate-Id'] === victim).map((m) => m.headers['Event-Type'])).toEqual(['account.opened.v1', 'account.closed.v1']);
    await expectPerAggregatePrefix(t, msgs);
    expect((await rowsInSeqOrder(t)).every((r) => r.status === 'sent')).toBe(true);
  });

  it('a parked row re-queued by an operator during a backlog is published before the later rows of its aggregate', async () => {
    await using t = await createTestDb();
    const stream = ownStream('ORDER');
    const accounts = accountCommands(t.deps);
    const victim = await accounts.open('victim');
    const [openedRow] = (await rowsInSeqOrder(t)).filter((r) => r.aggregateId === victim);
    let rejecting = true;
    const faults = { beforePublish: (row: PendingRow) => (rejecting && row.id === openedRow!.id ? new Error('rejected until fixed') : undefined) };
    const settings = { batch: 50, backoffBaseMs: 5, maxBackoffMs: 10, maxAttempts: 2 };
    const parking = new AbortController();
    const parkingRun = createRelay(relayDeps(t, nats().url, { stream, settings, faults })).run({ signal: parking.signal, timeLimitMs: 20_000 });
    await eventually(async () => (await rowsInSeqOrder(t)).find((r) => r.id === openedRow!.id)?.status === 'failed', {
      timeoutMs: 10_000,
      what: 'the row parked',
    });
    parking.abort();
    await parkingRun;

    // a backlog with the parked row's aggregate continuing in the middle of it
    await accounts.openMany(2500);
    await close(t, victim);
    await accounts.openMany(500);
    const stop = new AbortController();
    const running = createRelay(relayDeps(t, nats().url, { stream, settings, faults })).run({ signal: stop.signal, timeLimitMs: 60_000 });
    // the backlog is being drained in full batches when the operator fixes the cause and re-queues the row
    await eventually(async () => (await rowsInSeqOrder(t)).filter((r) => r.status === 'sent').length >= 100, {
      timeoutMs: 20_000,
      everyMs: 5,
      what: 'the backlog draining',
    });
    rejecting = false;
    expect(await t.deps.writer.write((tx) => requeueFailed(tx, openedRow!.id, Date.now()))).toBe(1);
    await eventually(async () => (await rowsInSeqOrder(t)).every((r) => r.status === 'sent'), { timeoutMs: 30_000, what: 'every row sent' });
    stop.abort();
    await running;

    const msgs = await readStream(nats().nc, stream);
    expect(msgs.filter((m) => m.headers['Aggregate-Id'] === victim).map((m) => m.headers['Event-Type'])).toEqual(['account.opened.v1', 'account.closed.v1']);
    await expectPerAggregatePrefix(t, msgs);
  });

  it('a relay whose floor passed a held row reads it again once another relay publishes the row that held it, and publishes nothing of that aggregate out of order', async () => {
    await using t = await createTestDb();
    const stream = ownStream('ORDER');
    const accounts = accountCommands(t.deps);
    const victim = await accounts.open('victim');
    expectResponse(await accounts.deposit(victim, 100)); // held behind the opened event once it is parked
    const [openedRow] = (await rowsInSeqOrder(t)).filter((r) => r.aggregateId === victim);
    let rejecting = true;
    const faults = { beforePublish: (row: PendingRow) => (rejecting && row.id === openedRow!.id ? new Error('rejected until fixed') : undefined) };
    const settings = { batch: 50, backoffBaseMs: 5, maxBackoffMs: 10, maxAttempts: 1 };

    // relay X parks the opened event, reads past the held deposit (its floor moves above it), then sleeps
    const x = relayDeps(t, nats().url, { stream, settings, faults, pollMs: 60_000 });
    const stopX = new AbortController();
    const runningX = createRelay(x).run({ signal: stopX.signal, timeLimitMs: 60_000 });
    await eventually(async () => (await rowsInSeqOrder(t)).find((r) => r.id === openedRow!.id)?.status === 'failed', { what: 'the opened event parked' });
    x.wake.notify(); // one more pass: nothing publishable, the floor now stands above the held deposit
    await new Promise((r) => setTimeout(r, 200));

    // an operator fixes the cause and re-queues; a pass of another process outside X's leases (a relay of an older
    // release during a rollout, or a pass driven by hand) publishes the row
    rejecting = false;
    expect(await t.deps.writer.write((tx) => requeueFailed(tx, openedRow!.id))).toBe(1);
    const y = await relayPass(relayDeps(t, nats().url, { stream, settings: { ...settings, batch: 1 } }), createAckPublisher(nats().nc, 5000));
    expect(y.published).toBe(1);

    // a new event of the aggregate wakes X: it must publish the held deposit first
    expectResponse(await accounts.close(victim));
    x.wake.notify();
    await eventually(async () => (await rowsInSeqOrder(t)).every((r) => r.status === 'sent'), { timeoutMs: 20_000, what: 'every row sent' });
    stopX.abort();
    await runningX;
    const msgs = await readStream(nats().nc, stream);
    expect(msgs.filter((m) => m.headers['Aggregate-Id'] === victim).map((m) => m.headers['Event-Type'])).toEqual([
      'account.opened.v1',
      'account.credited.v1',
      'account.closed.v1',
    ]);
    await expectPerAggregatePrefix(t, msgs);
  });

  it('keeps per-aggregate order when the process that wrote the earlier row has a clock 2 s ahead of the relay, and does not wait for that clock', async () => {
    await using t = await createTestDb();
    const stream = ownStream('ORDER');
    const id = await accountCommands({ ...t.deps, clock: () => new Date(Date.now() + 2000) }).open('skewed');
    expectResponse(await accountCommands({ ...t.deps, clock: () => new Date(Date.now() - 2000) }).close(id));

    const summary = await createRelay(relayDeps(t, nats().url, { stream })).run({ untilIdle: true, timeLimitMs: 20_000 });
    expect(summary.published).toBe(2); // one idle-terminated run: nothing was left waiting for the writer's clock
    const msgs = await readStream(nats().nc, stream);
    expect(msgs.map((m) => m.headers['Event-Type'])).toEqual(['account.opened.v1', 'account.closed.v1']);
  });

  it('holds per-aggregate order for random backlogs, batch sizes, failures, clocks and re-queues (seeded)', async () => {
    for (const seed of [1, 2, 3]) {
      const rnd = createRandom(seed);
      await using t = await createTestDb();
      const stream = ownStream('ORDER');
      const accounts = accountCommands(t.deps);
      const ids: string[] = [];
      for (let i = 0; i < 40; i++) {
        const skew = rnd.int(-3000, 3000);
        ids.push(await accountCommands({ ...t.deps, clock: () => new Date(Date.now() + skew) }).open(`r-${i}`));
        if (rnd.chance(0.3)) await accounts.openMany(rnd.int(1, 60));
      }
      for (const id of ids) {
        if (rnd.chance(0.4)) expectResponse(await accounts.deposit(id, rnd.int(1, 1000)));
        if (rnd.chance(0.6)) await close(t, id);
      }
      await accounts.openMany(300);

      const doomed = new Set(ids.filter(() => rnd.chance(0.1)));
      const flaky = new Map<string, number>();
      const faults = {
        beforePublish(row: PendingRow) {
          if (doomed.has(row.aggregate_id) && row.message_type === 'account.opened.v1') return new Error('poison');
          const n = flaky.get(row.id) ?? (rnd.chance(0.05) ? rnd.int(1, 2) : 0);
          flaky.set(row.id, Math.max(0, n - 1));
          return n > 0 ? new Error('flaky') : undefined;
        },
      };
      const settings = { batch: rnd.int(5, 40), maxInFlight: rnd.int(1, 64), backoffBaseMs: 5, maxBackoffMs: 20, maxAttempts: 3 };
      const stop = new AbortController();
      const running = createRelay(relayDeps(t, nats().url, { stream, settings, faults })).run({ signal: stop.signal, timeLimitMs: 60_000 });
      // an operator re-queues whatever is parked while more commands keep arriving
      for (let k = 0; k < 5; k++) {
        await accounts.openMany(100);
        await new Promise((r) => setTimeout(r, 30));
        if (rnd.chance(0.5)) await t.deps.writer.write((tx) => requeueFailed(tx, undefined, Date.now()));
      }
      const settled = async () => (await rowsInSeqOrder(t)).every((r) => r.status !== 'pending' || doomed.has(r.aggregateId));
      await eventually(settled, { timeoutMs: 30_000, what: `seed ${seed} settled` });
      stop.abort();
      await running;
      await expectPerAggregatePrefix(t, await readStream(nats().nc, stream));
    }
  });
});
