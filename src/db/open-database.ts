import type { Client } from '@libsql/client';
import { drizzle, type LibSQLDatabase, type LibSQLTransaction } from 'drizzle-orm/libsql';
import type { ExtractTablesWithRelations } from 'drizzle-orm';
import { schema } from './schema.ts';

export type Schema = typeof schema;
/** The service database: drizzle over a libSQL client. Reads may use it directly; writes go through the Writer. */
export type Database = LibSQLDatabase<Schema> & { $client: Client };
/** An open write transaction (or a savepoint inside one); only the Writer hands these out. */
export type Tx = LibSQLTransaction<Schema, ExtractTablesWithRelations<Schema>>;

/** Wraps a libSQL client (any runtime's) in drizzle with the service schema. */
export function createDatabase(client: Client): Database {
  return drizzle(client, { schema }) as Database;
}

/** Settings that live in the database file, not in a connection: WAL survives reopen, so pooled connections all get it. */
export async function prepareLocalDatabase(client: Client): Promise<void> {
  if (client.protocol !== 'file') return;
  await client.execute('PRAGMA journal_mode = WAL');
}
