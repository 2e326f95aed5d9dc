import { jetstreamManager, type ConsumerInfo } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Subscriber } from '../../src/inbox/subscriber.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { testRunner, type SubscriberDb } from './consumer.ts';
import { natsClient } from './nats.ts';
import { logLines } from './recording-subscriber.ts';

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
  const run: SharedDurableRun = {
    pulling: true,
    other,
    lines,
    info: () => jsm.consumers.info(stream.name, sub.name),
    stop,
    running: Promise.resolve(),
    async [Symbol.asyncDispose]() {
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
