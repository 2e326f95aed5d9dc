import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Logger } from '../../src/logger.ts';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { testRunner } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient, startNats, type NatsServer } from '../support/nats.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import type { NatsConnection } from '@nats-io/transport-node';
import { appliedEvents, eventIds, recorder, recordingDb } from '../support/recording-subscriber.ts';

// A broker killed (kill -9) while a run awaits a delivery it never received: the pull request stays out across the
// outage (the client re-pulls on reconnect), but nothing can be delivered, so the wait must not run down meanwhile;
// the awaited event is applied before the later one of its aggregate once the broker is back.

let server: NatsServer;
let nc: NatsConnection;
beforeAll(async () => {
  server = await startNats();
  nc = await natsClient(server.url);
});
afterAll(async () => {
  await nc?.close().catch(() => undefined);
  await server?.[Symbol.asyncDispose]();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('lost deliveries - broker killed and restarted', () => {
  it('does not apply a later event of an aggregate while the broker is down and its earlier event, taken by another puller, is still awaited', async () => {
    const ackWaitMs = 3000; // a wait gives up after 1.5 × 3 s + 1 s = 5.5 s of pulling time
    const stream = await freshStream(nc, 'BRK');
    await using sdb = await recordingDb();
    const a = `brk-a-${process.pid}`;
    const b = `brk-b-${process.pid}`;
    const [a1, a2, a3] = [openedEvent({ accountId: a }), creditedEvent({ accountId: a, version: 2 }), creditedEvent({ accountId: a, version: 3 })];
    const [b1, b2] = [openedEvent({ accountId: b }), creditedEvent({ accountId: b, version: 2 })];
    const jsm = await jetstreamManager(nc);
    const info = () => jsm.consumers.info(stream.name, 'brk');

    const logs: Array<{ at: number; msg: string }> = [];
    const note = (msg: string) => void logs.push({ at: Date.now(), msg });
    const spy: Logger = { debug: () => undefined, info: note, warn: note, error: note };
    let pulling = true;
    const stop = new AbortController();
    const running = testRunner(sdb, server.url, recorder('brk'), stream, { ackWaitMs, pullExpiresMs: 1000, log: spy }).run({
      signal: stop.signal,
      timeLimitMs: 55_000,
      lease: { mayPull: () => pulling, holds: () => true },
    });
    try {
      await publishEvents(nc, stream, [a1!, b1!]);
      await eventually(async () => (await appliedEvents(sdb)).length === 2, { what: 'a1 and b1 applied' });

      pulling = false;
      await eventually(async () => (await info()).num_waiting === 0, { what: 'no pull request of the runner left at the broker' });
      await publishEvents(nc, stream, [a2!]);
      const thief = await natsClient(server.url);
      const stolen = await (await jetstream(thief).consumers.get(stream.name, 'brk')).next({ expires: 2000 });
      expect(stolen?.headers?.get('Nats-Msg-Id')).toBe(a2!.eventId);
      await thief.close();
      await publishEvents(nc, stream, [a3!, b2!]);
      pulling = true;
      await eventually(async () => (await appliedEvents(sdb)).includes(b2!.eventId), { what: 'b2 applied' });
      expect(await appliedEvents(sdb)).not.toContain(a3!.eventId); // a3 waits for a2

      // the broker dies; a2 is still unacknowledged (it cannot be delivered again while the broker is down)
      await server.kill();
      await sleep(9000); // longer than the 5.5 s wait
      const duringOutage = await appliedEvents(sdb);
      const restartedAt = Date.now();
      await server.restart();

      await eventually(async () => (await appliedEvents(sdb)).length === 5, { timeoutMs: 25_000, what: 'a2 delivered again, then a3' });
      const order = await appliedEvents(sdb);
      const gaveUp = logs.find((l) => l.msg.startsWith('consumer: stopped waiting'));
      expect(gaveUp && gaveUp.at < restartedAt, 'the wait for a2 ran out while the broker was down').toBeFalsy();
      expect(duringOutage, 'a3 applied while the broker was down and a2 still awaited').not.toContain(a3!.eventId);
      expect(order.filter((id) => eventIds([a1!, a2!, a3!]).includes(id))).toEqual(eventIds([a1!, a2!, a3!]));
    } finally {
      stop.abort();
      await running.catch(() => undefined);
    }
  }, 60_000);
});
