// `npm run cli -- db:vacuum`: converts an existing database to `auto_vacuum = INCREMENTAL` with one full VACUUM, so
// that compaction can give freed pages back to the filesystem (ops/compaction.ts). New databases get the mode when
// they are created (prepareLocalDatabase); a database created before that keeps auto_vacuum NONE until this runs,
// because the conversion rewrites the whole file and holds the write lock while it does.
import type { Client } from '@libsql/client';
import { AUTO_VACUUM_INCREMENTAL } from '../db/open-database.ts';
import { busyBudgetOf, retryWhileBusy } from '../db/write-lock.ts';

/** The file-level figures db:vacuum prints before and after. */
export type VacuumState = { autoVacuum: 'none' | 'full' | 'incremental'; pageSize: number; pageCount: number; freelistCount: number };

export type VacuumReport = {
  before: VacuumState;
  after: VacuumState;
  /** Whether this run rewrote the file (false: it was incremental already). */
  converted: boolean;
  ms: number;
};

/** db:vacuum works on a local file only: a remote libSQL server's storage is its own business. */
export class NotLocalDatabaseError extends Error {
  override readonly name = 'NotLocalDatabaseError';
}

const MODES = ['none', 'full', 'incremental'] as const;

async function pragma(client: Client, name: string): Promise<number> {
  return Number((await client.execute(`PRAGMA ${name}`)).rows[0]?.[0] ?? 0);
}

/** auto_vacuum mode, page size, page count and freelist length of the database behind `client`. */
export async function readVacuumState(client: Client): Promise<VacuumState> {
  return {
    autoVacuum: MODES[await pragma(client, 'auto_vacuum')] ?? 'none',
    pageSize: await pragma(client, 'page_size'),
    pageCount: await pragma(client, 'page_count'),
    freelistCount: await pragma(client, 'freelist_count'),
  };
}

/**
 * Sets `auto_vacuum = INCREMENTAL` on the local database behind `client` and rewrites it with VACUUM (the only way
 * the mode changes once a table exists). Every row stays; the freelist is emptied on the way. The VACUUM holds the
 * write lock until it is done (other processes' writes wait, then fail with their busy timeout), writes the whole
 * database through the WAL and needs free disk space of about twice the file. Waits the client's busy budget for
 * the lock first. A database that is incremental already is left as it is.
 */
export async function convertToIncrementalVacuum(client: Client): Promise<VacuumReport> {
  if (client.protocol !== 'file') throw new NotLocalDatabaseError(`db:vacuum works on a local database file only (the URL's protocol is ${client.protocol})`);
  const start = performance.now();
  const before = await readVacuumState(client);
  if (before.autoVacuum === MODES[AUTO_VACUUM_INCREMENTAL]) return { before, after: before, converted: false, ms: 0 };
  // one call: the VACUUM must run on the connection the PRAGMA was set on
  await retryWhileBusy(busyBudgetOf(client), () => client.executeMultiple('PRAGMA auto_vacuum = INCREMENTAL; VACUUM'));
  const after = await readVacuumState(client);
  return { before, after, converted: true, ms: Math.round(performance.now() - start) };
}
