import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { testRunner } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient } from '../support/nats.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { appliedEvents, eventIds, recorder, recordingDb } from '../support/recording-subscriber.ts';

// The durable is deleted while the run awaits a delivery another puller took, and the run re-creates it (deliver
// all): the new durable delivers everything again, the inbox drops what was applied, and the awaited event still
// comes before the later one of its aggregate. No check's ephemeral consumer is left on the stream.

const nats = useNats();

describe('lost deliveries - durable consumer deleted mid-run', () => {
  it('applies an awaited event before the later event of its aggregate when the durable is deleted and re-created while it is awaited, and leaves no consumer of its checks behind', async () => {
    const ackWaitMs = 20_000; // the thief's a2 would come back only after 20 s: the re-created durable brings it sooner
    const stream = await freshStream(nats().nc, 'RECON');
    await using sdb = await recordingDb();
    const a = `recon-a-${process.pid}`;
    const b = `recon-b-${process.pid}`;
    const [a1, a2, a3] = [openedEvent({ accountId: a }), creditedEvent({ accountId: a, version: 2 }), creditedEvent({ accountId: a, version: 3 })];
    const [b1, b2] = [openedEvent({ accountId: b }), creditedEvent({ accountId: b, version: 2 })];
    const jsm = await jetstreamManager(nats().nc);
    const info = () => jsm.consumers.info(stream.name, 'recon');

    let pulling = true;
    const stop = new AbortController();
    const running = testRunner(sdb, nats().url, recorder('recon'), stream, { ackWaitMs, pullExpiresMs: 1000 }).run({
      signal: stop.signal,
      timeLimitMs: 50_000,
      lease: { mayPull: () => pulling, holds: () => true },
    });
    const thief = await natsClient(nats().url);
    try {
      await publishEvents(nats().nc, stream, [a1!, b1!]);
      await eventually(async () => (await appliedEvents(sdb)).length === 2, { what: 'a1 and b1 applied' });
      pulling = false;
      await eventually(async () => (await info()).num_waiting === 0, { what: 'no pull request of the runner left at the broker' });
      await publishEvents(nats().nc, stream, [a2!]);
      const stolen = await (await jetstream(thief).consumers.get(stream.name, 'recon')).next({ expires: 2000 });
      expect(stolen?.headers?.get('Nats-Msg-Id')).toBe(a2!.eventId);
      await publishEvents(nats().nc, stream, [a3!, b2!]);
      pulling = true;
      await eventually(async () => (await appliedEvents(sdb)).includes(b2!.eventId), { what: 'b2 applied' });
      expect(await appliedEvents(sdb)).not.toContain(a3!.eventId);

      await jsm.consumers.delete(stream.name, 'recon');
      await eventually(async () => (await appliedEvents(sdb)).length === 5, { timeoutMs: 15_000, what: 'a2 from the re-created durable, then a3' });
      expect((await appliedEvents(sdb)).filter((id) => eventIds([a1!, a2!, a3!]).includes(id))).toEqual(eventIds([a1!, a2!, a3!]));
      await eventually(async () => (await info()).num_ack_pending === 0, { what: 'all acknowledged on the new durable' });
    } finally {
      await thief.close();
      stop.abort();
      await running.catch(() => undefined);
    }
    const names: string[] = [];
    for await (const c of jsm.consumers.list(stream.name)) names.push(c.name);
    expect(names).toEqual(['recon']);
  }, 60_000);
});
