import type { Client } from '@libsql/client';
import type { Config } from '../config.ts';
import { findSubscriber } from '../compose/define-modules.ts';
import { createDatabase } from '../db/open-database.ts';
import { createWriter } from '../db/writer.ts';
import { createConsumerRunner, type ConsumerFaults, type ConsumerRunner } from '../inbox/consumer-runner.ts';
import { assertSafeRetention, compactInboxPeriodically, retentionSettingsFrom } from '../inbox/retention.ts';
import { applyWithoutInbox } from '../inbox/without-inbox.ts';
import type { ConnectNats } from '../nats/connect.ts';
import { streamSettingsFrom } from '../nats/stream-settings.ts';
import { createDeadLetterRoutes, type AdminSubscriber } from '../ops/dead-letters.routes.ts';
import { createSubscriberStatus, registerSubscriberGauges, type SubscriberStatus, type WatchedSubscriber } from '../ops/subscriber-status.ts';
import { durableNameOf } from '../service-name.ts';
import type { MountedRoutes } from './api.ts';
import type { Housekeeping, RoleDeps } from './shared.ts';

/** The consumers role's parts: one runner per subscriber over its own database; the process runs them. */
export type ConsumersRole = {
  runners: ConsumerRunner[];
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
  faults?: ConsumerFaults | undefined;
  /** The broken variant the torture checker must catch: subscribers apply events without the inbox. */
  brokenNoInbox?: boolean | undefined;
};

/**
 * Builds a runner for each subscriber in CONSUMERS (default: all of the composition's), durable `<service>-<name>`, and
 * registers their backlog and dead-letter gauges (read before each scrape, cached a few seconds) on the shared metrics.
 * Throws UnsafeRetentionError before opening anything when INBOX_RETENTION_DAYS is below the redelivery horizon, and
 * UnknownSubscriberError for a name the composition lacks.
 */
export async function createConsumersRole(config: Config, shared: RoleDeps, io: ConsumersIo): Promise<ConsumersRole> {
  const { deps, modules } = shared;
  const retentionMs = config.INBOX_RETENTION_DAYS * 86_400_000;
  assertSafeRetention({ retentionMs, ...retentionSettingsFrom(config) });
  const stream = streamSettingsFrom(config);
  const watched: WatchedSubscriber[] = []; // filled below, read at each status request
  const status = createSubscriberStatus({ connect: io.connect, stream: stream.name, subscribers: watched });
  const role: ConsumersRole = { runners: [], routes: [], housekeeping: [], close, status: status.read };
  const clients: Client[] = [];
  async function close() {
    await Promise.all(role.runners.map((r) => r.inbox.writer.idle()));
    await status.close();
    clients.forEach((c) => c.close());
  }
  const admin: AdminSubscriber[] = [];
  try {
    for (const name of config.CONSUMERS ?? modules.subscribers.map((s) => s.name)) {
      const subscriber = findSubscriber(modules, name);
      const client = await io.openSubscriberDb(name);
      clients.push(client);
      const db = createDatabase(client);
      if (subscriber.routes) role.routes.push({ basePath: subscriber.basePath ?? `/${subscriber.name}`, routes: subscriber.routes(db) });
      const writer = createWriter(db, { maxGroup: config.CONSUMER_BATCH });
      const runner = createConsumerRunner({
        ...subscriber,
        durableName: durableNameOf(config.SERVICE_NAME, subscriber.name),
        db,
        writer,
        ...(io.brokenNoInbox ? { processBatch: applyWithoutInbox(writer, deps.registry, subscriber.handle) } : {}),
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
      role.runners.push(runner);
      admin.push({ name, db, inbox: runner.inbox });
      watched.push({ name, durable: durableNameOf(config.SERVICE_NAME, name), db, state: runner.state, databaseState: runner.databaseState });
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
