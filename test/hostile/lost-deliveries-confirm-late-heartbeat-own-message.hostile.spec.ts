import { createInbox, type Msg } from '@nats-io/nats-core';
import { describe, expect, it } from 'vitest';
import { eventually } from '../support/eventually.ts';
import { appliedEvents, eventIds, heldBackEvents, recordingDb } from '../support/recording-subscriber.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { sharedDurableRun } from '../support/shared-durable-run.ts';
import { useNats } from '../support/use-nats.ts';

// The run holds P (a handler failure it retries), first delivered to it (delivery count 1). The process stalls for
// longer than ack_wait (the event loop is blocked: a long synchronous call), so its progress heartbeats for P come
// late; P's ack_wait runs out and the broker delivers P again, to another puller on the durable, which acknowledges
// it. The run still holds its first-hand copy of P and counts it as a message "no other puller can have answered".
// Later the run awaits a1 (the other puller holds it and keeps it alive) and holds a2 back. When its wait runs out it
// asks the consumer: num_ack_pending (a1 + a2) minus what it counts as its own (P + a2) is 0.

const nats = useNats();

/** Blocks this process's event loop (every timer and socket of the run and of the test) for `ms`. */
const blockEventLoop = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

describe('lost deliveries - confirm after the run’s own first-hand message was acknowledged elsewhere', () => {
  it('applies a1 before a2 when a message first delivered to the run expired during a stall and another puller acknowledged its redelivery', async () => {
    const ackWaitMs = 3000; // one wait: 5.5 s of pulling
    const stream = await freshStream(nats().nc, 'CONFIRMLATEHB');
    await using sdb = await recordingDb();
    const { sub, warm, a1, a2, poison } = heldBackEvents('confirmlatehb');
    await using run = await sharedDurableRun(nats().url, sdb, sub, stream, { ackWaitMs, timeLimitMs: 58_000 });
    const { info, lines, other } = run;
    let release: (() => void) | undefined;
    try {
      await publishEvents(nats().nc, stream, [warm, poison]);
      await eventually(async () => (await appliedEvents(sdb)).length === 1, { what: 'the first event applied' });
      await eventually(async () => lines.some((l) => l.includes('message failed')), { what: 'the run failing P, holding it' });
      await eventually(async () => (await info()).num_ack_pending === 1, { what: 'only P unacknowledged (the first event acknowledged)' });

      // another puller asks for one message, without heartbeats of its own (a raw pull request), for 10 s
      const inbox = createInbox();
      const got: Msg[] = [];
      const s = other.subscribe(inbox, { callback: (_e, m) => void (m.reply?.startsWith('$JS.ACK') && got.push(m)) });
      await other.flush();
      other.publish(`$JS.API.CONSUMER.MSG.NEXT.${stream.name}.confirmlatehb`, JSON.stringify({ batch: 1, expires: 10_000_000_000 }), { reply: inbox });
      await other.flush();

      // the process stalls for longer than ack_wait: the run's heartbeats for P come late, its pull requests expire
      blockEventLoop(ackWaitMs + 1500);

      const pAgain = await eventually(() => got[0], { timeoutMs: 8000, what: 'P delivered again, to the other puller' });
      const [, , , , deliveries] = pAgain.reply!.split('.');
      expect(deliveries).toBe('2');
      pAgain.respond('+ACK');
      s.unsubscribe();
      await eventually(async () => (await info()).num_ack_pending === 0, { what: 'P acknowledged at the broker' });

      // the other puller takes a1 and keeps it alive; the run gets a2 (a gap: it awaits a1)
      const [a1Msg] = await run.takeElsewhere([a1]);
      release = run.keepAlive(a1Msg);
      run.pulling = true;
      await publishEvents(nats().nc, stream, [a2]);
      await eventually(async () => (await info()).num_ack_pending === 2, { what: 'a1 (other puller) and a2 (run) unacknowledged' });

      // a1 is still held elsewhere: a2 must wait. Let the run's wait run out twice over
      await new Promise((r) => setTimeout(r, 13_000));
      const early = await appliedEvents(sdb);

      release?.();
      release = undefined;
      a1Msg.nak();
      await eventually(async () => (await appliedEvents(sdb)).length >= 3, { timeoutMs: 15_000, what: 'a1 and a2 applied' }).catch(() => undefined);
      const applied = await appliedEvents(sdb);
      const waits = lines.filter((l) => /waiting for messages|stopped waiting/.test(l));
      expect(early, `a2 applied while a1 was still held elsewhere; the run logged:\n${waits.join('\n')}`).toEqual(eventIds([warm]));
      expect(applied).toEqual(eventIds([warm, a1, a2]));
    } finally {
    }
  }, 60_000);
});
