import type { Client } from '@libsql/client';
import type { Hono } from 'hono';
import type { Config } from './config.ts';
import { createDatabase } from './db/open-database.ts';
import type { Deps } from './deps.ts';
import type { Logger } from './logger.ts';
import type { Metrics } from './metrics/metrics.ts';
import type { ConnectNats } from './nats/connect.ts';
import { kickSubject, streamSettingsFrom } from './nats/stream-settings.ts';
import { createKicker } from './outbox/kicker.ts';
import { HOURLY, type CompactionSchedule } from './ops/compaction.ts';
import type { Relay, RelayRunOptions } from './outbox/relay.ts';
import type { RelayFaults } from './outbox/relay-pass.ts';
import { createSignal } from './signal.ts';
import type { Modules } from './compose/define-modules.ts';
import type { ConsumerFaults } from './inbox/consumer-runner.ts';
import type { LeasedSubscriber } from './inbox/leased-subscriber.ts';
import { createApiRole } from './roles/api.ts';
import { createConsumersRole, type ConsumersRole } from './roles/consumers.ts';
import { createRelayRole, type RelayRole } from './roles/relay.ts';
import { createRoleDeps, instanceIdOf, type Housekeeping, type Runtime } from './roles/shared.ts';

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
  /** The service's version for /openapi.json and hono_outbox_build_info (the entry reads package.json's). */
  version?: string;
  /** The runtime hono_outbox_build_info names (the entry passes its own; default node). */
  runtime?: Runtime;
  /** When the periodic compactions run (default: a minute after start, then hourly). */
  compactionSchedule?: CompactionSchedule;
};

export type Service = {
  deps: Deps;
  metrics: Metrics;
  /** The HTTP app: command routes when the `api` role runs, and always /health, /ready and /metrics. */
  app: Hono;
  relay?: Relay;
  /** The subscribers this process runs, each through its leases (see createLeasedSubscriber). */
  consumers: LeasedSubscriber[];
  /** Settles when a background role stops; rejects on a fatal error such as an unsafe stream configuration. */
  background: Promise<void>;
  /** Stops background roles after their work in flight and waits for queued writes. */
  stop(): Promise<void>;
};

/** Wires the parts for the roles in `config` (see src/roles); the caller owns the client and serves `app.fetch`. */
export async function createService(config: Config, io: ServiceIo): Promise<Service> {
  const roles = new Set(config.ROLES);
  const relayWake = createSignal();
  const shared = createRoleDeps(createDatabase(io.client), {
    modules: io.modules,
    log: io.log,
    ...(io.clock ? { clock: io.clock } : {}),
    build: { service: config.SERVICE_NAME, version: io.version ?? '0.0.0', runtime: io.runtime ?? 'node' },
    outboxCommitted: {
      notify() {
        relayWake.notify();
        kicker?.kick();
      },
      wait: (ms, abort) => relayWake.wait(ms, abort),
    },
  });
  // Commits wake the relay of this process, or, with none here, the relays of other processes over NATS.
  const kicker =
    roles.has('api') && !roles.has('relay') && io.connect
      ? createKicker({
          connect: io.connect,
          subject: kickSubject(streamSettingsFrom(config).name),
          log: shared.deps.log,
          maxBackoffMs: config.RELAY_MAX_BACKOFF_MS,
        })
      : undefined;

  const instance = instanceIdOf(config);
  let relayRole: RelayRole | undefined;
  if (roles.has('relay')) {
    if (!io.connect) throw new Error('the relay role needs a NATS transport');
    relayRole = createRelayRole(config, shared, { connect: io.connect, wake: relayWake, instance, faults: io.relayFaults });
  }
  let consumersRole: ConsumersRole | undefined;
  if (roles.has('consumers')) {
    if (!io.connect || !io.openSubscriberDb) throw new Error('the consumers role needs a NATS transport and subscriber databases');
    consumersRole = await createConsumersRole(config, shared, {
      connect: io.connect,
      openSubscriberDb: io.openSubscriberDb,
      instance,
      faults: io.consumerFaults,
      brokenNoInbox: io.brokenNoInbox,
    });
  }
  const relay = relayRole?.relay;
  const consumers = consumersRole?.subscribers ?? [];
  // A role whose run ended publishes or applies nothing more: /ready says so.
  const ended = new Set<string>();
  const track = (key: string, run: Promise<unknown>): Promise<void> => {
    const end = () => void ended.add(key);
    run.then(end, end);
    return run.then(() => undefined);
  };
  const running = (key: string) => () => !ended.has(key);
  const api = createApiRole(config, shared, {
    running: {
      relay: relay && { state: relay.state, lastSuccessfulPassAt: relay.lastSuccessfulPassAt, running: running('relay'), leases: relay.leases },
      subscribers: consumersRole && {
        runners: consumers.map((c) => ({
          name: c.name,
          state: c.state,
          databaseState: c.databaseState,
          running: running(`consumer:${c.name}`),
          leases: c.leases,
        })),
        backlog: consumersRole.status,
      },
    },
    routes: consumersRole?.routes ?? [],
    status: { relay, subscribers: consumersRole?.status },
    ...(io.version ? { version: io.version } : {}),
  });

  const stop = new AbortController();
  const background: Promise<void>[] = [];
  if (relay) background.push(track('relay', relay.run({ ...io.relayRun, signal: stop.signal })));
  // Each subscriber runs through its leases: its runners start and stop as this instance acquires and loses them.
  for (const subscriber of consumers) background.push(track(`consumer:${subscriber.name}`, subscriber.run(stop.signal)));
  // Compaction timers run until stop, outside `background`: a bounded relay run ends its process without them.
  const schedule = io.compactionSchedule ?? HOURLY;
  const housekeeping = [api, relayRole, consumersRole].flatMap((role): Housekeeping[] => role?.housekeeping ?? []).map((h) => h(schedule, stop.signal));

  return {
    deps: shared.deps,
    metrics: shared.metrics,
    app: api.app,
    ...(relay ? { relay } : {}),
    consumers,
    background: Promise.all(background).then(() => undefined),
    async stop() {
      stop.abort();
      await Promise.allSettled([...background, ...housekeeping]);
      await kicker?.close();
      await shared.deps.writer.idle();
      await consumersRole?.close();
    },
  };
}
