// What every compaction shares: batches through the process's write queue, and a timer that never stops a role.
import { sqlOf, type Tx } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import type { Logger } from '../logger.ts';
import { sleep } from '../worker/sleep.ts';

/** What a compaction did: rows deleted, and the write transactions that deleted any. */
export type CompactResult = { deleted: number; batches: number };

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
 */
export async function deleteInBatches<C>(
  writer: Writer,
  first: C,
  deleteBatch: DeleteBatch<C>,
  options: { onBatch?: (progress: CompactResult) => void; signal?: AbortSignal } = {},
): Promise<CompactResult> {
  const result: CompactResult = { deleted: 0, batches: 0 };
  let cursor = first;
  while (!options.signal?.aborted) {
    const { deleted, next } = await writer.write((tx) => deleteBatch(tx, cursor));
    if (deleted > 0) {
      result.deleted += deleted;
      result.batches++;
      options.onBatch?.({ ...result });
    }
    if (next === undefined) break;
    cursor = next;
    await sleep(0);
  }
  return result;
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
