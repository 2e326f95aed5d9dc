// A check for missing deliveries whose read of the stream answers slowly (the broker takes longer than one wait to
// create the check's ephemeral reader: a loaded meta leader, a backed-up JetStream API; here the request to create it
// goes out 8 s late) holds writes back while the read is in flight. While it reads, a second delivery goes missing:
// b1 goes to another puller (another instance, which holds it for a moment and hands it back with a nak, as a
// stopping run does), and the run receives b2 out of sequence. The check under way must look again for that one and
// give it a wait of its own: an earlier version dropped the second pass once the read ended past the deadline, so b1
// was never awaited and b2 was applied before it.
import { jetstream, jetstreamManager, type JsMsg } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { describe, expect, it } from 'vitest';
import { natsConnectionOptions } from '../../src/nats/connect.ts';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { testRunner } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient } from '../support/nats.ts';
import { appliedEvents, logLines, recorder, recordingDb } from '../support/recording-subscriber.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();
const ACK_WAIT_MS = 2000; // one wait: 1.5 × 2 s + 1 s = 4 s of pulling time
const SLOW_READ_MS = 8000; // the first check's reader is created this late: the read outlasts the wait

/** A `connect` whose first request to create an unnamed (ephemeral) consumer on `stream`, once armed, goes out `delayMs` late. */
function slowReaderConnect(url: string, stream: () => string, slow: { armed: boolean; at?: number; delayMs: number }) {
  return async (): Promise<NatsConnection> => {
    const nc = await connect(natsConnectionOptions({ servers: [url], name: 'slow reader run' }));
    const request = nc.request.bind(nc);
    nc.request = (async (subject: string, ...rest: unknown[]) => {
      if (slow.armed && slow.at === undefined && subject === `$JS.API.CONSUMER.CREATE.${stream()}`) {
        slow.at = performance.now();
        await new Promise((r) => setTimeout(r, slow.delayMs));
      }
      return (request as (...a: unknown[]) => Promise<unknown>)(subject, ...rest);
    }) as NatsConnection['request'];
    return nc;
  };
}

describe('lost deliveries - a delivery lost while a slow check reads the stream', () => {
  it('holds b2 back until b1 comes back when b1 went missing while a check that outlasts its wait was reading', async () => {
    const stream = await freshStream(nats().nc, 'SLOWRD');
    await using sdb = await recordingDb();
    const sub = recorder('slowrd');
    const id = `${process.pid}-${Date.now()}`;
    const warm = openedEvent({ accountId: `w-${id}` });
    const [x1, x2] = [openedEvent({ accountId: `x-${id}` }), creditedEvent({ accountId: `x-${id}`, version: 2 })];
    const [b1, b2] = [openedEvent({ accountId: `b-${id}` }), creditedEvent({ accountId: `b-${id}`, version: 2 })];
    const jsm = await jetstreamManager(nats().nc);
    const info = () => jsm.consumers.info(stream.name, sub.name);
    const slow: { armed: boolean; at?: number; delayMs: number } = { armed: false, delayMs: SLOW_READ_MS };
    const { log, lines } = logLines();

    let pulling = true;
    const stop = new AbortController();
    const running = testRunner(sdb, nats().url, sub, stream, {
      ackWaitMs: ACK_WAIT_MS,
      pullExpiresMs: 1000,
      log,
      connect: slowReaderConnect(nats().url, () => stream.name, slow),
    }).run({ signal: stop.signal, timeLimitMs: 55_000, lease: { mayPull: () => pulling, holds: () => true } });
    const other = await natsClient(nats().url);
    let keepB1: ReturnType<typeof setInterval> | undefined;
    try {
      await publishEvents(nats().nc, stream, [warm]);
      await eventually(async () => (await appliedEvents(sdb)).length === 1, { what: 'the first event applied' });
      await new Promise((r) => setTimeout(r, 500)); // the run's probe of the stream read is done
      const durable = await jetstream(other).consumers.get(stream.name, sub.name);
      /** The run's pull requests step aside for a moment: `event` is published and goes to the other puller. */
      const takeNext = async (event: typeof warm): Promise<JsMsg> => {
        pulling = false;
        await eventually(async () => (await info()).num_waiting === 0, { what: 'no pull request of the run left' });
        await publishEvents(nats().nc, stream, [event]);
        const m = await durable.next({ expires: 2000 });
        if (!m) throw new Error('the other puller got nothing');
        return m;
      };

      // x1 goes to the other puller; the run receives x2 out of sequence and checks: its read is slow
      slow.armed = true;
      const x1Msg = await takeNext(x1);
      expect(x1Msg.headers?.get('Nats-Msg-Id')).toBe(x1.eventId);
      await publishEvents(nats().nc, stream, [x2]);
      pulling = true;
      await eventually(() => slow.at !== undefined, { what: 'the check reading the stream', timeoutMs: 10_000 });
      x1Msg.nak(); // x1 comes back to the run at once
      await eventually(async () => (await info()).num_ack_pending === 2, { what: 'x1 and x2 held by the run' });

      // while the check reads, b1 goes to the other puller (kept alive there), and the run receives b2 out of sequence
      const b1Msg = await takeNext(b1);
      expect(b1Msg.headers?.get('Nats-Msg-Id')).toBe(b1.eventId);
      keepB1 = setInterval(() => b1Msg.working(), 400);
      await publishEvents(nats().nc, stream, [b2]);
      pulling = true;
      await eventually(async () => (await info()).num_ack_pending === 4, { what: 'b2 delivered to the run' });
      expect(performance.now() - slow.at!).toBeLessThan(SLOW_READ_MS); // the read is still in flight

      // the slow read ends (after the check's wait ran out): x1 and x2 are applied
      await eventually(async () => (await appliedEvents(sdb)).includes(x2.eventId), { what: 'x1 and x2 applied', timeoutMs: 20_000 });
      await new Promise((r) => setTimeout(r, 300));
      // the other puller hands b1 back well within one wait: the run gets it at once
      clearInterval(keepB1);
      keepB1 = undefined;
      b1Msg.nak();
      await eventually(async () => (await appliedEvents(sdb)).length === 5, { what: 'every event applied', timeoutMs: 20_000 });

      const applied = await appliedEvents(sdb);
      const order = applied.filter((e) => e === b1.eventId || e === b2.eventId);
      expect(order, `applied: ${JSON.stringify(applied)}\nlog of the check:\n${lines.join('\n')}`).toEqual([b1.eventId, b2.eventId]);
    } finally {
      if (keepB1) clearInterval(keepB1);
      await other.close();
      stop.abort();
      await running.catch(() => undefined);
    }
  }, 60_000);
});
