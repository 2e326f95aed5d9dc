import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { testRunner } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient } from '../support/nats.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';
import { appliedEvents, eventIds, logLines, recorder, recordingDb } from '../support/recording-subscriber.ts';

// While the subscriber's database refuses writes the run stops pulling, so a delivery it awaits cannot reach it: the
// wait (1.5 × ack_wait + 1 s) must not run down meanwhile, even when the outage outlasts it.

const nats = useNats();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('lost deliveries - the subscriber database refuses writes meanwhile', () => {
  it('still applies a lost event before the later event of its aggregate when a database outage outlasts 1.5 × ack_wait + 1 s', async () => {
    const stream = await freshStream(nats().nc, 'LDB');
    await using sdb = await recordingDb({ busyTimeoutMs: 200 });
    await using holder = await startWriteLockHolder(sdb.url);
    const a = `ldb-a-${process.pid}`;
    const b = `ldb-b-${process.pid}`;
    const [a1, a2, a3] = [openedEvent({ accountId: a }), creditedEvent({ accountId: a, version: 2 }), creditedEvent({ accountId: a, version: 3 })];
    const [b1, b2] = [openedEvent({ accountId: b }), creditedEvent({ accountId: b, version: 2 })];
    const jsm = await jetstreamManager(nats().nc);
    const info = () => jsm.consumers.info(stream.name, 'ldb');
    const ackWaitMs = 3000; // one wait lasts 1.5 × 3000 + 1000 = 5500 ms of pulling

    const { log, lines } = logLines();
    let pulling = true;
    const stop = new AbortController();
    const runner = testRunner(sdb, nats().url, recorder('ldb'), stream, { ackWaitMs, pullExpiresMs: 1000, log });
    const running = runner.run({ signal: stop.signal, timeLimitMs: 45_000, lease: { mayPull: () => pulling, holds: () => true } });
    await publishEvents(nats().nc, stream, [a1!, b1!]);
    await eventually(async () => (await appliedEvents(sdb)).length === 2, { what: 'a1 and b1 applied' });

    // another process takes the database's write lock (reads still work: the check can read the inbox)
    await holder.lock();
    pulling = false;
    await eventually(async () => (await info()).num_waiting === 0, { what: 'no pull request of the runner left at the broker' });
    await publishEvents(nats().nc, stream, [a2!]);
    const thief = await natsClient(nats().url);
    try {
      const stolen = await (await jetstream(thief).consumers.get(stream.name, 'ldb')).next({ expires: 2000 });
      expect(stolen?.headers?.get('Nats-Msg-Id')).toBe(a2!.eventId);
      await publishEvents(nats().nc, stream, [a3!, b2!]);
      pulling = true;
      // a3 arrives after a gap in the delivery sequence: a2 is awaited; b2's write fails on the lock
      await eventually(() => lines.some((l) => l.includes('waiting for messages delivered but never received')), { what: 'a2 awaited' });
      await eventually(() => runner.databaseState() === 'unavailable', { what: 'the database refusing writes' });
      // the outage lasts past a2's redelivery (3 s after it was stolen) and past the run's wait for it (5.5 s)
      await sleep(8000);
      await holder.release();
      await eventually(async () => (await appliedEvents(sdb)).length === 5, { timeoutMs: 20_000, what: 'every event applied' });
    } finally {
      await thief.close();
    }
    stop.abort();
    const summary = await running;
    const order = await appliedEvents(sdb);
    expect(order.filter((id) => eventIds([b1!, b2!]).includes(id))).toEqual(eventIds([b1!, b2!]));
    expect(
      order.filter((id) => eventIds([a1!, a2!, a3!]).includes(id)),
      `log:\n${lines.join('\n')}`,
    ).toEqual(eventIds([a1!, a2!, a3!]));
    expect(summary).toMatchObject({ processed: 5, duplicates: 0, deadLettered: 0 });
  });
});
