import { sqlOf, type Database } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import { checkBatch, COMPACTION_BATCH, deleteInBatches, type CompactResult } from '../ops/compaction.ts';
import { timeMsOrNull } from '../db/column-guards.ts';

export type { CompactResult } from '../ops/compaction.ts';

/**
 * The last of the next `batch` sent rows after the cursor: a range of idx_outbox_status_seq. Its sent_at is read
 * through a guard: a stamp a script wrote in another unit (nanoseconds past 2^53, text) comes back NULL, and such a
 * row neither ends the walk nor fails it (DELETE_WINDOW_SQL keeps it, its stamp not being before the cutoff).
 */
const WINDOW_END_SQL = `SELECT seq, ${timeMsOrNull('sent_at')} AS sent_at FROM outbox WHERE status = 'sent' AND seq > ? ORDER BY seq LIMIT 1 OFFSET ?`;
/** The old sent rows of that window, by the same index; `pending` and `failed` rows are outside the range. */
const DELETE_WINDOW_SQL = `DELETE FROM outbox WHERE status = 'sent' AND seq > ? AND seq <= ? AND sent_at < ?`;

/**
 * How far past the compacting process's own clock a sent_at may lie and still count as a recent row that ends the
 * walk; the clocks of one deployment differ by far less. A later stamp is a fast clock's, and is walked past.
 */
export const CLOCK_SKEW_MARGIN_MS = 60_000;

/**
 * Deletes `sent` rows whose sent_at is before `cutoffMs`; never touches `pending` or `failed` rows. It walks the
 * sent rows in seq order, a window of `batch` per write transaction through `writer`, and stops after the first
 * window whose last row is younger than the cutoff but not later than `clock()` plus CLOCK_SKEW_MARGIN_MS: rows
 * are sent in about seq order, so the old ones end there and the retained rows are never read. A late-sent row is
 * skipped while young and goes once the boundary passes it. A window ending in a row stamped later still (a relay
 * whose clock ran ahead) does not stop the walk: those rows are kept (their sent_at is after the cutoff) and
 * skipped, and once the clock reaches their stamp they are recent rows like any other. Every statement runs
 * through `writer` (`db` is accepted, unused, so a caller may pass its deps whole). On a database with
 * `auto_vacuum = INCREMENTAL`, the freed pages then go back to the filesystem in bounded steps (deleteInBatches),
 * and the result's `pagesFreed` says how many.
 */
export async function compactOutbox(
  deps: { writer: Writer; clock: () => Date; db?: Database },
  options: { cutoffMs: number; batch?: number; onBatch?: (progress: CompactResult) => void; signal?: AbortSignal },
): Promise<CompactResult> {
  const batch = checkBatch(options.batch ?? COMPACTION_BATCH);
  return deleteInBatches(
    deps.writer,
    0,
    async (tx, afterSeq) => {
      const run = sqlOf(tx);
      const end = (await run.execute({ sql: WINDOW_END_SQL, args: [afterSeq, batch - 1] })).rows[0];
      const last = end ? Number(end.seq) : Number.MAX_SAFE_INTEGER;
      const res = await run.execute({ sql: DELETE_WINDOW_SQL, args: [afterSeq, last, options.cutoffMs] });
      const endSentAt = Number(end?.sent_at ?? 0);
      const done = !end || (endSentAt >= options.cutoffMs && endSentAt <= deps.clock().getTime() + CLOCK_SKEW_MARGIN_MS);
      return { deleted: res.rowsAffected, next: done ? undefined : last };
    },
    options,
  );
}
