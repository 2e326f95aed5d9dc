import { describe, expect, it } from 'vitest';
import { eventually } from '../support/eventually.ts';
import { appliedEvents, eventIds, heldBackEvents, recordingDb } from '../support/recording-subscriber.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { sharedDurableRun } from '../support/shared-durable-run.ts';
import { useNats } from '../support/use-nats.ts';

// A run awaits a1 (another puller on the durable holds it and keeps it alive, as a dead owner's late heartbeats do)
// and holds a2 back. When its wait runs out it asks the consumer how many messages are unacknowledged beyond the ones
// it holds. Here one message it holds (P, a handler failure it retries) was acknowledged at the broker by an
// earlier delivery of P (the other puller had it first and answers it late): the broker no longer counts P, the run
// still does, so "unacknowledged outside this run" comes out 0 although a1 is still out there.

const nats = useNats();

describe('lost deliveries - waiting on while a held message was acknowledged through an earlier delivery', () => {
  it('applies a1 before a2 when the run holds a message the broker already counts as acknowledged', async () => {
    const ackWaitMs = 3000; // one wait: 5.5 s of pulling
    const stream = await freshStream(nats().nc, 'WAITONSTALE');
    await using sdb = await recordingDb();
    const { sub, warm, a1, a2, poison } = heldBackEvents('waitonstale');
    await using run = await sharedDurableRun(nats().url, sdb, sub, stream, { ackWaitMs, timeLimitMs: 55_000 });
    const { info, lines } = run;
    let release: (() => void) | undefined;
    try {
      await publishEvents(nats().nc, stream, [warm]);
      await eventually(async () => (await appliedEvents(sdb)).length === 1, { what: 'the first event applied' });

      // the other puller takes P and a1; it keeps a1 alive, lets P's ack_wait run out
      const [pOld, a1Msg] = await run.takeElsewhere([poison, a1]);
      release = run.keepAlive(a1Msg);

      // the run gets a2 (a gap in its deliveries: a check awaits P and a1), then P once its ack_wait ran out
      run.pulling = true;
      await publishEvents(nats().nc, stream, [a2]);
      await eventually(async () => (await info()).delivered.consumer_seq === 5, { timeoutMs: 10_000, what: 'P delivered again, to the run' });
      await new Promise((r) => setTimeout(r, 300)); // the run fails P and holds it, retrying

      // the other puller answers its earlier delivery of P: the broker counts P as acknowledged
      pOld.ack();
      await eventually(async () => (await info()).num_ack_pending === 2, { what: 'only a1 (other puller) and a2 (run) unacknowledged' });
      expect(await appliedEvents(sdb)).toEqual(eventIds([warm]));

      // a1 is still held elsewhere, kept alive: a2 must wait. Let the run's wait run out (5.5 s) twice over
      await new Promise((r) => setTimeout(r, 13_000));
      const early = await appliedEvents(sdb);

      // then the other puller hands a1 back: it reaches the run
      release?.();
      release = undefined;
      a1Msg.nak();
      await eventually(async () => (await appliedEvents(sdb)).length >= 3, { timeoutMs: 15_000, what: 'a1 and a2 applied' }).catch(() => undefined);
      const applied = await appliedEvents(sdb);
      const waits = lines.filter((l) => l.includes('waiting for messages') || l.includes('stopped waiting'));
      expect(early, `a2 applied while a1 was still held elsewhere; the run logged:\n${waits.join('\n')}`).toEqual(eventIds([warm]));
      expect(applied).toEqual(eventIds([warm, a1, a2]));
    } finally {
    }
  }, 60_000);
});
