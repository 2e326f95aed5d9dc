import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { testRunner } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient } from '../support/nats.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { appliedEvents, eventIds, recorder, recordingDb } from '../support/recording-subscriber.ts';

// A delivery that went missing can go missing again when the broker delivers it the second time (the same flaky
// connection, the same second puller): the run must look at the awaited message again and wait on for the broker's
// next delivery instead of giving up after the wait that began with the first loss.

const nats = useNats();

describe('lost deliveries - the redelivery of an awaited message goes missing too', () => {
  it('keeps waiting for an earlier event whose first delivery and redelivery both went to another puller, applying the later event of its aggregate only after it', async () => {
    const ackWaitMs = 8000; // one wait lasts 13 s of pulling; the third delivery comes 16 s after the first
    const stream = await freshStream(nats().nc, 'RELOST');
    await using sdb = await recordingDb();
    const a = `relost-a-${process.pid}`;
    const [a1, a2, a3] = [openedEvent({ accountId: a }), creditedEvent({ accountId: a, version: 2 }), creditedEvent({ accountId: a, version: 3 })];
    const jsm = await jetstreamManager(nats().nc);
    const info = () => jsm.consumers.info(stream.name, 'relost');

    let pulling = true;
    const stop = new AbortController();
    const running = testRunner(sdb, nats().url, recorder('relost'), stream, { ackWaitMs, pullExpiresMs: 1000 }).run({
      signal: stop.signal,
      timeLimitMs: 55_000,
      lease: { mayPull: () => pulling, holds: () => true },
    });
    const thief = await natsClient(nats().url);
    try {
      await publishEvents(nats().nc, stream, [a1!]);
      await eventually(async () => (await appliedEvents(sdb)).length === 1, { what: 'a1 applied' });
      const durable = await jetstream(thief).consumers.get(stream.name, 'relost');

      pulling = false;
      await eventually(async () => (await info()).num_waiting === 0, { what: 'no pull request of the runner left at the broker' });
      await publishEvents(nats().nc, stream, [a2!]);
      const stolen = await durable.next({ expires: 2000 });
      const stolenAt = Date.now();
      expect(stolen?.headers?.get('Nats-Msg-Id')).toBe(a2!.eventId);
      await publishEvents(nats().nc, stream, [a3!]);
      pulling = true;
      await eventually(
        async () => {
          const now = await info(); // one snapshot of both counts
          return now.num_ack_pending === 2 && now.num_waiting > 0;
        },
        { what: 'a3 held by the run' },
      );

      // just before a2's ack_wait runs out, the run's pull requests step aside for a moment: the other puller's comes first
      await new Promise((r) => setTimeout(r, Math.max(0, stolenAt + ackWaitMs - 1500 - Date.now())));
      pulling = false;
      await eventually(async () => (await info()).num_waiting === 0, { what: 'no pull request of the runner left at the broker' });
      const again = durable.next({ expires: 5000 });
      await eventually(async () => (await info()).num_waiting === 1, { what: 'the other puller waits' });
      pulling = true;
      const stolenAgain = await again;
      expect(stolenAgain?.headers?.get('Nats-Msg-Id')).toBe(a2!.eventId);
      expect(stolenAgain?.info.deliveryCount).toBe(2);
      expect(await appliedEvents(sdb)).toEqual(eventIds([a1!]));

      await eventually(async () => (await appliedEvents(sdb)).length === 3, { timeoutMs: 25_000, what: 'a2 delivered a third time, then a3' });
      expect(await appliedEvents(sdb)).toEqual(eventIds([a1!, a2!, a3!]));
    } finally {
      await thief.close();
      stop.abort();
      await running.catch(() => undefined);
    }
  }, 60_000);
});
