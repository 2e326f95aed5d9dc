import { jetstream, jetstreamManager, type JsMsg } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { testRunner } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient } from '../support/nats.ts';
import { appliedEvents, eventIds, heldBackEvents, logLines, recordingDb } from '../support/recording-subscriber.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

// The run awaits a1 (another puller holds it and keeps it alive) and holds a2 back. When its wait runs out it asks
// the consumer (a consumer info request, which a plain subscription on the API subject sees too) up to three times,
// 250 ms apart. The run is stopped right between two asks: it stops promptly, hands a2 back and asks nothing more.

const nats = useNats();

async function setUp(name: string) {
  const ackWaitMs = 3000; // one wait: 5.5 s of pulling
  const stream = await freshStream(nats().nc, name.toUpperCase());
  const sdb = await recordingDb();
  const { sub, warm, a1, a2 } = heldBackEvents(name);
  const jsm = await jetstreamManager(nats().nc);
  const info = () => jsm.consumers.info(stream.name, name);
  const { log, lines } = logLines();
  // every consumer info request of the run's durable, as the broker gets it
  const asks: number[] = [];
  const watch = nats().nc.subscribe(`$JS.API.CONSUMER.INFO.${stream.name}.${name}`, { callback: () => void asks.push(Date.now()) });
  await nats().nc.flush();

  let pulling = true;
  const stop = new AbortController();
  let endedAt: number | undefined;
  const running = testRunner(sdb, nats().url, sub, stream, { ackWaitMs, pullExpiresMs: 1000, maxDeliver: 100_000, log })
    .run({ signal: stop.signal, timeLimitMs: 58_000, lease: { mayPull: () => pulling, holds: () => true } })
    .finally(() => (endedAt = Date.now()));
  const other = await natsClient(nats().url);

  await publishEvents(nats().nc, stream, [warm]);
  await eventually(async () => (await appliedEvents(sdb)).length === 1, { what: 'the first event applied' });
  const durable = await jetstream(other).consumers.get(stream.name, name);
  pulling = false;
  await eventually(async () => (await info()).num_waiting === 0, { what: 'no pull request of the run left' });
  await publishEvents(nats().nc, stream, [a1]);
  const a1Msg = (await durable.next({ expires: 2000 })) as JsMsg;
  expect(a1Msg.headers?.get('Nats-Msg-Id')).toBe(a1.eventId);
  const keepAlive = setInterval(() => a1Msg.working(), ackWaitMs / 4);
  pulling = true;
  await publishEvents(nats().nc, stream, [a2]);
  await eventually(async () => (await info()).num_ack_pending === 2, { what: 'a2 held by the run' });
  await eventually(() => lines.some((l) => l.includes('waiting for messages delivered but never received')), { what: 'the run awaiting a1' });

  return {
    sdb,
    info,
    lines,
    asks,
    stop,
    running,
    durable,
    endedAt: () => endedAt,
    events: { warm, a1, a2 },
    async [Symbol.asyncDispose]() {
      clearInterval(keepAlive);
      watch.unsubscribe();
      stop.abort();
      await running.catch(() => undefined);
      await other.close();
      sdb.close();
    },
  };
}

describe('lost deliveries - a stop while the run asks the consumer whether its wait may end', () => {
  it('stops within a second, hands a2 back and asks no more, when stopped between two asks', async () => {
    await using t = await setUp('confirmstoppause');
    // the run's wait runs out after 5.5 s of pulling: it asks; it asks again 250 ms later (a1 is held elsewhere)
    const seen = t.asks.length;
    await eventually(() => t.asks.length > seen, { timeoutMs: 10_000, everyMs: 5, what: 'the run asking the consumer' });
    await new Promise((r) => setTimeout(r, 100)); // inside the 250 ms between two asks
    const stoppedAt = Date.now();
    const asksAtStop = t.asks.length;
    t.stop.abort();
    await t.running;
    const tookMs = t.endedAt()! - stoppedAt;
    await new Promise((r) => setTimeout(r, 600));
    expect(tookMs).toBeLessThan(1000);
    expect(t.asks.length, 'the run asked the consumer after it stopped').toBe(asksAtStop);
    // handed back: another puller gets it at once, not after ack_wait (a nak'd message still counts in num_ack_pending)
    const again = await t.durable.next({ expires: 1500 });
    expect(again?.headers?.get('Nats-Msg-Id')).toBe(t.events.a2.eventId);
    again?.nak();
    expect(await appliedEvents(t.sdb)).toEqual(eventIds([t.events.warm]));
  }, 40_000);
});
