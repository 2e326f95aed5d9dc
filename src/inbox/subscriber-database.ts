import type { Client } from '@libsql/client';
import { migrateDatabase } from '../db/migrate.ts';
import { createDatabase, prepareLocalDatabase, type Database } from '../db/open-database.ts';

/** `CONSUMER_DATABASE_URL_TEMPLATE` with `{name}` replaced: each subscriber owns its database. */
export const subscriberDatabaseUrl = (template: string, name: string) => template.replaceAll('{name}', name);

/**
 * Readies a subscriber's own libSQL database: WAL for a local file, the migrations in `folder`
 * (db/subscribers/<name>: the inbox tables and its own) unless `migrate` is false, then drizzle
 * over it. Call before its Writer is in use. The caller owns and closes the client.
 */
export async function openSubscriberDatabase(client: Client, folder: string, options: { migrate?: boolean } = {}): Promise<Database> {
  await prepareLocalDatabase(client);
  if (options.migrate !== false) await migrateDatabase(client, folder);
  return createDatabase(client);
}
