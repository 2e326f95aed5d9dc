import { jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import type { Writer } from '../../src/db/writer.ts';
import { listDeadLetters } from '../../src/inbox/dead-letters.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { creditedEvent, testSubscriber } from '../support/accounts.ts';
import { createSubscriberDb, testRunner } from '../support/consumer.ts';
import { countRows } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { balances, readOwnerBalance } from '../support/fixture/subscribers/balances/subscriber.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';

// The subscriber's own database stops taking writes (another process holds its write lock past the busy timeout):
// no message may lose a delivery, let alone be lost, however long that lasts.

const nats = useNats();

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const consumerInfo = async (stream: string, name: string) => (await jetstreamManager(nats().nc)).consumers.info(stream, name);
const hasConsumer = (stream: string, name: string) => async () =>
  consumerInfo(stream, name).then(
    () => true,
    () => false,
  );

// Small settings, so the lock outlasts the whole delivery budget: max_deliver 3 × (ack_wait 1 s + retry delay ≤ 0.2 s).
const settings = { ackWaitMs: 1000, maxDeliver: 3 };
const LOCK_MS = 8000;

describe('inbox - its database unavailable', () => {
  it('holds every message while another process keeps its database write-locked past max_deliver × (ack_wait + retry delay), then applies each once without spending a delivery', async () => {
    const stream = await freshStream(nats().nc, 'LOCK');
    await using sdb = await createSubscriberDb({ subscriber: 'balances', busyTimeoutMs: 200 });
    await using holder = await startWriteLockHolder(sdb.url);
    const metrics = createMetrics();
    const runner = testRunner(sdb, nats().url, balances, stream, { ...settings, metrics });
    const stop = new AbortController();
    const running = runner.run({ signal: stop.signal, timeLimitMs: 50_000 });
    await eventually(hasConsumer(stream.name, 'balances'), { what: 'the durable consumer' });

    await holder.lock();
    const events = Array.from({ length: 12 }, (_, i) => creditedEvent({ owner: `locked-${i % 3}`, amountCents: 10 + i }));
    await publishEvents(nats().nc, stream, events);
    await sleep(LOCK_MS);

    expect(runner.databaseState()).toBe('unavailable');
    expect(await countRows(sdb.client, 'inbox')).toBe(0);
    const during = await consumerInfo(stream.name, 'balances');
    expect(during).toMatchObject({ num_ack_pending: 12, num_redelivered: 0, num_pending: 0 });
    expect(during.delivered.consumer_seq).toBe(12);
    expect(await metrics.render()).toContain('inbox_database_available{consumer="balances"} 0');

    await holder.release();
    await eventually(async () => (await countRows(sdb.client, 'inbox')) === 12, { what: 'every event applied' });
    stop.abort();
    const summary = await running;

    expect(summary).toMatchObject({ processed: 12, duplicates: 0, deadLettered: 0, retried: 0 });
    expect(summary.databaseErrors).toBeGreaterThan(0);
    expect(runner.databaseState()).toBe('ok');
    expect(await countRows(sdb.client, 'dead_letters')).toBe(0);
    for (let c = 0; c < 3; c++) {
      const mine = events.filter((_, i) => i % 3 === c);
      expect(await readOwnerBalance(sdb.db, `locked-${c}`)).toMatchObject({ creditedCents: mine.reduce((sum, e) => sum + e.data.amountCents, 0) });
    }
    // each message was delivered once and acknowledged: no delivery of the budget was spent on the outage
    const after = await consumerInfo(stream.name, 'balances');
    expect(after).toMatchObject({ num_ack_pending: 0, num_redelivered: 0, num_pending: 0 });
    expect(after.delivered.consumer_seq).toBe(12);
    const text = await metrics.render();
    expect(text).toMatch(new RegExp(`inbox_infrastructure_errors_total\\{consumer="balances"\\} ${summary.databaseErrors}\\n`));
    expect(text).toContain('inbox_database_available{consumer="balances"} 1');
  });

  it('keeps a message whose dead-letter write fails on the database lock until the dead letter is committed, and the later event of its aggregate waits for it', async () => {
    const stream = await freshStream(nats().nc, 'DLQ');
    await using sdb = await createSubscriberDb({ subscriber: 'balances', busyTimeoutMs: 200 });
    await using holder = await startWriteLockHolder(sdb.url);
    const poison = creditedEvent({ owner: 'dlq-owner', accountId: `dlq-account-${process.pid}`, amountCents: 1 });
    const next = creditedEvent({ owner: 'dlq-owner', accountId: poison.aggregateId, amountCents: 2 });

    let failures = 0;
    let lockBeforeNextWrite = false;
    let lockedAt = 0;
    const picky = testSubscriber('picky', async (tx, event) => {
      await balances.handle(tx, event);
      if (event.eventId !== poison.eventId) return;
      // the max_deliver-th failure: the write that stores its dead letter comes next, and finds the database locked
      if (++failures === settings.maxDeliver) lockBeforeNextWrite = true;
      throw new Error('cannot handle this credit');
    });
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
    const runner = testRunner(sdb, nats().url, picky, stream, { ...settings, writer });
    const stop = new AbortController();
    const running = runner.run({ signal: stop.signal, timeLimitMs: 40_000 });
    await publishEvents(nats().nc, stream, [poison, next]);

    await eventually(async () => lockedAt > 0, { what: 'the dead-letter write to meet the lock' });
    await sleep(3 * settings.ackWaitMs);
    expect(runner.databaseState()).toBe('unavailable');
    expect(await listDeadLetters(sdb.db, 'picky')).toEqual([]);
    expect(await readOwnerBalance(sdb.db, 'dlq-owner')).toMatchObject({ creditedCents: 0 });
    // still held at the broker on its first delivery: the failures were counted in-process, the outage not at all
    expect(await consumerInfo(stream.name, 'picky')).toMatchObject({ num_ack_pending: 2, num_redelivered: 0 });

    await holder.release();
    await eventually(async () => (await readOwnerBalance(sdb.db, 'dlq-owner')).creditedCents === 2, { what: 'the later event applied' });
    stop.abort();
    const summary = await running;

    const [dead, ...others] = await listDeadLetters(sdb.db, 'picky');
    expect(others).toEqual([]);
    expect(dead).toMatchObject({ eventId: poison.eventId, deliveries: settings.maxDeliver });
    expect(dead!.error).toContain('cannot handle this credit');
    expect(await readOwnerBalance(sdb.db, 'dlq-owner')).toMatchObject({ creditedCents: 2 });
    expect(summary).toMatchObject({ processed: 1, deadLettered: 1, retried: settings.maxDeliver - 1 });
    expect(summary.databaseErrors).toBeGreaterThan(0);
    expect(await consumerInfo(stream.name, 'picky')).toMatchObject({ num_ack_pending: 0, num_redelivered: 0 });
  });
});
