import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { testRunner } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient } from '../support/nats.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { appliedEvents, eventIds, recorder, recordingDb } from '../support/recording-subscriber.ts';

// Deliveries the broker made that a run never received (taken by another puller, lost in flight, or held by a run
// that died) come back only after ack_wait; the run must not apply a later event of their aggregate before them.

const nats = useNats();

describe('inbox - deliveries the run never received', () => {
  it('holds a later event of an aggregate whose earlier delivery went to another puller until it is delivered again, while other aggregates flow', async () => {
    const stream = await freshStream(nats().nc, 'LOST');
    await using sdb = await recordingDb();
    const a = `lost-a-${process.pid}`;
    const b = `lost-b-${process.pid}`;
    const [a1, a2, a3] = [openedEvent({ accountId: a }), creditedEvent({ accountId: a, version: 2 }), creditedEvent({ accountId: a, version: 3 })];
    const [b1, b2] = [openedEvent({ accountId: b }), creditedEvent({ accountId: b, version: 2 })];
    const jsm = await jetstreamManager(nats().nc);
    const info = () => jsm.consumers.info(stream.name, 'lost');

    let pulling = true;
    const stop = new AbortController();
    const running = testRunner(sdb, nats().url, recorder('lost'), stream, { ackWaitMs: 3000, pullExpiresMs: 1000 }).run({
      signal: stop.signal,
      timeLimitMs: 30_000,
      lease: { mayPull: () => pulling, holds: () => true },
    });
    await publishEvents(nats().nc, stream, [a1!, b1!]);
    await eventually(async () => (await appliedEvents(sdb)).length === 2, { what: 'a1 and b1 applied' });

    // the runner stops asking; once its last pull request expired, another client takes a2's delivery and never answers
    pulling = false;
    await eventually(async () => (await info()).num_waiting === 0, { what: 'no pull request of the runner left at the broker' });
    await publishEvents(nats().nc, stream, [a2!]);
    const thief = await natsClient(nats().url);
    try {
      const stolen = await (await jetstream(thief).consumers.get(stream.name, 'lost')).next({ expires: 2000 });
      expect(stolen?.headers?.get('Nats-Msg-Id')).toBe(a2!.eventId);
      await publishEvents(nats().nc, stream, [a3!, b2!]);
      pulling = true;

      await eventually(async () => (await appliedEvents(sdb)).includes(b2!.eventId), { what: 'b2 applied' });
      // a3 arrived with b2; a2 is due again only once its ack_wait ran out
      expect(await appliedEvents(sdb)).not.toContain(a3!.eventId);
      await eventually(async () => (await appliedEvents(sdb)).length === 5, { timeoutMs: 15_000, what: 'a2 delivered again, then a3' });
    } finally {
      await thief.close();
    }
    stop.abort();
    const summary = await running;
    const order = await appliedEvents(sdb);
    expect(order.filter((id) => eventIds([a1!, a2!, a3!]).includes(id))).toEqual(eventIds([a1!, a2!, a3!]));
    expect(order.filter((id) => eventIds([b1!, b2!]).includes(id))).toEqual(eventIds([b1!, b2!]));
    expect(summary).toMatchObject({ processed: 5, duplicates: 0, deadLettered: 0 });
    expect(await info()).toMatchObject({ num_ack_pending: 0 });
  });

  it('does not wait for a message an earlier run applied and died before acknowledging: later events of its aggregate go on at once', async () => {
    const stream = await freshStream(nats().nc, 'APPL');
    await using sdb = await recordingDb();
    const a = `applied-a-${process.pid}`;
    const [a1, a2] = [openedEvent({ accountId: a }), creditedEvent({ accountId: a, version: 2 })];
    const jsm = await jetstreamManager(nats().nc);
    const info = () => jsm.consumers.info(stream.name, 'appl');
    const ackWaitMs = 20_000;

    const crash = new Error('killed between commit and ack');
    const first = testRunner(sdb, nats().url, recorder('appl'), stream, {
      ackWaitMs,
      faults: {
        afterCommit: () => {
          throw crash;
        },
      },
    }).run({ timeLimitMs: 30_000 });
    await publishEvents(nats().nc, stream, [a1!]);
    await expect(first).rejects.toBe(crash);
    expect(await appliedEvents(sdb)).toEqual(eventIds([a1!]));
    expect(await info()).toMatchObject({ num_ack_pending: 1 });

    await publishEvents(nats().nc, stream, [a2!]);
    const stop = new AbortController();
    const second = testRunner(sdb, nats().url, recorder('appl'), stream, { ackWaitMs }).run({ signal: stop.signal, timeLimitMs: 30_000 });
    await eventually(async () => (await appliedEvents(sdb)).length === 2, { what: 'a2 applied' });
    // a1 is still unacknowledged at the broker, never delivered again (its ack_wait is 20 s): the run did not wait
    // for its redelivery to apply a2 (whose own ack may trail its commit by a moment)
    const after = await eventually(
      async () => {
        const now = await info();
        return now.num_ack_pending === 1 ? now : undefined;
      },
      { what: "a2's ack at the broker" },
    );
    expect(after.num_redelivered).toBe(0);
    stop.abort();
    expect(await second).toMatchObject({ processed: 1, duplicates: 0 });
    expect(await appliedEvents(sdb)).toEqual(eventIds([a1!, a2!]));
  });
});
