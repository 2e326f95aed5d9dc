// What every compaction shares: batches through the process's write queue, and a timer that never stops a role.
import { AUTO_VACUUM_INCREMENTAL, sqlOf, type Tx } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import type { Logger } from '../logger.ts';
import { sleep } from '../worker/sleep.ts';

/**
 * What a compaction did: rows deleted, the write transactions that deleted any, and, when it returned any to the
 * filesystem (a database with `auto_vacuum = INCREMENTAL`), the pages the file shrank by (absent otherwise).
 */
export type CompactResult = { deleted: number; batches: number; pagesFreed?: number };

/** Rows a compaction deletes per write transaction unless told otherwise. */
export const COMPACTION_BATCH = 10_000;

/** When periodic compaction runs: once `firstAfterMs` after start, then every `everyMs`. */
export type CompactionSchedule = { firstAfterMs: number; everyMs: number };

/** A minute after start (so start-up is not slowed), then hourly. */
export const HOURLY: CompactionSchedule = { firstAfterMs: 60_000, everyMs: 3_600_000 };

/**
 * One batch's work inside a write transaction, from `cursor` (where the previous batch stopped): the rows it
 * deleted, and the cursor of the next batch, or undefined when nothing is left to delete.
 */
export type DeleteBatch<C> = (tx: Tx, cursor: C) => Promise<{ deleted: number; next: C | undefined }>;

/**
 * Runs `deleteBatch` through `writer` (the process's one write queue for that database) from `first` until it
 * reports nothing left or `signal` aborts. Each batch commits on its own and the cursor advances only after its
 * commit (the writer may run a batch again); the loop yields a macrotask between batches so requests and other
 * writes interleave. Stopping half-way leaves a consistent, partly compacted table.
 *
 * SQLite keeps the pages a DELETE frees in the file (its freelist) for later inserts. When the database has
 * `auto_vacuum = INCREMENTAL` (new databases: prepareLocalDatabase), the pages on the freelist after the last batch
 * are then handed back to the filesystem with `PRAGMA incremental_vacuum`, through the same queue, in steps of at
 * most as many pages as one batch freed: no step holds the write lock much longer than a batch did. An abort stops
 * between steps, and the next compaction frees what is left. On any other database (auto_vacuum NONE: created
 * before this, see `npm run cli -- db:vacuum`; or FULL) the step is skipped.
 */
export async function deleteInBatches<C>(
  writer: Writer,
  first: C,
  deleteBatch: DeleteBatch<C>,
  options: { onBatch?: (progress: CompactResult) => void; signal?: AbortSignal } = {},
): Promise<CompactResult> {
  const result: CompactResult = { deleted: 0, batches: 0 };
  let cursor = first;
  /** undefined until the first batch read the mode; then whether this database vacuums incrementally. */
  let incremental: boolean | undefined;
  let freelist = 0;
  let mostFreedByABatch = 0;
  while (!options.signal?.aborted) {
    const batch = await writer.write(async (tx) => {
      const run = sqlOf(tx);
      const mode = incremental ?? (await autoVacuumMode(run)) === AUTO_VACUUM_INCREMENTAL;
      const before = mode ? await pragmaNumber(run, 'freelist_count') : 0;
      const done = await deleteBatch(tx, cursor);
      const after = mode ? await pragmaNumber(run, 'freelist_count') : 0;
      return { ...done, mode, freed: after - before, after };
    });
    incremental = batch.mode;
    freelist = batch.after;
    mostFreedByABatch = Math.max(mostFreedByABatch, batch.freed);
    if (batch.deleted > 0) {
      result.deleted += batch.deleted;
      result.batches++;
      options.onBatch?.({ ...result });
    }
    if (batch.next === undefined) break;
    cursor = batch.next;
    await sleep(0);
  }
  if (incremental && freelist > 0 && !options.signal?.aborted) {
    const pagesFreed = await vacuumIncrementally(writer, mostFreedByABatch > 0 ? mostFreedByABatch : VACUUM_STEP_PAGES, options.signal);
    if (pagesFreed > 0) result.pagesFreed = pagesFreed;
  }
  return result;
}

/** Pages one incremental-vacuum step frees when no batch of the compaction freed any (pages left by an earlier run). */
export const VACUUM_STEP_PAGES = 1000;

/**
 * Hands the pages on the freelist back to the filesystem, at most `stepPages` free pages per write transaction
 * through `writer`, until none is left, a step frees nothing, or `signal` aborts. Returns the pages the file shrank
 * by: the free pages, plus the pointer-map pages an auto-vacuum database no longer needs at its end. Only for a
 * database with `auto_vacuum = INCREMENTAL` (elsewhere the PRAGMA does nothing).
 */
export async function vacuumIncrementally(writer: Writer, stepPages: number, signal?: AbortSignal): Promise<number> {
  let shrunk = 0;
  while (!signal?.aborted) {
    const step = await writer.write(async (tx) => {
      const run = sqlOf(tx);
      const free = await pragmaNumber(run, 'freelist_count');
      if (free === 0) return { free, freeAfter: 0, shrunk: 0 };
      const pages = await pragmaNumber(run, 'page_count');
      // executeMultiple steps the PRAGMA to its end: it returns a row per page, and a statement left half-stepped
      // would keep the transaction from committing
      await run.executeMultiple(`PRAGMA incremental_vacuum(${Math.max(1, Math.floor(stepPages))})`);
      return { free, freeAfter: await pragmaNumber(run, 'freelist_count'), shrunk: pages - (await pragmaNumber(run, 'page_count')) };
    });
    shrunk += Math.max(0, step.shrunk);
    if (step.freeAfter === 0 || step.freeAfter >= step.free) break;
    await sleep(0);
  }
  return shrunk;
}

type PragmaRunner = Pick<ReturnType<typeof sqlOf>, 'execute'>;

/** `PRAGMA auto_vacuum` (0 none, 1 full, 2 incremental); 0 where the database does not answer it (a remote server may refuse PRAGMAs). */
async function autoVacuumMode(run: PragmaRunner): Promise<number> {
  try {
    return Number((await run.execute('PRAGMA auto_vacuum')).rows[0]?.[0] ?? 0);
  } catch {
    return 0;
  }
}

async function pragmaNumber(run: PragmaRunner, name: 'freelist_count' | 'page_count'): Promise<number> {
  return Number((await run.execute(`PRAGMA ${name}`)).rows[0]?.[0] ?? 0);
}

/**
 * Deletes the rows `deleteBatchSql` selects as older than `now - olderThanMs`, `batch` per write transaction; the
 * statement takes the cutoff (epoch ms) and the batch size as its two arguments and deletes the oldest first.
 */
export async function deleteOlderThan(
  deps: { writer: Writer; clock: () => Date },
  deleteBatchSql: string,
  options: { olderThanMs: number; batch?: number; onBatch?: (progress: CompactResult) => void; signal?: AbortSignal },
): Promise<CompactResult & { cutoff: number }> {
  const batch = checkBatch(options.batch ?? COMPACTION_BATCH);
  const cutoff = deps.clock().getTime() - options.olderThanMs;
  const result = await deleteInBatches(
    deps.writer,
    null,
    async (tx) => {
      const res = await sqlOf(tx).execute({ sql: deleteBatchSql, args: [cutoff, batch] });
      return { deleted: res.rowsAffected, next: res.rowsAffected < batch ? undefined : null };
    },
    options,
  );
  return { ...result, cutoff };
}

/** Throws RangeError unless `batch` is an integer from 1 to 100 000 (a larger batch holds the write lock too long). */
export function checkBatch(batch: number): number {
  if (!Number.isInteger(batch) || batch < 1 || batch > 100_000) throw new RangeError(`batch must be an integer from 1 to 100000 (got ${batch})`);
  return batch;
}

/**
 * Runs `compact` on `schedule` until `signal` aborts, logging what it deleted under `what` (with `fields`). A
 * failure (e.g. the database busy past its timeout) is logged and retried at the next tick: compaction is
 * housekeeping, never a reason to stop a role.
 */
export async function compactPeriodically(
  what: string,
  compact: (signal: AbortSignal) => Promise<CompactResult>,
  deps: { log: Logger; fields?: Record<string, unknown> },
  schedule: CompactionSchedule,
  signal: AbortSignal,
): Promise<void> {
  let wait = schedule.firstAfterMs;
  while (!signal.aborted) {
    await sleep(wait, signal);
    if (signal.aborted) return;
    try {
      const result = await compact(signal);
      if (result.deleted > 0) deps.log.info(`${what} compacted`, { ...deps.fields, ...result });
    } catch (error) {
      deps.log.warn(`${what} compaction failed`, { ...deps.fields, error: String(error) });
    }
    wait = schedule.everyMs;
  }
}
