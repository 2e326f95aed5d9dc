import type { Client } from '@libsql/client';
import type { Hono } from 'hono';
import { createApp } from './app.ts';
import type { Config } from './config.ts';
import { createDatabase, type Database } from './db/open-database.ts';
import { createWriter } from './db/writer.ts';
import { createDeps, type Deps } from './deps.ts';
import type { Logger } from './logger.ts';
import { createMetrics, type Metrics } from './metrics/metrics.ts';
import type { ConnectNats } from './nats/connect.ts';
import { kickSubject, streamSettingsFrom } from './nats/stream-settings.ts';
import { createKicker } from './outbox/kicker.ts';
import { compactOutbox } from './outbox/compact-outbox.ts';
import { compactIdempotencyKeys } from './http/idempotency-retention.ts';
import { compactPeriodically, HOURLY, type CompactionSchedule } from './ops/compaction.ts';
import { createOutboxMetrics, registerOutboxGauges } from './outbox/outbox-metrics.ts';
import { createRelay, type Relay, type RelayRunOptions } from './outbox/relay.ts';
import type { RelayFaults } from './outbox/relay-pass.ts';
import { relaySettingsFrom } from './outbox/relay-settings.ts';
import { createOpsRoutes } from './ops/ops.routes.ts';
import { durableNameOf } from './service-name.ts';
import { createSignal } from './signal.ts';
import { findSubscriber, registryOf, type Modules } from './compose/define-modules.ts';
import { createConsumerRunner, type ConsumerFaults, type ConsumerRunner } from './inbox/consumer-runner.ts';
import { assertSafeRetention, compactInboxPeriodically, retentionSettingsFrom } from './inbox/retention.ts';
import { applyWithoutInbox } from './inbox/without-inbox.ts';

export type ServiceIo = {
  /** The contexts, events and subscribers this service is made of (src/modules.ts, or a test's fixture). */
  modules: Modules;
  client: Client;
  /** Opens (and migrates) a subscriber's own database; needed by the `consumers` role. */
  openSubscriberDb?: (name: string) => Promise<Client>;
  consumerFaults?: ConsumerFaults;
  /** The broken variant the torture checker must catch: subscribers apply events without the inbox. */
  brokenNoInbox?: boolean;
  log: Logger;
  /** Opens a NATS connection with the runtime's transport; without it, relay and subscribers cannot run. */
  connect?: ConnectNats;
  clock?: () => Date;
  relayFaults?: RelayFaults;
  /** Bounds for the relay role (time limit, message count); unbounded by default. */
  relayRun?: Omit<RelayRunOptions, 'signal'>;
  /** When the periodic compactions run (default: a minute after start, then hourly). */
  compactionSchedule?: CompactionSchedule;
};

export type Service = {
  deps: Deps;
  metrics: Metrics;
  /** The HTTP app: command routes when the `api` role runs, and always /health, /ready and /metrics. */
  app: Hono;
  relay?: Relay;
  consumers: ConsumerRunner[];
  /** Settles when a background role stops; rejects on a fatal error such as an unsafe stream configuration. */
  background: Promise<void>;
  /** Stops background roles after their work in flight and waits for queued writes. */
  stop(): Promise<void>;
};

/** Wires the parts for the roles in `config`; the caller owns the client and serves `app.fetch`. */
export async function createService(config: Config, io: ServiceIo): Promise<Service> {
  const db = createDatabase(io.client);
  const clock = io.clock ?? (() => new Date());
  const metrics = createMetrics();
  const outboxMetrics = createOutboxMetrics(metrics);
  registerOutboxGauges(metrics, db, clock);
  const relayWake = createSignal();
  const roles = new Set(config.ROLES);
  const stream = streamSettingsFrom(config);

  const kicker =
    roles.has('api') && !roles.has('relay') && io.connect
      ? createKicker({ connect: io.connect, subject: kickSubject(stream.name), log: io.log, maxBackoffMs: config.RELAY_MAX_BACKOFF_MS })
      : undefined;

  const deps = createDeps(db, io.log, registryOf(io.modules), {
    clock,
    outboxCommitted: {
      notify() {
        relayWake.notify();
        kicker?.kick();
      },
      wait: (ms, abort) => relayWake.wait(ms, abort),
    },
  });

  const stop = new AbortController();
  const background: Promise<void>[] = [];
  // Compaction timers run until stop, outside `background`: a bounded relay run ends its process without them.
  const housekeeping: Promise<void>[] = [];
  const schedule = io.compactionSchedule ?? HOURLY;
  if (roles.has('api')) {
    const forget = (signal: AbortSignal) => compactIdempotencyKeys({ writer: deps.writer, clock }, { olderThanMs: config.IDEMPOTENCY_RETENTION, signal });
    housekeeping.push(compactPeriodically('idempotency keys', forget, { log: io.log }, schedule, stop.signal));
  }
  let relay: Relay | undefined;
  if (roles.has('relay')) {
    if (!io.connect) throw new Error('the relay role needs a NATS transport');
    relay = createRelay({
      db,
      writer: deps.writer,
      registry: deps.registry,
      clock,
      log: io.log,
      metrics: outboxMetrics,
      connect: io.connect,
      stream,
      wake: relayWake,
      pollMs: config.RELAY_POLL_MS,
      settings: relaySettingsFrom(config, stream),
      ...(io.relayFaults ? { faults: io.relayFaults } : {}),
    });
    background.push(relay.run({ ...io.relayRun, signal: stop.signal }).then(() => undefined));
    const compact = (signal: AbortSignal) => compactOutbox(deps, { cutoffMs: clock().getTime() - config.OUTBOX_RETENTION, signal });
    housekeeping.push(compactPeriodically('outbox', compact, { log: io.log }, schedule, stop.signal));
  }

  const consumers: ConsumerRunner[] = [];
  const subscriberClients: Client[] = [];
  const subscriberRoutes: Array<{ basePath: string; routes: Hono<any, any, any> }> = [];
  if (roles.has('consumers')) {
    if (!io.connect || !io.openSubscriberDb) throw new Error('the consumers role needs a NATS transport and subscriber databases');
    const names = config.CONSUMERS ?? io.modules.subscribers.map((s) => s.name);
    const nakMaxMs = config.RELAY_MAX_BACKOFF_MS;
    assertSafeRetention({ retentionMs: config.INBOX_RETENTION_DAYS * 86_400_000, ...retentionSettingsFrom(config) });
    for (const name of names) {
      const subscriber = findSubscriber(io.modules, name);
      const client = await io.openSubscriberDb(name);
      subscriberClients.push(client);
      const subscriberDb = createDatabase(client);
      if (subscriber.routes) subscriberRoutes.push({ basePath: subscriber.basePath ?? `/${subscriber.name}`, routes: subscriber.routes(subscriberDb) });
      const writer = createWriter(subscriberDb, { maxGroup: config.CONSUMER_BATCH });
      const runner = createConsumerRunner({
        ...subscriber,
        durableName: durableNameOf(config.SERVICE_NAME, subscriber.name),
        db: subscriberDb,
        writer,
        ...(io.brokenNoInbox ? { processBatch: applyWithoutInbox(writer, deps.registry, subscriber.handle) } : {}),
        registry: deps.registry,
        log: io.log,
        metrics,
        connect: io.connect,
        stream,
        clock,
        ackWaitMs: config.CONSUMER_ACK_WAIT_MS,
        maxDeliver: config.CONSUMER_MAX_DELIVER,
        batch: config.CONSUMER_BATCH,
        maxNakDelayMs: nakMaxMs,
        backoffBaseMs: config.RELAY_BACKOFF_BASE_MS,
        maxBackoffMs: config.RELAY_MAX_BACKOFF_MS,
        ...(io.consumerFaults ? { faults: io.consumerFaults } : {}),
      });
      consumers.push(runner);
      background.push(runner.run({ signal: stop.signal }).then(() => undefined));
      housekeeping.push(compactInboxPeriodically({ writer, clock, log: io.log, name }, config.INBOX_RETENTION_DAYS * 86_400_000, stop.signal, schedule));
    }
  }

  const app = createApp(deps, {
    service: config.SERVICE_NAME,
    contexts: io.modules.contexts,
    api: roles.has('api'),
    readiness: () => ({
      nats: relay ? relay.state() : consumers[0]?.state() ?? 'not used by this process',
      ...Object.fromEntries(consumers.flatMap((c) => [[`consumer:${c.name}`, c.state()], [`consumer:${c.name}:database`, c.databaseState()]])),
    }),
    extend: (a) => {
      a.route('/', createOpsRoutes({ db, clock, metrics, adminToken: config.ADMIN_TOKEN, outboxCommitted: deps.outboxCommitted, writer: deps.writer }));
      for (const r of subscriberRoutes) a.route(r.basePath, r.routes);
    },
  });

  return {
    deps,
    metrics,
    app,
    ...(relay ? { relay } : {}),
    consumers,
    background: Promise.all(background).then(() => undefined),
    async stop() {
      stop.abort();
      await Promise.allSettled([...background, ...housekeeping]);
      await kicker?.close();
      await deps.writer.idle();
      await Promise.all(consumers.map((c) => c.inbox.writer.idle()));
      subscriberClients.forEach((c) => c.close());
    },
  };
}
