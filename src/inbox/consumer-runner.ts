import type { Tracer } from '@opentelemetry/api';
import type { Database } from '../db/open-database.ts';
import { createWriter, type Writer } from '../db/writer.ts';
import type { EventRegistry } from '../events/registry.ts';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { ConnectNats } from '../nats/connect.ts';
import type { ConsumerSettings } from '../nats/ensure-consumer.ts';
import type { StreamSettings } from '../nats/stream-settings.ts';
import { createBrokerState, type BrokerState } from '../worker/broker-state.ts';
import { runConsumerSession, type ConsumerFaults, type ConsumerRunOptions, type ConsumerSessionParts, type SharedProbe } from './consumer-session.ts';
import { createInboxDeps, DEFAULT_MAX_DELIVER, describeError, handleBatch, recordedAs, type InboxDeps, type InboxResult } from './handle-once.ts';
import type { InboxMessage } from './inbox-message.ts';
import { appliedEventIds } from './inbox-store.ts';
import type { ConsumerRunSummary } from './message-outcomes.ts';
import { subscriberAggregates, type Subscriber } from './subscriber.ts';
import { createBatchWrites, type DatabaseState } from './write-until-committed.ts';

export type { DatabaseState } from './write-until-committed.ts';
export type { ConsumerRunSummary } from './message-outcomes.ts';
export type { ConsumerFaults, ConsumerRunOptions } from './consumer-session.ts';

export type ConsumerRunnerOptions = Subscriber & {
  /** The durable consumer's name on the stream (default: the subscriber's name); the service uses `<service>-<subscriber>`. */
  durableName?: string;
  /** Its filter subjects (default: `<prefix>.<aggregate_type>.>` per aggregate type the subscriber handles); a partition's runner narrows them. */
  filterSubjects?: string[];
  /** How long one pull request waits at the broker (default 5000, at least 1000); a leased runner keeps it inside its lease. */
  pullExpiresMs?: number;
  /** The subscriber's own database (never the service's). */
  db: Database;
  /** Its write queue; created over `db` when omitted. Share it with compaction and replay (one queue per database). */
  writer?: Writer;
  registry: EventRegistry;
  log: Logger;
  /** Registry the inbox metrics are registered on. */
  metrics: Metrics;
  /** Starts each message's CONSUMER span (default: the global OpenTelemetry tracer, a no-op until an SDK is registered). */
  tracer?: Tracer;
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
  /**
   * Decides whether this runner checks that it may read its stream (see createMissingDeliveries): the runners of one
   * subscriber's partitions share one (shareOnce), so the check runs and reports once per subscriber, not once per
   * partition. Default: each runner checks for itself.
   */
  shareProbe?: SharedProbe;
  /** Replaces handleBatch: the benchmark that measures what the inbox costs, and the consumers role, which hands a fenced batch back. */
  processBatch?: (msgs: InboxMessage[]) => Promise<InboxResult[]>;
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
 * after that commit, terminated once dead-lettered. Messages of one aggregate (aggregateOf: its subjects differ across partition counts) are applied in stream
 * order: one whose handler failed is retried in-process after a growing delay, its failures counted from its
 * delivery count, and dead-lettered on attempt `maxDeliver`, while the later messages of its aggregate wait behind
 * it and other aggregates flow. A write that fails for any other reason (the database is locked, full, unreachable)
 * is retried as it was, with back-off and no new pulls, charging no message. A message the broker delivered and
 * the run never received (an earlier run held it when it died, or the delivery was lost in flight) is awaited
 * before any later message of its aggregate is applied (see createMissingDeliveries). A stop finishes the
 * write in progress, acks it and hands the rest back in stream order. An unsafe stream or consumer configuration
 * is fatal: `run` rejects.
 */
export function createConsumerRunner(o: ConsumerRunnerOptions): ConsumerRunner {
  const batch = o.batch ?? 256;
  const ackWaitMs = o.ackWaitMs ?? 30_000;
  const maxDeliver = o.maxDeliver ?? DEFAULT_MAX_DELIVER;
  const retryDelay = { baseMs: o.nakDelayMs ?? 1000, maxMs: o.maxNakDelayMs ?? 30_000, random: o.random };
  const backoff = { baseMs: o.backoffBaseMs ?? 1000, maxMs: o.maxBackoffMs ?? 30_000, random: o.random };
  // Well inside ack_wait, even when a synchronous database call holds up the timer for a while.
  const heartbeatMs = Math.max(50, Math.floor(ackWaitMs / 4));
  const durableName = o.durableName ?? o.name;
  const inbox = createInboxDeps(o, {
    writer: o.writer ?? createWriter(o.db),
    registry: o.registry,
    metrics: o.metrics,
    maxDeliver,
    durableName,
    ...(o.tracer ? { tracer: o.tracer } : {}),
    ...(o.clock ? { clock: o.clock } : {}),
    log: o.log,
  });
  const processBatch = o.processBatch ?? ((msgs: InboxMessage[]) => handleBatch(inbox, msgs));
  const consumerSettings: ConsumerSettings = {
    stream: o.stream.name,
    name: durableName,
    filterSubjects: o.filterSubjects ?? subscriberAggregates(o, o.registry).map((t) => `${o.stream.prefix}.${t}.>`),
    ackWaitMs,
    // The broker redelivers without limit: a message it stopped redelivering after max_deliver crashes or
    // stalls would be gone without a dead letter. The inbox alone decides when to give up (attempt maxDeliver
    // of a failing handler), and the message is terminated only after its dead letter is committed.
    maxDeliver: -1,
    maxAckPending: Math.max(1000, 4 * batch),
  };
  const broker = createBrokerState({
    log: o.log,
    unavailable: 'consumer: broker unavailable, backing off',
    connected: 'consumer: consuming',
    fields: { consumer: o.name, stream: o.stream.name },
    describe: describeError,
  });
  const writes = createBatchWrites({ consumer: o.name, log: o.log, metrics: inbox.metrics, processBatch, backoff });
  const session: ConsumerSessionParts = {
    pull: { name: o.name, connect: o.connect, stream: o.stream, consumer: consumerSettings, log: o.log, backoff, expiresMs: o.pullExpiresMs ?? 5000 },
    batch,
    heartbeatMs,
    idleCheckMs: o.idleCheckMs ?? 250,
    retryDelay,
    broker,
    writes,
    applied: (ids) => appliedEventIds(o.db.$client, inbox.consumer, ids),
    recordedAs: (msg) => recordedAs(inbox, msg),
    faults: o.faults,
    shareProbe: o.shareProbe ?? ((probe) => probe()),
  };

  return {
    name: o.name,
    inbox,
    state: broker.state,
    databaseState: () => writes.state(),
    run: (options) => runConsumerSession(session, options),
  };
}
