import type { Client, Transaction } from '@libsql/client';
import type { ExtractTablesWithRelations } from 'drizzle-orm';
import { drizzle, type LibSQLDatabase, type LibSQLTransaction } from 'drizzle-orm/libsql';
import { busyBudgetOf, retryWhileBusy } from './write-lock.ts';

/**
 * A database (the service's or a subscriber's): drizzle over a libSQL client. Reads may use it directly; writes go
 * through the Writer. Tables are imported where they are used (each module owns its own), not registered here.
 */
export type Database = LibSQLDatabase & { $client: Client };
/** An open write transaction (or a savepoint inside one); only the Writer hands these out. */
export type Tx = LibSQLTransaction<Record<string, never>, ExtractTablesWithRelations<Record<string, never>>>;

/** Wraps a libSQL client (any runtime's) in drizzle. */
export function createDatabase(client: Client): Database {
  return drizzle(client) as Database;
}

/**
 * Settings that live in the database file, not in a connection: WAL survives reopen, so pooled connections all get
 * it. Switching a new file to WAL needs a moment of exclusive lock, so processes starting together wait their turn.
 *
 * A file without tables yet (new, or created but never migrated) also gets `auto_vacuum = INCREMENTAL`, which
 * SQLite accepts only before the first table exists: compaction can then hand the pages it frees back to the
 * filesystem (ops/compaction.ts). It is set before WAL, while the file is still empty; a file whose header was
 * already written (WAL set, no table) takes it through a VACUUM, instant on an empty database. A file with tables
 * keeps its mode: converting it means rewriting it (`npm run cli -- db:vacuum`), never done silently at start.
 */
export async function prepareLocalDatabase(client: Client): Promise<void> {
  if (client.protocol !== 'file') return;
  await retryWhileBusy(busyBudgetOf(client), async () => {
    if ((await scalar(client, 'SELECT count(*) FROM sqlite_schema')) === 0 && (await scalar(client, 'PRAGMA auto_vacuum')) !== AUTO_VACUUM_INCREMENTAL) {
      // one call, so the VACUUM runs on the connection the PRAGMA was set on
      await client.executeMultiple('PRAGMA auto_vacuum = INCREMENTAL');
      if ((await scalar(client, 'PRAGMA auto_vacuum')) !== AUTO_VACUUM_INCREMENTAL) await client.executeMultiple('PRAGMA auto_vacuum = INCREMENTAL; VACUUM');
    }
    await client.executeMultiple('PRAGMA journal_mode = WAL');
  });
}

/** `PRAGMA auto_vacuum` of a database whose freed pages can be returned with `PRAGMA incremental_vacuum`. */
export const AUTO_VACUUM_INCREMENTAL = 2;

/** The first column of the first row of `sql` as a number. */
async function scalar(client: Client, sql: string): Promise<number> {
  return Number((await client.execute(sql)).rows[0]?.[0] ?? 0);
}

/**
 * The libSQL transaction under a drizzle transaction. Hot-path statements run on it directly: drizzle's query
 * building doubles the cost of a command (measured in BENCHMARKS.md), so writes on the request and relay paths
 * use plain SQL while the schema, migrations and occasional queries stay in drizzle.
 */
export function sqlOf(tx: Tx): Transaction {
  return (tx as unknown as { session: { tx: Transaction } }).session.tx;
}

/** Something that runs one SQL statement: the client (autocommit reads) or an open transaction. */
export type SqlRunner = Pick<Transaction, 'execute'>;

/** The plain-SQL runner behind a database handle or a transaction. */
export function sqlRunner(dbOrTx: Database | Tx): SqlRunner {
  return '$client' in dbOrTx ? dbOrTx.$client : sqlOf(dbOrTx);
}
