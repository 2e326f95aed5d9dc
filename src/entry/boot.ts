// Shared start-up for the Node, Bun and Deno entries: env, local database, migrations, NATS, signals.
import { createClient, type Client } from '@libsql/client';
import { connect } from '@nats-io/transport-node';
import { mkdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError, parseConfig, type Config } from '../config.ts';
import { DatabaseBusyError } from '../db/busy.ts';
import { migrateDatabase, MigrationError } from '../db/migrate.ts';
import { prepareLocalDatabase } from '../db/open-database.ts';
import { DRIVER_BUSY_WAIT_MS, setBusyBudget } from '../db/write-lock.ts';
import { createLogger, type Logger } from '../logger.ts';
import { natsConnectionOptions, type ConnectNats } from '../nats/connect.ts';
import type { RelayRunOptions } from '../outbox/relay.ts';
import { createService, type Service, type ServiceIo } from '../service.ts';
import { subscriberDatabaseUrl } from '../inbox/subscriber-database.ts';
import { UnknownSubscriberError } from '../consumers/subscribers.ts';
import { UnsafeRetentionError } from '../inbox/retention.ts';
import { UnsafeConsumerConfigError } from '../nats/ensure-consumer.ts';
import { UnsafeStreamConfigError } from '../nats/ensure-stream.ts';
import { exitOnFatalErrors, FATAL_STOP_TIMEOUT_MS } from './fatal-errors.ts';

export const MIGRATIONS_FOLDER = fileURLToPath(new URL('../../db/migrations', import.meta.url));
export const CONSUMER_MIGRATIONS_FOLDER = fileURLToPath(new URL('../../db/consumer-migrations', import.meta.url));

/** Parses process.env (with overrides); on a bad value prints one line naming the variable and exits with code 2. */
export function loadConfigOrExit(overrides: Record<string, string> = {}): Config {
  try {
    return parseConfig({ ...process.env, ...overrides });
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(error.message);
      process.exit(2);
    }
    throw error;
  }
}

/**
 * Opens a libSQL client for `url`, creating the folder of a local file and enabling WAL. The driver gets a busy
 * timeout of a few ms only (its wait blocks the event loop); DATABASE_BUSY_TIMEOUT_MS becomes the client's busy
 * budget, which the writer and migrations wait out asynchronously.
 */
export async function openClient(url: string, config: Config): Promise<Client> {
  if (url.startsWith('file:')) {
    const path = url.slice('file:'.length).split('?')[0]!;
    if (path && path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  }
  const client = createClient({
    url,
    ...(config.DATABASE_AUTH_TOKEN ? { authToken: config.DATABASE_AUTH_TOKEN } : {}),
    timeout: Math.min(config.DATABASE_BUSY_TIMEOUT_MS, DRIVER_BUSY_WAIT_MS),
  });
  setBusyBudget(client, config.DATABASE_BUSY_TIMEOUT_MS);
  await prepareLocalDatabase(client);
  return client;
}

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

/**
 * Applies the migrations in `folder`. A migration that fails, or a database locked by another process past
 * DATABASE_BUSY_TIMEOUT_MS, prints one line (naming the migration's file) and exits with code 1; nothing was applied.
 */
export async function migrateOrExit(client: Client, folder: string): Promise<number> {
  try {
    return await migrateDatabase(client, folder);
  } catch (error) {
    if (error instanceof MigrationError) console.error(`Migration ${migrationFile(error)} ${error.detail}`.replace(/\s+/g, ' '));
    else if (error instanceof DatabaseBusyError) console.error('Migrations not applied: another process held the database lock longer than DATABASE_BUSY_TIMEOUT_MS.');
    else throw error;
    process.exit(1);
  }
}

/** The failed migration's SQL file (its journal entry's tag), relative to the working directory when it can be read. */
function migrationFile(error: MigrationError): string {
  try {
    const journal = JSON.parse(readFileSync(join(error.folder, 'meta', '_journal.json'), 'utf8')) as { entries?: Array<{ tag?: unknown }> };
    const tag = journal.entries?.[error.index]?.tag;
    if (typeof tag === 'string') return relative(process.cwd(), join(error.folder, `${tag}.sql`));
  } catch {
    // fall back to the position in the journal
  }
  return `#${error.index + 1} of ${error.folder}`;
}

export type Started = { config: Config; log: Logger; service: Service; client: Client };

/** Opens a subscriber's own database (CONSUMER_DATABASE_URL_TEMPLATE with its name) and applies its migrations. */
export async function openSubscriberDb(config: Config, name: string): Promise<Client> {
  const client = await openClient(subscriberDatabaseUrl(config.CONSUMER_DATABASE_URL_TEMPLATE, name), config);
  if (config.MIGRATE_ON_START) await migrateOrExit(client, CONSUMER_MIGRATIONS_FOLDER);
  return client;
}

/** Start-up refusals whose message is the whole story: printed as one line, exit code 2. */
const REFUSALS = [UnsafeRetentionError, UnsafeStreamConfigError, UnknownSubscriberError, UnsafeConsumerConfigError];

/** Crash and broken-variant hooks for the crash tests and the torture run; inert unless a test entry passes them. */
export type BootFaults = Pick<ServiceIo, 'relayFaults' | 'consumerFaults' | 'brokenNoInbox'>;

/** The port this process serves HTTP on: PORT with the api role, else METRICS_PORT (operational endpoints only) if set. */
export function httpPort(config: Config): number | undefined {
  return config.ROLES.includes('api') ? config.PORT : config.METRICS_PORT;
}

/**
 * Loads config, opens and migrates the database, and wires the service for the configured roles. Faults come only
 * from `options.faults` (test entries), never from the environment.
 */
export async function boot(options: { env?: Record<string, string>; relayRun?: RelayRunOptions; faults?: BootFaults } = {}): Promise<Started> {
  const config = loadConfigOrExit(options.env);
  const log = createLogger(config.LOG_LEVEL);
  const client = await openClient(config.DATABASE_URL, config);
  if (config.MIGRATE_ON_START) {
    const applied = await migrateOrExit(client, MIGRATIONS_FOLDER);
    if (applied > 0) log.info('migrations applied', { applied });
  }
  let service: Service;
  try {
    service = await createService(config, {
      client,
      log,
      connect: natsConnector(config, `hono-outbox ${config.ROLES.join('+')}`),
      openSubscriberDb: (name) => openSubscriberDb(config, name),
      ...options.faults,
      ...(options.relayRun ? { relayRun: options.relayRun } : {}),
    });
  } catch (error) {
    if (REFUSALS.some((refusal) => error instanceof refusal)) {
      console.error((error as Error).message);
      process.exit(2);
    }
    throw error;
  }
  return { config, log, service, client };
}

/**
 * Stops the service on SIGTERM/SIGINT or when its background roles end: closes the server, lets the relay
 * finish its pass, drains queued writes and exits 0. A fatal background error exits 1 with its message; an
 * uncaught exception or unhandled rejection is logged with its stack, stops the same way (at most
 * FATAL_STOP_TIMEOUT_MS) and exits 1 (see fatal-errors.ts for why both are fatal).
 */
export function stopOnSignals(started: Started, closeServer: () => Promise<void> | void): void {
  let stopping = false;
  let failed = false;
  const stop = async (reason: string, code = 0) => {
    if (code !== 0) failed = true;
    if (stopping) return;
    stopping = true;
    started.log.info('stopping', { reason });
    try {
      await closeServer();
      await started.service.stop();
      started.client.close();
      process.exit(failed ? 1 : code);
    } catch (error) {
      started.log.error('stop failed', { error: String(error) });
      process.exit(1);
    }
  };
  exitOnFatalErrors((what) => {
    setTimeout(() => process.exit(1), FATAL_STOP_TIMEOUT_MS).unref();
    void stop(what, 1);
  });
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  started.service.background.then(
    () => {
      if (!started.config.ROLES.includes('api')) void stop('background work finished');
    },
    (error: unknown) => {
      console.error(error instanceof Error ? error.message : String(error));
      void stop('fatal error', 1);
    },
  );
}
