// Shared start-up for the Node, Bun and Deno entries: env, local database, migrations, NATS, signals.
import type { Client } from '@libsql/client';
import { connect } from '@nats-io/transport-node';
import { readFileSync } from 'node:fs';
import type { Config } from '../config.ts';
import { createLogger, type Logger } from '../logger.ts';
import { flushTraces, registerTraceContext } from './trace-context.ts';
import { natsConnectionOptions, type ConnectNats } from '../nats/connect.ts';
import type { RelayRunOptions } from '../outbox/relay.ts';
import { createService, type Service, type ServiceIo } from '../service.ts';
import type { Modules } from '../compose/define-modules.ts';
import { modules as appModules } from '../modules.ts';
import { isStartUpRefusal } from '../roles/start-up-refusals.ts';
import type { Runtime } from '../roles/shared.ts';
import { exitOnFatalErrors, FATAL_STOP_TIMEOUT_MS } from './fatal-errors.ts';
import { createStdoutLines } from './stdout-lines.ts';
import { APP_MIGRATIONS, loadConfigOrExit, migrateOrExit, openClient, openSubscriberDb, type MigrationFolders } from './open-databases.ts';

export {
  APP_MIGRATIONS,
  loadConfigOrExit,
  migrateOrExit,
  MIGRATIONS_FOLDER,
  openClient,
  openSubscriberDb,
  subscriberMigrationsFolder,
  type MigrationFolders,
} from './open-databases.ts';

/** A NATS connector for Node-compatible runtimes, with credentials and TLS files read here. */
export function natsConnector(config: Config, name: string): ConnectNats {
  const read = (path: string | undefined) => (path ? readFileSync(path, 'utf8') : undefined);
  const tls = config.NATS_TLS_CA || config.NATS_TLS_CERT || config.NATS_TLS_KEY;
  const options = natsConnectionOptions({
    servers: config.NATS_URL.split(','),
    name,
    ...(config.NATS_TOKEN ? { token: config.NATS_TOKEN } : {}),
    ...(config.NATS_USER ? { user: config.NATS_USER, pass: config.NATS_PASSWORD ?? '' } : {}),
    ...(config.NATS_CREDS ? { creds: readFileSync(config.NATS_CREDS) } : {}),
    ...(tls ? { tls: { ca: read(config.NATS_TLS_CA), cert: read(config.NATS_TLS_CERT), key: read(config.NATS_TLS_KEY) } } : {}),
  });
  return () => connect(options);
}

export type Started = { config: Config; log: Logger; service: Service; client: Client };

/** This package's version (package.json), for /openapi.json. */
export const packageVersion = (): string => (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** Crash and broken-variant hooks for the crash tests and the torture run; inert unless a test entry passes them. */
export type BootFaults = Pick<ServiceIo, 'relayFaults' | 'consumerFaults' | 'brokenNoInbox'>;

/**
 * How long a stopping process gives the connections it has before it closes them: requests under way finish, and a
 * client that began a request and never finished it, or never reads its answers, cannot hold up the roles' stop.
 */
export const HTTP_DRAIN_MS = 5000;

/** How long the answers of the last handlers get to leave before a stopping server closes their connections. */
const ANSWERS_LEAVE_MS = 500;

/**
 * Resolves when a stopping server may close the connections it still has: HTTP_DRAIN_MS after the stop began, and
 * once no request handler runs (a command whose body had arrived commits whether its connection is there or not, so
 * it is answered first), or DATABASE_BUSY_TIMEOUT_MS later at most (a handler still reading a body that never ends),
 * and ANSWERS_LEAVE_MS after that.
 */
export async function drainDeadline(config: Config, handlersEnded: () => Promise<void>): Promise<void> {
  const after = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref?.());
  await after(HTTP_DRAIN_MS);
  await Promise.race([handlersEnded(), after(config.DATABASE_BUSY_TIMEOUT_MS)]);
  await after(ANSWERS_LEAVE_MS);
}

/** The port this process serves HTTP on: PORT with the api role, else METRICS_PORT (operational endpoints only) if set. */
export function httpPort(config: Config): number | undefined {
  return config.ROLES.includes('api') ? config.PORT : config.METRICS_PORT;
}

/** The runtime running this process, for entries that do not say (the relay, consume and test entries). */
function detectRuntime(): Runtime {
  const g = globalThis as { Bun?: unknown; Deno?: unknown };
  return g.Bun !== undefined ? 'bun' : g.Deno !== undefined ? 'deno' : 'node';
}

/**
 * Loads config, opens and migrates the database, and wires the service for the configured roles: this service's
 * modules and migrations unless `modules`/`migrations` name others (a test fixture). `runtime` (default: the one
 * running this) is what hono_outbox_build_info names. Faults come only from `options.faults` (test entries), never
 * from the environment.
 */
export async function boot(
  options: {
    env?: Record<string, string>;
    relayRun?: RelayRunOptions;
    faults?: BootFaults;
    modules?: Modules;
    migrations?: MigrationFolders;
    runtime?: Runtime;
  } = {},
): Promise<Started> {
  const migrations = options.migrations ?? APP_MIGRATIONS;
  const config = loadConfigOrExit(options.env);
  if (config.TRACE_CONTEXT === 'async-local-storage') registerTraceContext();
  const version = packageVersion();
  const log = createLogger(config.LOG_LEVEL, createStdoutLines(), { service: config.SERVICE_NAME, version });
  const client = await openClient(config.DATABASE_URL, config);
  if (config.MIGRATE_ON_START) {
    const applied = await migrateOrExit(client, migrations.service);
    if (applied > 0) log.info('migrations applied', { applied });
  }
  let service: Service;
  try {
    service = await createService(config, {
      modules: options.modules ?? appModules,
      client,
      log,
      version,
      runtime: options.runtime ?? detectRuntime(),
      connect: natsConnector(config, `${config.SERVICE_NAME} ${config.ROLES.join('+')}`),
      openSubscriberDb: (name) => openSubscriberDb(config, name, migrations),
      ...options.faults,
      ...(options.relayRun ? { relayRun: options.relayRun } : {}),
    });
  } catch (error) {
    // a refusal's message is the whole story: one line, exit code 2
    if (isStartUpRefusal(error)) {
      console.error(error.message);
      process.exit(2);
    }
    throw error;
  }
  return { config, log, service, client };
}

/**
 * Stops the service on SIGTERM/SIGINT or when its background roles end: closes the server, lets the relay
 * finish its pass, drains queued writes, flushes buffered spans (at most 2 s) and exits 0. A fatal background error exits 1 with its message
 * (2 when it is a start-up refusal a role met once running: an unsafe stream, a refused partition count); an
 * uncaught exception or unhandled rejection is logged with its stack, stops the same way (at most
 * FATAL_STOP_TIMEOUT_MS) and exits 1 (see fatal-errors.ts for why both are fatal).
 */
export function stopOnSignals(started: Started, closeServer: () => Promise<void> | void): void {
  let stopping = false;
  let failed = 0;
  const stop = async (reason: string, code = 0) => {
    if (code !== 0 && failed === 0) failed = code;
    if (stopping) return;
    stopping = true;
    started.log.info('stopping', { reason });
    try {
      await closeServer();
      await started.service.stop();
      started.client.close();
      await flushTraces();
      process.exit(failed || code);
    } catch (error) {
      started.log.error('stop failed', { error });
      process.exit(1);
    }
  };
  exitOnFatalErrors(
    (what) => {
      setTimeout(() => process.exit(1), FATAL_STOP_TIMEOUT_MS).unref();
      void stop(what, 1);
    },
    { service: started.config.SERVICE_NAME, version: packageVersion() },
  );
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  started.service.background.then(
    () => {
      if (!started.config.ROLES.includes('api')) void stop('background work finished');
    },
    (error: unknown) => {
      console.error(error instanceof Error ? error.message : String(error));
      void stop('fatal error', isStartUpRefusal(error) ? 2 : 1);
    },
  );
}
