import type { JsMsg } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Database } from '../db/open-database.ts';
import { createWriter, type Writer } from '../db/writer.ts';
import type { EventRegistry } from '../events/registry.ts';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { ConnectNats } from '../nats/connect.ts';
import type { ConsumerSettings } from '../nats/ensure-consumer.ts';
import type { StreamSettings } from '../nats/stream-settings.ts';
import { backoffDelay } from '../outbox/backoff.ts';
import type { BrokerState } from '../outbox/relay.ts';
import { createSignal } from '../signal.ts';
import { createInboxDeps, DEFAULT_MAX_DELIVER, describeError, handleBatch, type InboxDeps, type InboxResult } from './handle-once.ts';
import { createHeldMessages, type HeldMessage } from './held-messages.ts';
import type { InboxMessage } from './inbox-message.ts';
import { pullMessages, type PullSession } from './pull-messages.ts';
import { createRedeliveryBarrier, type RedeliveryBarrier } from './redelivery-barrier.ts';
import { stopWhenIdle } from './stop-when-idle.ts';
import { subscriberAggregates, type Subscriber } from './subscriber.ts';
import { createBatchWrites, type DatabaseState } from './write-until-committed.ts';

export type { DatabaseState } from './write-until-committed.ts';

/** Test-only fault injection at the consumer's dangerous point. */
export type ConsumerFaults = {
  /**
   * Runs after a message's transaction committed and before it is acknowledged. Throwing simulates a crash
   * there: nothing more is acknowledged, the runner stops and `run` rejects with the error.
   */
  afterCommit?(msg: InboxMessage, result: InboxResult): void | Promise<void>;
};

export type ConsumerRunnerOptions = Subscriber & {
  /** The durable consumer's name on the stream (default: the subscriber's name); the service uses `<service>-<subscriber>`. */
  durableName?: string;
  /** The subscriber's own database (never the service's). */
  db: Database;
  /** Its write queue; created over `db` when omitted. Share it with compaction and replay (one queue per database). */
  writer?: Writer;
  registry: EventRegistry;
  log: Logger;
  /** Registry the inbox metrics are registered on. */
  metrics: Metrics;
  connect: ConnectNats;
  /** The same stream settings as the relay: the runner creates the stream when it starts first. */
  stream: StreamSettings;
  clock?: () => Date;
  /** Default 30 000. Held messages are kept alive with a progress heartbeat every quarter of it. */
  ackWaitMs?: number;
  /** Default 10; the consumer's max_deliver and the inbox's dead-letter threshold (handler failures). */
  maxDeliver?: number;
  /** First retry delay of a failing message (default 1000), doubled per attempt up to maxNakDelayMs (default 30 000). */
  nakDelayMs?: number;
  maxNakDelayMs?: number;
  /** Most messages pulled ahead and processed in one write transaction (default 256). */
  batch?: number;
  /** Back-off while the broker is unreachable or the database cannot be written: base (default 1000) doubling up to max (default 30 000). */
  backoffBaseMs?: number;
  maxBackoffMs?: number;
  /** How often an `untilIdle` run asks the broker whether anything is left (default 250). */
  idleCheckMs?: number;
  random?: () => number;
  faults?: ConsumerFaults;
  /** Replaces handleBatch; only for the benchmark that measures what the inbox costs. */
  processBatch?: (msgs: InboxMessage[]) => Promise<InboxResult[]>;
};

export type ConsumerRunOptions = {
  /** Stops pulling when aborted; the batch being written finishes and is acknowledged, the rest is handed back. */
  signal?: AbortSignal;
  timeLimitMs?: number;
  /** Stops once this many messages reached a final outcome (processed, duplicate or dead-lettered). */
  maxMessages?: number;
  /** Stops once the consumer has nothing pending and nothing awaiting acknowledgement (bounded runs, tests). */
  untilIdle?: boolean;
};

export type ConsumerRunSummary = {
  processed: number;
  duplicates: number;
  /** Events of types the subscriber does not handle: acknowledged without an inbox row. */
  ignored: number;
  deadLettered: number;
  /** Handler failures retried in-process. */
  retried: number;
  brokerErrors: number;
  /** Batch writes that failed (database unavailable) and were retried. */
  databaseErrors: number;
};

/** A subscriber's worker; `run` loops until stopped and resolves with what it did. */
export type ConsumerRunner = {
  name: string;
  run(options?: ConsumerRunOptions): Promise<ConsumerRunSummary>;
  /** The broker side, as for the relay. */
  state(): BrokerState;
  databaseState(): DatabaseState;
  /** What handleOnce and replayDeadLetters need for this subscriber (same writer, metrics and max_deliver). */
  inbox: InboxDeps;
};

/**
 * Creates a subscriber's consumer loop. It pulls only what it can take (see pullMessages, which also re-creates a
 * stream or consumer that disappeared) and holds every message, kept alive at the broker with progress heartbeats,
 * until it is answered. Messages go to handleBatch in stream order, up to `batch` per write; each is acked only
 * after that commit, terminated once dead-lettered. Messages of one subject (one aggregate) are applied in stream
 * order: one whose handler failed is retried in-process after a growing delay, its failures counted from its
 * delivery count, and dead-lettered on attempt `maxDeliver`, while the later messages of its subject wait behind
 * it and other subjects flow. A write that fails for any other reason (the database is locked, full, unreachable)
 * is retried as it was, with back-off and no new pulls, charging no message. At the start of a run it applies
 * nothing until what an earlier run left unacknowledged is back (see createRedeliveryBarrier). A stop finishes the
 * write in progress, acks it and hands the rest back in stream order. An unsafe stream or consumer configuration
 * is fatal: `run` rejects.
 */
export function createConsumerRunner(o: ConsumerRunnerOptions): ConsumerRunner {
  const batch = o.batch ?? 256;
  const ackWaitMs = o.ackWaitMs ?? 30_000;
  const maxDeliver = o.maxDeliver ?? DEFAULT_MAX_DELIVER;
  const retryDelay = { baseMs: o.nakDelayMs ?? 1000, maxMs: o.maxNakDelayMs ?? 30_000, random: o.random };
  const backoff = { baseMs: o.backoffBaseMs ?? 1000, maxMs: o.maxBackoffMs ?? 30_000, random: o.random };
  const idleCheckMs = o.idleCheckMs ?? 250;
  // Well inside ack_wait, even when a synchronous database call holds up the timer for a while.
  const heartbeatMs = Math.max(50, Math.floor(ackWaitMs / 4));
  const inbox = createInboxDeps(o, {
    writer: o.writer ?? createWriter(o.db),
    registry: o.registry,
    metrics: o.metrics,
    maxDeliver,
    ...(o.clock ? { clock: o.clock } : {}),
  });
  const processBatch = o.processBatch ?? ((msgs: InboxMessage[]) => handleBatch(inbox, msgs));
  const consumerSettings: ConsumerSettings = {
    stream: o.stream.name,
    name: o.durableName ?? o.name,
    filterSubjects: subscriberAggregates(o, o.registry).map((t) => `${o.stream.prefix}.${t}.>`),
    ackWaitMs,
    // The broker redelivers without limit: a message it stopped redelivering after max_deliver crashes or
    // stalls would be gone without a dead letter. The inbox alone decides when to give up (attempt maxDeliver
    // of a failing handler), and the message is terminated only after its dead letter is committed.
    maxDeliver: -1,
    maxAckPending: Math.max(1000, 4 * batch),
  };
  let brokerState: BrokerState = 'connecting';
  const setState = (next: BrokerState, error?: unknown) => {
    if (next === brokerState) return;
    brokerState = next;
    if (next === 'unavailable') o.log.warn('consumer: broker unavailable, backing off', { consumer: o.name, error: describeError(error) });
    else if (next === 'connected') o.log.info('consumer: consuming', { consumer: o.name, stream: o.stream.name });
  };
  const writes = createBatchWrites({ consumer: o.name, log: o.log, metrics: inbox.metrics, processBatch, backoff });

  return {
    name: o.name,
    inbox,
    state: () => brokerState,
    databaseState: () => writes.state(),
    async run(options = {}) {
      const summary: ConsumerRunSummary = { processed: 0, duplicates: 0, ignored: 0, deadLettered: 0, retried: 0, brokerErrors: 0, databaseErrors: 0 };
      const stop = new AbortController();
      const onAbort = () => stop.abort();
      options.signal?.addEventListener('abort', onAbort, { once: true });
      if (options.signal?.aborted) stop.abort();
      const timeLimit = options.timeLimitMs !== undefined ? setTimeout(onAbort, options.timeLimitMs) : undefined;
      /** Set by a fault that simulates a crash: nothing is answered afterwards. */
      let crash: { error: unknown } | undefined;
      let fatal: { error: unknown } | undefined;
      const held = createHeldMessages();
      const wake = createSignal(); // the write loop: something arrived or became due
      const roomFreed = createSignal(); // the pull loop: a write ended or the database came back
      stop.signal.addEventListener('abort', () => (wake.notify(), roomFreed.notify()), { once: true });
      let nc: NatsConnection | undefined;
      let session: PullSession | undefined;
      let epoch = 0; // bumped when the stream was re-created: its sequence numbers name other messages
      let barrier: RedeliveryBarrier | undefined;
      let writing = false;
      let lastDelivery = Date.now();
      const maxHeld = consumerSettings.maxAckPending;

      /** Answers every copy; never for a stream that was deleted since (its sequence numbers now name other messages). */
      const answer = (h: HeldMessage, how: (m: JsMsg) => void, what: string) => {
        if (h.epoch !== epoch) return;
        for (const m of h.copies) {
          try {
            how(m);
          } catch (error) {
            o.log.warn(`consumer: could not ${what}; the broker will deliver the message again`, { consumer: o.name, eventId: h.msg.fallbackId, error: describeError(error) });
          }
        }
      };

      const heartbeat = setInterval(() => crash || held.keepAlive(epoch), heartbeatMs);

      const respond = (h: HeldMessage, msg: InboxMessage, result: InboxResult) => {
        switch (result.outcome) {
          case 'processed':
          case 'duplicate':
          case 'ignored':
            answer(h, (m) => m.ack(), 'acknowledge');
            held.release(h);
            summary[result.outcome === 'processed' ? 'processed' : result.outcome === 'duplicate' ? 'duplicates' : 'ignored']++;
            break;
          case 'dead-lettered':
            answer(h, (m) => m.term(), 'terminate');
            held.release(h);
            summary.deadLettered++;
            o.log.warn('consumer: message dead-lettered', { consumer: o.name, eventId: result.eventId, attempts: msg.deliveryCount, error: result.error });
            break;
          case 'retry': {
            h.failures++;
            const delay = backoffDelay(msg.deliveryCount, retryDelay);
            h.retryAt = Date.now() + delay;
            summary.retried++;
            o.log.warn('consumer: message failed; retrying it, the later events of its aggregate wait', { consumer: o.name, eventId: result.eventId, attempt: msg.deliveryCount, delayMs: delay, error: result.error });
            break;
          }
          case 'deferred':
            break;
        }
        const final = summary.processed + summary.duplicates + summary.ignored + summary.deadLettered;
        if (options.maxMessages !== undefined && final >= options.maxMessages) stop.abort();
      };

      /** One write of held messages in stream order; each is answered only after that write committed. */
      const processHeld = async (taken: HeldMessage[]): Promise<void> => {
        const msgs = taken.map((h) => ({ ...h.msg, deliveryCount: h.msg.deliveryCount + h.failures }));
        const results = await writes.write(msgs, stop.signal, { failed: () => summary.databaseErrors++, recovered: () => roomFreed.notify() });
        if (!results) return;
        for (let k = 0; k < taken.length; k++) {
          if (crash) return;
          const result = results[k]!;
          if (result.outcome !== 'deferred') {
            try {
              await o.faults?.afterCommit?.(msgs[k]!, result);
            } catch (error) {
              crash = { error };
              stop.abort();
              return;
            }
          }
          respond(taken[k]!, msgs[k]!, result);
        }
      };

      const work = async (): Promise<void> => {
        while (!stop.signal.aborted) {
          const now = Date.now();
          if (barrier && !barrier.isOpen(now)) {
            await wake.wait(barrier.deadline - now, stop.signal);
            continue;
          }
          const ready = held.ready(now);
          if (ready === 0) {
            const next = held.nextRetryAt(now);
            await wake.wait(next === undefined ? 60_000 : next - now, stop.signal);
            continue;
          }
          // A short macrotask pause lets every message of the socket read that woke us join the batch.
          if (ready < batch) await new Promise((r) => setTimeout(r, 0));
          if (stop.signal.aborted) break;
          const taken = held.take(batch, Date.now());
          if (taken.length === 0) continue;
          writing = true;
          try {
            await processHeld(taken);
          } finally {
            held.settle();
            writing = false;
            roomFreed.notify();
          }
        }
      };

      const pulling = pullMessages(
        { name: o.name, connect: o.connect, stream: o.stream, consumer: consumerSettings, log: o.log, backoff, expiresMs: 5000 },
        {
          async room() {
            for (;;) {
              if (stop.signal.aborted) return 0;
              const now = Date.now();
              const space = maxHeld - held.size();
              // While waiting for an earlier run's messages, keep pulling: they only come back through pulls.
              const waiting = barrier !== undefined && !barrier.isOpen(now);
              if (writes.state() === 'ok' && space > 0 && (waiting || held.ready(now) < batch)) return Math.min(batch, space);
              await roomFreed.wait(1000, stop.signal);
            }
          },
          admit(m) {
            lastDelivery = Date.now();
            if (crash) return;
            if (stop.signal.aborted) {
              m.nak(); // pulled but not started: hand it back at once rather than after ack_wait
              return;
            }
            barrier?.see(m.info.streamSequence);
            held.add(m, epoch);
            wake.notify();
          },
          connected(next) {
            nc = next;
          },
          ready(s) {
            const first = session === undefined;
            if (session && s.streamCreated !== session.streamCreated) {
              epoch++;
              if (held.size() > 0) o.log.warn('consumer: the stream was re-created; the messages held from the old one are still applied, never answered', { consumer: o.name, held: held.size() });
            }
            session = s;
            if (first && s.info.num_ack_pending > 0 && held.size() === 0) {
              barrier = createRedeliveryBarrier({ upTo: s.info.delivered.stream_seq, expected: s.info.num_ack_pending, deadline: Date.now() + Math.round(ackWaitMs * 1.5) + 1000 });
              o.log.info('consumer: waiting for the messages an earlier run left unacknowledged before applying newer ones', { consumer: o.name, unacknowledged: s.info.num_ack_pending });
            }
          },
          brokerState: setState,
          brokerError() {
            summary.brokerErrors++;
          },
        },
        stop.signal,
      ).catch((error: unknown) => {
        fatal = { error };
        stop.abort();
      });

      try {
        const idle = { everyMs: idleCheckMs, session: () => session, busy: () => writing || held.size() > 0, lastDelivery: () => lastDelivery };
        await Promise.all([work(), pulling, options.untilIdle ? stopWhenIdle(idle, stop) : undefined]);
      } finally {
        clearInterval(heartbeat);
        if (timeLimit) clearTimeout(timeLimit);
        options.signal?.removeEventListener('abort', onAbort);
        if (!crash) {
          // Handed back in stream order, so they come back in that order.
          for (const h of held.inOrder()) answer(h, (m) => m.nak(), 'hand the message back');
          await nc?.flush().catch(() => undefined); // the answers reach the broker before the connection closes
        }
        await nc?.close().catch(() => undefined);
      }
      if (fatal) throw fatal.error;
      if (crash) throw crash.error;
      return summary;
    },
  };
}
