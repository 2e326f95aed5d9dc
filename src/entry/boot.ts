// Shared start-up for the Node, Bun and Deno entries: env, local database, migrations, signals.
import { createClient, type Client } from '@libsql/client';
import { fileURLToPath } from 'node:url';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { ConfigError, parseConfig, type Config } from '../config.ts';
import { migrateDatabase } from '../db/migrate.ts';
import { prepareLocalDatabase } from '../db/open-database.ts';
import { createLogger, type Logger } from '../logger.ts';
import { createService, type Service } from '../service.ts';

export const MIGRATIONS_FOLDER = fileURLToPath(new URL('../../db/migrations', import.meta.url));

/** Parses process.env; on a bad value prints one line naming the variable and exits with code 2. */
export function loadConfigOrExit(env: Record<string, string | undefined> = process.env): Config {
  try {
    return parseConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(error.message);
      process.exit(2);
    }
    throw error;
  }
}

/** Opens a libSQL client for `url`, creating the folder of a local file and enabling WAL. */
export async function openClient(url: string, config: Config): Promise<Client> {
  if (url.startsWith('file:')) {
    const path = url.slice('file:'.length).split('?')[0]!;
    if (path && path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  }
  const client = createClient({
    url,
    ...(config.DATABASE_AUTH_TOKEN ? { authToken: config.DATABASE_AUTH_TOKEN } : {}),
    timeout: config.DATABASE_BUSY_TIMEOUT_MS,
  });
  await prepareLocalDatabase(client);
  return client;
}

export type Started = { config: Config; log: Logger; service: Service; client: Client };

/** Loads config, opens and migrates the database, and wires the service for the configured roles. */
export async function boot(): Promise<Started> {
  const config = loadConfigOrExit();
  const log = createLogger(config.LOG_LEVEL);
  const client = await openClient(config.DATABASE_URL, config);
  if (config.MIGRATE_ON_START) {
    const applied = await migrateDatabase(client, MIGRATIONS_FOLDER);
    if (applied > 0) log.info('migrations applied', { applied });
  }
  const service = await createService(config, { client, log });
  return { config, log, service, client };
}

/** Stops the service on SIGTERM/SIGINT: closes the server, drains background work, exits 0. */
export function stopOnSignals(started: Started, closeServer: () => Promise<void> | void): void {
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    started.log.info('stopping', { signal });
    try {
      await closeServer();
      await started.service.stop();
      started.client.close();
      process.exit(0);
    } catch (error) {
      started.log.error('stop failed', { error: String(error) });
      process.exit(1);
    }
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}
