import { jetstream, jetstreamManager, type Consumer, type ConsumerInfo, type JsMsg } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../logger.ts';
import { CONNECT_RETRY_MS, connectUnlessStopped, type ConnectNats } from '../nats/connect.ts';
import { ensureConsumer, UnsafeConsumerConfigError, type ConsumerSettings } from '../nats/ensure-consumer.ts';
import { ensureStream, STREAM_RECREATE_SETTLE_MS, UnsafeStreamConfigError } from '../nats/ensure-stream.ts';
import { unlessStopped } from '../worker/unless-stopped.ts';
import type { StreamSettings } from '../nats/stream-settings.ts';
import type { BackoffSettings } from '../worker/backoff.ts';
import type { BrokerState } from '../worker/broker-state.ts';
import { createOutageBackoff } from '../worker/outage-backoff.ts';
import { describeError } from './handle-once.ts';

/** A durable consumer ready to pull from, with its info, and its stream's creation time (new once re-created). */
export type PullSession = { nc: NatsConnection; consumer: Consumer; streamCreated: string; info: ConsumerInfo };

/** The runner's side of pulling: how much it can take, where messages go, what it is told. */
export type PullTarget = {
  /** Resolves with how many more messages may be pulled now (at least 1), or 0 once the runner is stopping. */
  room(): Promise<number>;
  /** A delivery of the consumer of the last `ready` session. */
  admit(m: JsMsg): void;
  /** A connection was opened; the runner closes the last one when it is done. */
  connected(nc: NatsConnection): void;
  /** The stream and the consumer were ensured (at start, and again after they failed or disappeared). */
  ready(session: PullSession): void;
  brokerState(state: BrokerState, error?: unknown): void;
  brokerError(): void;
  /** A pull request went out (true), or the last one ended (false). */
  pulling(active: boolean): void;
};

export type PullSettings = {
  name: string;
  connect: ConnectNats;
  stream: StreamSettings;
  consumer: ConsumerSettings;
  log: Logger;
  backoff: BackoffSettings;
  /** How long one pull request waits for messages (at least 1000; the client expects heartbeats at half of it). */
  expiresMs: number;
};

/**
 * Pulls messages for a runner until `signal` aborts: connects (retrying with back-off, at least every
 * CONNECT_RETRY_MS), ensures the stream and the durable pull consumer, then fetches at most `room()` messages at a
 * time, so nothing is pulled that the runner cannot take. When a pull fails (the consumer or the stream was deleted, the server's heartbeats stopped, the
 * broker went away) it backs off and ensures both again on the same connection, so the messages the runner holds
 * can still be answered. Rejects only on an unsafe stream or consumer configuration.
 */
export async function pullMessages(s: PullSettings, target: PullTarget, signal: AbortSignal): Promise<void> {
  const outage = createOutageBackoff(s.backoff);
  const failed = async (error: unknown, maxMs?: number) => {
    if (error instanceof UnsafeStreamConfigError || error instanceof UnsafeConsumerConfigError) throw error;
    if (signal.aborted) return;
    target.brokerError();
    target.brokerState('unavailable', error);
    await outage.backOff(signal, maxMs);
  };

  /** The stream was ensured before: finding it missing means it was deleted or lost since. */
  let streamUsed = false;
  while (!signal.aborted) {
    let nc: NatsConnection;
    try {
      const opened = await connectUnlessStopped(s.connect, signal);
      if (!opened) break;
      nc = opened;
    } catch (error) {
      // without a connection no reconnect can end the wait: try connecting again at least every CONNECT_RETRY_MS
      await failed(error, CONNECT_RETRY_MS);
      continue;
    }
    target.connected(nc);
    void followConnection(nc, target.brokerState);
    while (!signal.aborted && !nc.isClosed()) {
      try {
        // a stop does not wait for a broker that does not answer these requests: nothing is held yet
        const ensured = await unlessStopped(
          (async () => {
            const jsm = await jetstreamManager(nc);
            // a stream this runner used and finds gone is created again only once its deletion has had time to finish
            const stream = await ensureStream(jsm, s.stream, undefined, { settleMs: streamUsed ? STREAM_RECREATE_SETTLE_MS : 0, signal });
            streamUsed = true;
            const info = await ensureConsumer(jsm, s.consumer);
            return { stream, info, consumer: await jetstream(nc).consumers.get(s.stream.name, s.consumer.name) };
          })(),
          signal,
        );
        if (!ensured) break;
        const { stream, info, consumer } = ensured;
        target.ready({ nc, consumer, streamCreated: stream.created, info });
        target.brokerState('connected');
        for (;;) {
          const n = await target.room();
          if (n <= 0 || signal.aborted) break;
          target.pulling(true);
          try {
            const messages = await consumer.fetch({ max_messages: n, expires: s.expiresMs });
            const close = () => void messages.close();
            signal.addEventListener('abort', close, { once: true });
            try {
              for await (const m of messages) target.admit(m);
            } finally {
              signal.removeEventListener('abort', close);
            }
          } finally {
            target.pulling(false);
          }
          outage.reset();
        }
      } catch (error) {
        if (!signal.aborted && outage.failures() === 0)
          s.log.warn('consumer: pulling failed; ensuring the stream and the consumer again', { consumer: s.name, error: describeError(error) });
        await failed(error);
      }
    }
  }
}

/** Mirrors the connection's own reconnects into the runner's state, for /ready. */
async function followConnection(nc: NatsConnection, setState: (s: BrokerState, error?: unknown) => void): Promise<void> {
  for await (const s of nc.status()) {
    if (s.type === 'disconnect') setState('unavailable', 'disconnected');
    else if (s.type === 'reconnect') setState('connected');
  }
}
