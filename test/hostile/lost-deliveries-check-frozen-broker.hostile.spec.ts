// A run finds a delivery missing (a1 went to another puller, unanswered) and starts checking which messages it lacks;
// the broker freezes (SIGSTOP) right as the check asks the consumer, so the check's questions fail (the flush before
// each is given up after 2 s, the info request times out). The run must keep a2, which it holds, back until a1 comes
// back: a2 applied while the broker is frozen, before a1, is an aggregate applied out of order.
import { jetstream, jetstreamManager, type JsMsg } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import type { ConsumerRunSummary } from '../../src/inbox/consumer-runner.ts';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { testRunner } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { freezingConnect, msToStop } from '../support/frozen-broker.ts';
import { natsClient, startNats, type NatsServer } from '../support/nats.ts';
import { appliedEvents, logLines, recorder, recordingDb } from '../support/recording-subscriber.ts';
import { freshStream, publishEvents } from '../support/stream.ts';

const OPTIONS = { ackWaitMs: 3000, pullExpiresMs: 1000, maxDeliver: 100_000 }; // a check holds later messages for 5.5 s of pulling time

type FrozenCheck = {
  sdb: Awaited<ReturnType<typeof recordingDb>>;
  events: { warm: IntegrationEvent; a1: IntegrationEvent; a2: IntegrationEvent };
  /** a1 as another puller holds it. */
  a1Msg: JsMsg;
  lines: string[];
  stop: AbortController;
  running: Promise<ConsumerRunSummary>;
  /** A run of the same subscriber without the freezing connection. */
  rerun(signal: AbortSignal): Promise<ConsumerRunSummary>;
};

/**
 * Runs `body` once the run holds a2, lacks a1 (held by another puller, unanswered) and its check has frozen `server` as
 * it asked the consumer; the broker is resumed and everything stopped afterwards.
 */
async function withFrozenCheck(server: NatsServer, tag: string, body: (c: FrozenCheck) => Promise<void>): Promise<void> {
  const nc = await natsClient(server.url);
  const stream = await freshStream(nc, tag);
  await using sdb = await recordingDb();
  const sub = recorder(tag.toLowerCase());
  const id = `${tag}-${process.pid}-${Date.now()}`;
  const events = {
    warm: openedEvent({ accountId: `w-${id}` }),
    a1: openedEvent({ accountId: `a-${id}` }),
    a2: creditedEvent({ accountId: `a-${id}`, version: 2 }),
  };
  const state: { armed: boolean; at?: number } = { armed: false };
  let pulling = true;
  const { log, lines } = logLines();
  const stop = new AbortController();
  const running = testRunner(sdb, server.url, sub, stream, {
    ...OPTIONS,
    log,
    connect: freezingConnect(server, /^\$JS\.API\.CONSUMER\.INFO\./, state, 'checking run'),
  }).run({ signal: stop.signal, timeLimitMs: 80_000, lease: { mayPull: () => pulling, holds: () => true } });
  try {
    await publishEvents(nc, stream, [events.warm]);
    await eventually(async () => (await appliedEvents(sdb)).length === 1, { what: 'the first event applied' });

    // a1 goes to another puller, unanswered
    pulling = false;
    const jsm = await jetstreamManager(nc);
    await eventually(async () => (await jsm.consumers.info(stream.name, sub.name)).num_waiting === 0, { what: 'no pull request of the run left' });
    await publishEvents(nc, stream, [events.a1]);
    const a1Msg = (await (await jetstream(nc).consumers.get(stream.name, sub.name)).next({ expires: 2000 })) as JsMsg;
    expect(a1Msg.headers?.get('Nats-Msg-Id')).toBe(events.a1.eventId);
    await publishEvents(nc, stream, [events.a2]);

    // the run receives a2 out of sequence and checks what it lacks: the broker freezes as it asks
    state.armed = true;
    pulling = true;
    await eventually(() => state.at !== undefined, { what: 'the check asking the consumer', timeoutMs: 10_000 });
    await body({
      sdb,
      events,
      a1Msg,
      lines,
      stop,
      running,
      rerun: (signal) => testRunner(sdb, server.url, sub, stream, OPTIONS).run({ signal, timeLimitMs: 30_000 }),
    });
  } finally {
    server.resume();
    stop.abort();
    await running.catch(() => undefined);
    await nc.close();
  }
}

describe('lost deliveries - a check for missing deliveries while the broker is frozen', () => {
  it('holds a2 back while the broker is frozen during the check, and applies a1 before a2', async () => {
    await using server = await startNats();
    await withFrozenCheck(server, 'CHKFRZ', async ({ sdb, events, a1Msg, lines }) => {
      // longer than a wait for a1 lasts (5.5 s of pulling), had the frozen time counted as pulling
      await new Promise((r) => setTimeout(r, 8000));
      const whileFrozen = await appliedEvents(sdb);
      server.resume();

      a1Msg.nak();
      await eventually(async () => (await appliedEvents(sdb)).length >= 3, { timeoutMs: 20_000, what: 'a1 and a2 applied' });
      const applied = await appliedEvents(sdb);
      const checkLines = lines.filter((l) => /deliver|check/.test(l));
      expect({ whileFrozen: whileFrozen.includes(events.a2.eventId), order: applied }, `log lines of the check:\n${checkLines.join('\n')}`).toEqual({
        whileFrozen: false,
        order: [events.warm.eventId, events.a1.eventId, events.a2.eventId],
      });
    });
  }, 90_000);

  it('stops within seconds when stopped while the check waits on the frozen broker, and a1 and a2 are applied in order by the next run', async () => {
    await using server = await startNats();
    await withFrozenCheck(server, 'CHKSTP', async ({ sdb, events, a1Msg, stop, running, rerun }) => {
      await new Promise((r) => setTimeout(r, 3000));
      const ms = await msToStop(() => (stop.abort(), running));
      server.resume();
      expect(ms).toBeLessThan(10_000);
      a1Msg.nak();

      const next = new AbortController();
      const again = rerun(next.signal);
      await eventually(async () => (await appliedEvents(sdb)).length >= 3, { timeoutMs: 20_000, what: 'a1 and a2 applied' });
      next.abort();
      await again;
      expect(await appliedEvents(sdb)).toEqual([events.warm.eventId, events.a1.eventId, events.a2.eventId]);
    });
  }, 90_000);
});
