import { describe, expect, it } from 'vitest';
import { eventually } from '../support/eventually.ts';
import { appliedEvents, eventIds, heldBackEvents, recordingDb } from '../support/recording-subscriber.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { sharedDurableRun } from '../support/shared-durable-run.ts';
import { useNats } from '../support/use-nats.ts';
import { MAX_WAIT_EXTENSIONS } from '../../src/inbox/missing-deliveries.ts';

// Another puller on the durable took a1 and a2; it acknowledged a1 (the broker never delivers it again) and handed
// a2 back, which the broker delivers to the run (delivery count 2). A failing event of another aggregate, P, that the
// run holds first-hand keeps the ack floor below a1, so the run awaits a1 and holds a2 back. Nothing is
// unacknowledged at the broker but what the run itself holds (P and a2). The run cannot count a2 as its own (it got
// a2 as a redelivery: the other puller could have acknowledged it through its first delivery), so a2 looks like a
// message held elsewhere; the wait for a1 goes on, but not for as long as P is retried: a2 goes on after at most
// MAX_WAIT_EXTENSIONS more waits.

const nats = useNats();

describe('lost deliveries - confirm with only the run’s own messages unacknowledged, one of them a redelivery', () => {
  it('applies a2 within a few waits when a1 was acknowledged elsewhere and the run itself holds a2 as a redelivery', async () => {
    const ackWaitMs = 3000;
    const waitMs = 1.5 * ackWaitMs + 1000; // one wait, in pulling time
    const stream = await freshStream(nats().nc, 'CONFIRMREDELIVERED');
    await using sdb = await recordingDb();
    const { sub, warm, a1, a2, poison } = heldBackEvents('confirmredelivered');
    await using run = await sharedDurableRun(nats().url, sdb, sub, stream, { ackWaitMs, timeLimitMs: 58_000 });
    const { info, lines } = run;
    await publishEvents(nats().nc, stream, [warm, poison]);
    await eventually(async () => (await appliedEvents(sdb)).length === 1, { what: 'the first event applied' });
    await eventually(async () => lines.some((l) => l.includes('message failed')), { what: 'the run failing P, holding it' });

    const [a1Msg, a2Msg] = await run.takeElsewhere([a1, a2]);
    await a1Msg.ackAck(); // acknowledged by someone: never delivered again
    a2Msg.nak(); // handed back: delivered again, to the run
    run.pulling = true;
    await eventually(async () => (await info()).delivered.consumer_seq === 5, { what: 'a2 delivered again, to the run' });
    await eventually(async () => (await info()).num_ack_pending === 2, { what: 'only P and a2 (both held by the run) unacknowledged' });

    const started = Date.now();
    await eventually(async () => (await appliedEvents(sdb)).includes(a2.eventId), {
      timeoutMs: (MAX_WAIT_EXTENSIONS + 1) * waitMs + 10_000,
      what: 'a2 applied',
    }).catch(() => undefined);
    const tookMs = Date.now() - started;
    const applied = await appliedEvents(sdb);
    const waits = lines.filter((l) => /waiting for messages|stopped waiting/.test(l));
    const now = await info();
    expect(
      applied,
      `a2 still held back after ${tookMs} ms although only the run's own messages are unacknowledged (num_ack_pending ${now.num_ack_pending}, ack floor ${now.ack_floor.stream_seq}); the run logged:\n${waits.join('\n')}`,
    ).toEqual(eventIds([warm, a2]));
  }, 90_000);
});
