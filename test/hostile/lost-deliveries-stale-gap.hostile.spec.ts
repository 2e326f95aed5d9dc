import { jetstream } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { eventually } from '../support/eventually.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { sharedDurableRun } from '../support/shared-durable-run.ts';
import { useNats } from '../support/use-nats.ts';
import { appliedEvents, recorder, eventIds, recordingDb } from '../support/recording-subscriber.ts';

// An awaited message that someone else acknowledged (so the broker never delivers it again) is given up on after one
// wait (1.5 × ack_wait + 1 s of pulling), even when the consumer's last delivery went to another puller: the runner
// waits on only for deliveries made since its last check that never reached it, not for an old gap. (A failing event
// of another aggregate keeps the ack floor below the acknowledged one.)

const nats = useNats();

describe('lost deliveries - an old gap re-arms every expired wait', () => {
  it('gives up on an awaited event acknowledged elsewhere within about one wait, even when the last delivery of the consumer went to another puller', async () => {
    const ackWaitMs = 4000; // one wait: 7 s of pulling
    const stream = await freshStream(nats().nc, 'STALEGAP');
    await using sdb = await recordingDb();
    const a = `stale-a-${process.pid}`;
    const p = `stale-poison-${process.pid}`;
    const sub = recorder('stalegap', ['account.opened.v1'], { failingFor: p });
    const [a1, a2, a3] = [openedEvent({ accountId: a }), openedEvent({ accountId: a, version: 2 }), openedEvent({ accountId: a, version: 3 })];
    const poison = openedEvent({ accountId: p });
    await using run = await sharedDurableRun(nats().url, sdb, sub, stream, { ackWaitMs, timeLimitMs: 55_000 });
    const { info, other: thief } = run;
    await publishEvents(nats().nc, stream, [poison, a1!]);
    await eventually(async () => (await appliedEvents(sdb)).length === 1, { what: 'a1 applied (the poison event retried, held)' });
    const durable = await jetstream(thief).consumers.get(stream.name, 'stalegap');

    run.pulling = false;
    await eventually(async () => (await info()).num_waiting === 0, { what: 'no pull request of the runner left' });
    await publishEvents(nats().nc, stream, [a2!]);
    const stolen = await durable.next({ expires: 2000 });
    expect(stolen?.headers?.get('Nats-Msg-Id')).toBe(a2!.eventId);
    stolen!.ack(); // acknowledged by someone after all: never delivered again
    await publishEvents(nats().nc, stream, [a3!]);
    run.pulling = true;
    await eventually(
      async () => {
        const now = await info(); // one snapshot of both counts
        return now.num_ack_pending === 2 && now.num_waiting > 0;
      },
      { what: 'a3 held by the run' },
    );

    // the last delivery of the consumer goes to the other puller (an event the subscriber ignores)
    run.pulling = false;
    await eventually(async () => (await info()).num_waiting === 0, { what: 'no pull request of the runner left' });
    await publishEvents(nats().nc, stream, [creditedEvent({ accountId: `stale-b-${process.pid}` })]);
    const last = await durable.next({ expires: 2000 });
    expect(last).toBeTruthy();
    last!.ack();
    run.pulling = true;

    // a2 will never come back: a3 should be applied after at most about one wait (7 s), not never
    await eventually(async () => (await appliedEvents(sdb)).length === 2, { timeoutMs: 25_000, what: 'a3 applied after giving up on a2' }).catch(
      () => undefined,
    );
    const applied = await appliedEvents(sdb);
    expect(applied).toEqual(eventIds([a1!, a3!]));
  }, 60_000);
});
