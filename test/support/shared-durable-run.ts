import { jetstream, jetstreamManager, type ConsumerInfo, type JsMsg } from '@nats-io/jetstream';
import { expect } from 'vitest';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Subscriber } from '../../src/inbox/subscriber.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { testRunner, type SubscriberDb } from './consumer.ts';
import { eventually } from './eventually.ts';
import { natsClient } from './nats.ts';
import { logLines } from './recording-subscriber.ts';
import { publishEvents } from './stream.ts';

/**
 * A run of a subscriber whose pulling the test switches off and on (as a lease's `mayPull` would), a second
 * connection that can pull on the same durable (another puller, an old owner), the durable's info and the run's
 * log lines. Dispose closes the other connection, stops the run and waits for it.
 */
export type SharedDurableRun = {
  /** Whether the run may send pull requests; it holds what it has either way. */
  pulling: boolean;
  other: NatsConnection;
  lines: string[];
  info(): Promise<ConsumerInfo>;
  stop: AbortController;
  running: Promise<unknown>;
  /**
   * Switches the run's pulling off until none of its pull requests is left, publishes `events` and takes them on the
   * other connection (each checked to be the event published), unanswered; the caller switches pulling on again.
   */
  takeElsewhere<const E extends readonly IntegrationEvent[]>(events: E): Promise<{ [K in keyof E]: JsMsg }>;
  /** Keeps `m` alive from the other connection (a progress heartbeat every quarter ack_wait) until the returned stop. */
  keepAlive(m: JsMsg): () => void;
  [Symbol.asyncDispose](): Promise<void>;
};

/** Starts `sub` (its durable named after it) on `stream` with `ackWaitMs`, 1 s pull requests and no practical max_deliver. */
export async function sharedDurableRun(
  natsUrl: string,
  sdb: SubscriberDb,
  sub: Subscriber,
  stream: StreamSettings,
  options: { ackWaitMs: number; timeLimitMs?: number },
): Promise<SharedDurableRun> {
  const { log, lines } = logLines();
  const stop = new AbortController();
  const other = await natsClient(natsUrl);
  const jsm = await jetstreamManager(other);
  const timers = new Set<ReturnType<typeof setInterval>>();
  const run: SharedDurableRun = {
    pulling: true,
    other,
    lines,
    info: () => jsm.consumers.info(stream.name, sub.name),
    stop,
    running: Promise.resolve(),
    async takeElsewhere(events) {
      run.pulling = false;
      await eventually(async () => (await run.info()).num_waiting === 0, { what: 'no pull request of the run left' });
      await publishEvents(other, stream, events);
      const durable = await jetstream(other).consumers.get(stream.name, sub.name);
      const taken: JsMsg[] = [];
      for (let i = 0; i < events.length; i++) taken.push((await durable.next({ expires: 2000 })) as JsMsg);
      expect(taken.map((m) => m?.headers?.get('Nats-Msg-Id'))).toEqual(events.map((e) => e.eventId));
      return taken as never;
    },
    keepAlive(m) {
      const timer = setInterval(() => m.working(), options.ackWaitMs / 4);
      timers.add(timer);
      return () => {
        clearInterval(timer);
        timers.delete(timer);
      };
    },
    async [Symbol.asyncDispose]() {
      for (const timer of timers) clearInterval(timer);
      await other.close().catch(() => undefined);
      stop.abort();
      await run.running.catch(() => undefined);
    },
  };
  run.running = testRunner(sdb, natsUrl, sub, stream, { ackWaitMs: options.ackWaitMs, pullExpiresMs: 1000, maxDeliver: 100_000, log }).run({
    signal: stop.signal,
    timeLimitMs: options.timeLimitMs ?? 58_000,
    lease: { mayPull: () => run.pulling, holds: () => true },
  });
  return run;
}
