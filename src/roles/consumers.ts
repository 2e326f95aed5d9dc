import type { Client } from '@libsql/client';
import { jetstreamManager } from '@nats-io/jetstream';
import { ConfigError, type Config } from '../config.ts';
import { findSubscriber } from '../compose/define-modules.ts';
import { createDatabase } from '../db/open-database.ts';
import { createWriter, type Writer } from '../db/writer.ts';
import { createConsumerRunner, type ConsumerFaults, type ConsumerRunner } from '../inbox/consumer-runner.ts';
import { shareOnce } from '../inbox/consumer-session.ts';
import { createInboxDeps, handleBatch } from '../inbox/handle-once.ts';
import type { InboxMessage } from '../inbox/inbox-message.ts';
import type { HeldLease } from '../inbox/lease-fence.ts';
import { fencedWriter, handBackWhenFenced } from '../inbox/lease-fence.ts';
import { createLeasedSubscriber, MIN_SUBSCRIBER_LEASE_TTL_MS, pullExpiryFor, type LeasedSubscriber } from '../inbox/leased-subscriber.ts';
import { durablesOf, partitionDurableName, partitionFilters, prepareDurables } from '../inbox/partition-durables.ts';
import { assertSafeRetention, compactInboxPeriodically, retentionSettingsFrom } from '../inbox/retention.ts';
import { subscriberAggregates } from '../inbox/subscriber.ts';
import type { SubscriberMode } from '../inbox/subscriber-mode.ts';
import { applyWithoutInbox } from '../inbox/without-inbox.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { connectUnlessStopped, type ConnectNats } from '../nats/connect.ts';
import { streamSettingsFrom } from '../nats/stream-settings.ts';
import { createDeadLetterRoutes, type AdminSubscriber } from '../ops/dead-letters.routes.ts';
import { createSubscriberStatus, registerSubscriberGauges, type SubscriberStatus, type WatchedSubscriber } from '../ops/subscriber-status.ts';
import { durableNameOf } from '../service-name.ts';
import type { MountedRoutes } from './api.ts';
import type { Housekeeping, RoleDeps } from './shared.ts';

/** The consumers role's parts: each subscriber over its own database, run through its leases; the process runs them. */
export type ConsumersRole = {
  /** One per subscriber: its leases in this instance and the runners it runs for them. */
  subscribers: LeasedSubscriber[];
  /** The subscribers' read routes and, with ADMIN_TOKEN, their dead-letter admin routes, for the process's HTTP app. */
  routes: MountedRoutes[];
  /** Deletes each subscriber's inbox rows older than INBOX_RETENTION_DAYS. */
  housekeeping: Housekeeping[];
  /** Each subscriber's states, backlog at the broker and dead letters, for the status page (counts cached a few seconds). */
  status(): Promise<SubscriberStatus[]>;
  /** Waits for the subscribers' queued writes and closes their databases; call after the runs ended. */
  close(): Promise<void>;
};

export type ConsumersIo = {
  connect: ConnectNats;
  /** Opens (and migrates) a subscriber's own database. */
  openSubscriberDb: (name: string) => Promise<Client>;
  /** This process's unique name: the owner of the subscribers' leases. */
  instance: string;
  faults?: ConsumerFaults | undefined;
  /** The broken variant the torture checker must catch: subscribers apply events without the inbox. */
  brokenNoInbox?: boolean | undefined;
};

/** inbox_partitions_owned{consumer}: the leases this instance holds of each subscriber (1 at most in single mode). */
function partitionsOwnedGauge(metrics: Metrics, consumer: string) {
  const gauge = metrics.gauge('inbox_partitions_owned', "Partitions of a subscriber (1 in single mode) this process's instance leases now.");
  gauge.set(0, { consumer });
  return { owned: (n: number) => gauge.set(n, { consumer }) };
}

/**
 * Sets up each subscriber in CONSUMERS (default: all of the composition's) as one instance among those sharing it
 * through leases in its database (see createLeasedSubscriber): with CONSUMER_PARTITIONED one durable per outbox
 * partition, `<service>-<name>-p<k>` filtered on `<prefix>.<aggregate_type>.*.<k>`, else the single durable
 * `<service>-<name>`, run by one instance at a time. Registers their backlog and dead-letter gauges (read before
 * each scrape, cached a few seconds) and inbox_partitions_owned on the shared metrics. Throws, before opening
 * anything, UnsafeRetentionError when INBOX_RETENTION_DAYS is below the redelivery horizon, ConfigError when
 * RELAY_LEASE_TTL_MS is below MIN_SUBSCRIBER_LEASE_TTL_MS or partition durable names would collide with another
 * subscriber's durable, and UnknownSubscriberError for a name the composition lacks.
 */
export async function createConsumersRole(config: Config, shared: RoleDeps, io: ConsumersIo): Promise<ConsumersRole> {
  const { deps, modules } = shared;
  const retentionMs = config.INBOX_RETENTION_DAYS * 86_400_000;
  assertSafeRetention({ retentionMs, ...retentionSettingsFrom(config) });
  if (config.RELAY_LEASE_TTL_MS < MIN_SUBSCRIBER_LEASE_TTL_MS)
    throw new ConfigError(
      `RELAY_LEASE_TTL_MS is ${config.RELAY_LEASE_TTL_MS}: with the consumers role it must be at least ${MIN_SUBSCRIBER_LEASE_TTL_MS} ms, so a subscriber's pull requests (at least 1000 ms) fit inside its lease`,
    );
  const mode: SubscriberMode = config.CONSUMER_PARTITIONED ? { partitioned: true, partitions: config.OUTBOX_PARTITIONS } : { partitioned: false };
  const names = config.CONSUMERS ?? modules.subscribers.map((s) => s.name);
  if (mode.partitioned) assertDistinctDurables(modules.subscribers.map((s) => s.name));
  const stream = streamSettingsFrom(config);
  const watched: WatchedSubscriber[] = []; // filled below, read at each status request
  const status = createSubscriberStatus({ connect: io.connect, stream: stream.name, subscribers: watched });
  const role: ConsumersRole = { subscribers: [], routes: [], housekeeping: [], close, status: status.read };
  const clients: Client[] = [];
  const writers: Writer[] = [];
  async function close() {
    await Promise.all(writers.map((w) => w.idle()));
    await status.close();
    clients.forEach((c) => c.close());
  }
  const admin: AdminSubscriber[] = [];
  const maxAckPending = Math.max(1000, 4 * config.CONSUMER_BATCH); // as createConsumerRunner sets it
  try {
    for (const name of names) {
      const subscriber = findSubscriber(modules, name);
      const client = await io.openSubscriberDb(name);
      clients.push(client);
      const db = createDatabase(client);
      if (subscriber.routes) role.routes.push({ basePath: subscriber.basePath ?? `/${subscriber.name}`, routes: subscriber.routes(db) });
      const writer = createWriter(db, { maxGroup: config.CONSUMER_BATCH });
      writers.push(writer);
      const base = durableNameOf(config.SERVICE_NAME, subscriber.name);
      const aggregates = subscriberAggregates(subscriber, deps.registry);
      const shareProbe = shareOnce();
      // A run's writes are fenced by its lease (see createLeasedSubscriber); compaction writes through the plain queue.
      const runnerFor = (partition: number, lease: HeldLease, fenced: () => void): ConsumerRunner => {
        const fencedQueue = fencedWriter(writer, lease);
        // the runner's inbox: its writer is fencedQueue
        const write = io.brokenNoInbox
          ? (msgs: InboxMessage[]) => applyWithoutInbox(runner.inbox)(msgs)
          : (msgs: InboxMessage[]) => handleBatch(runner.inbox, msgs);
        const runner: ConsumerRunner = createConsumerRunner({
          ...subscriber,
          durableName: mode.partitioned ? partitionDurableName(base, partition) : base,
          ...(mode.partitioned ? { filterSubjects: partitionFilters(stream.prefix, aggregates, partition) } : {}),
          pullExpiresMs: pullExpiryFor(config.RELAY_LEASE_TTL_MS),
          shareProbe,
          db,
          writer: fencedQueue,
          processBatch: handBackWhenFenced(write, (error) => {
            deps.log.warn('subscriber: its lease was taken over during a write; the batch was rolled back and handed back', {
              subscriber: name,
              partition,
              error: error.message,
            });
            fenced();
          }),
          registry: deps.registry,
          log: deps.log,
          metrics: shared.metrics,
          tracer: deps.tracer,
          connect: io.connect,
          stream,
          clock: deps.clock,
          ackWaitMs: config.CONSUMER_ACK_WAIT_MS,
          maxDeliver: config.CONSUMER_MAX_DELIVER,
          batch: config.CONSUMER_BATCH,
          maxNakDelayMs: config.RELAY_MAX_BACKOFF_MS,
          backoffBaseMs: config.RELAY_BACKOFF_BASE_MS,
          maxBackoffMs: config.RELAY_MAX_BACKOFF_MS,
          ...(io.faults ? { faults: io.faults } : {}),
        });
        return runner;
      };
      const prepare = async (holdsFirst: () => boolean, signal: AbortSignal) => {
        const nc = await connectUnlessStopped(io.connect, signal);
        if (!nc) return false;
        // a stop closes the connection, which ends the requests under way on a broker that does not answer
        const close = () => void nc.close().catch(() => undefined);
        signal.addEventListener('abort', close, { once: true });
        try {
          const plan = {
            stream,
            subscriber: name,
            base,
            mode,
            aggregateTypes: aggregates,
            settings: (durable: string, filterSubjects: string[]) => ({
              stream: stream.name,
              name: durable,
              filterSubjects,
              ackWaitMs: config.CONSUMER_ACK_WAIT_MS,
              maxDeliver: -1,
              maxAckPending,
            }),
            retentionMs,
            log: deps.log,
            now: () => deps.clock().getTime(),
          };
          return await prepareDurables(await jetstreamManager(nc), plan, holdsFirst);
        } finally {
          signal.removeEventListener('abort', close);
          await nc.close().catch(() => undefined);
        }
      };
      // a fresh connection that reaches JetStream: an instance that sat out because it could not, rejoins after one
      const probe = async () => {
        const nc = await io.connect();
        try {
          await jetstreamManager(nc);
        } finally {
          await nc.close().catch(() => undefined);
        }
      };
      const leased = createLeasedSubscriber({
        subscriber: name,
        owner: io.instance,
        mode,
        writer,
        ttlMs: config.RELAY_LEASE_TTL_MS,
        log: deps.log,
        events: partitionsOwnedGauge(shared.metrics, name),
        runnerFor,
        prepare,
        probe,
      });
      role.subscribers.push(leased);
      // the dead-letter admin replays through the plain queue: an operator's replay holds no lease
      const inbox = createInboxDeps(subscriber, {
        writer,
        registry: deps.registry,
        metrics: shared.metrics,
        clock: deps.clock,
        maxDeliver: config.CONSUMER_MAX_DELIVER,
        tracer: deps.tracer,
        log: deps.log,
        durableName: base,
      });
      admin.push({ name, db, inbox });
      const durables = durablesOf(base, mode);
      watched.push({
        name,
        durable: mode.partitioned ? `${base}-p0…p${mode.partitions - 1}` : base,
        ...(mode.partitioned ? { durables } : {}),
        db,
        state: leased.state,
        databaseState: leased.databaseState,
      });
      role.housekeeping.push((schedule, signal) => compactInboxPeriodically({ writer, clock: deps.clock, log: deps.log, name }, retentionMs, signal, schedule));
    }
    if (config.ADMIN_TOKEN)
      role.routes.push({
        basePath: '/admin/subscribers',
        routes: createDeadLetterRoutes({ subscribers: admin, adminToken: config.ADMIN_TOKEN, log: deps.log }),
      });
  } catch (error) {
    clients.forEach((c) => c.close());
    throw error;
  }
  registerSubscriberGauges(shared.metrics, status);
  return role;
}

/** Partition durables `<service>-<a>-p<k>` must not be another subscriber's `<service>-<a-p<k>>`. */
function assertDistinctDurables(names: readonly string[]): void {
  for (const name of names) {
    const owner = /^(.+)-p\d+$/.exec(name)?.[1];
    if (owner && names.includes(owner))
      throw new ConfigError(`CONSUMER_PARTITIONED: subscriber ${name}'s durable would be one of subscriber ${owner}'s partition durables; rename one of them`);
  }
}
