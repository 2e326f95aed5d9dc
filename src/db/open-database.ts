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
 */
export async function prepareLocalDatabase(client: Client): Promise<void> {
  if (client.protocol !== 'file') return;
  await retryWhileBusy(busyBudgetOf(client), () => client.executeMultiple('PRAGMA journal_mode = WAL'));
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
