import { jetstream } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { openedEvent } from '../support/accounts.ts';
import { eventually } from '../support/eventually.ts';
import { appliedEvents, recorder, recordingDb } from '../support/recording-subscriber.ts';
import { freshStream, publishEvents, publishRaw } from '../support/stream.ts';
import { sharedDurableRun } from '../support/shared-durable-run.ts';
import { useNats } from '../support/use-nats.ts';

// An awaited event another puller acknowledged (the broker never delivers it again) while a failing event of another
// aggregate, retried by the run, keeps the ack floor below it: the run gives up on it once the consumer shows nothing
// unacknowledged outside the run. Here events of other aggregates keep flowing through the run the whole time, so
// at the moment it asks there may be deliveries and acknowledgements in flight, counted by the broker and not by
// the run: the aggregate must still go on within a few waits, not wait on for as long as the traffic lasts. (An
// in-flight count in each of a wait's questions costs one more wait, so the bound is about seven waits: 38.5 s of
// pulling here, and the test allows 60 s for a loaded machine.)

const nats = useNats();

describe('lost deliveries - waiting on while other aggregates keep flowing', () => {
  it('applies the later event within a few waits when the awaited one was acknowledged elsewhere and other events keep flowing through the run', async () => {
    const ackWaitMs = 3000; // one wait: 5.5 s of pulling
    const stream = await freshStream(nats().nc, 'WAITONFLOW');
    await using sdb = await recordingDb();
    const tag = `${process.pid}-${Date.now()}`;
    const a = `flow-a-${tag}`;
    const p = `flow-poison-${tag}`;
    const sub = recorder('waitonflow', undefined, { failingFor: p });
    const [a1, a2, a3] = [openedEvent({ accountId: a }), openedEvent({ accountId: a, version: 2 }), openedEvent({ accountId: a, version: 3 })];
    const poison = openedEvent({ accountId: p });
    await using run = await sharedDurableRun(nats().url, sdb, sub, stream, { ackWaitMs, timeLimitMs: 85_000 });
    const { info, lines, other } = run;
    let flowing = true;
    let flow: Promise<void> | undefined;
    try {
      await publishEvents(nats().nc, stream, [poison, a1]);
      await eventually(async () => (await appliedEvents(sdb)).includes(a1.eventId), { what: 'a1 applied (the poison event retried, held)' });
      const durable = await jetstream(other).consumers.get(stream.name, 'waitonflow');

      run.pulling = false;
      await eventually(async () => (await info()).num_waiting === 0, { what: 'no pull request of the run left' });
      await publishEvents(nats().nc, stream, [a2]);
      const taken = await durable.next({ expires: 2000 });
      expect(taken?.headers?.get('Nats-Msg-Id')).toBe(a2.eventId);
      taken!.ack(); // acknowledged by someone after all: never delivered again
      await publishEvents(nats().nc, stream, [a3]);
      run.pulling = true;
      await eventually(async () => (await info()).num_ack_pending === 2, { what: 'a3 held by the run' });

      // other aggregates keep flowing: about 400 events a second, each of a new aggregate
      let n = 0;
      flow = (async () => {
        while (flowing) {
          const e = openedEvent({ accountId: `flow-x-${tag}-${n++}` });
          await publishRaw(nats().nc, stream, e, e.eventId).catch(() => undefined);
          if (n % 4 === 0) await new Promise((r) => setTimeout(r, 5));
        }
      })();

      const started = Date.now();
      await eventually(async () => (await appliedEvents(sdb)).includes(a3.eventId), { timeoutMs: 60_000, what: 'a3 applied' }).catch(() => undefined);
      const tookMs = Date.now() - started;
      flowing = false;
      await flow;
      const waits = lines.filter((l) => l.includes('waiting for messages') || l.includes('stopped waiting'));
      const applied = await appliedEvents(sdb);
      expect(applied.length).toBeGreaterThan(300); // the traffic did flow
      expect(applied.includes(a3.eventId), `a3 still waiting after ${tookMs} ms of traffic (${n} events); the run logged:\n${waits.join('\n')}`).toBe(true);
      expect(applied.includes(a2.eventId)).toBe(false);
      console.log(`${n} events; a3 applied after ${tookMs} ms; ${waits.length} wait lines:\n${waits.join('\n')}`);
    } finally {
      flowing = false;
      await flow;
    }
  }, 90_000);
});
