import { sql } from 'drizzle-orm';
import type { Database } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';

export type CompactResult = { deleted: number; batches: number };

/**
 * Deletes `sent` rows whose sent_at is before `cutoffMs`, `batch` rows per write transaction, with portable
 * SQL (`DELETE … WHERE seq IN (SELECT … LIMIT ?)`); never touches `pending` or `failed` rows.
 * Each batch commits on its own, so commands keep flowing between batches.
 */
export async function compactOutbox(
  deps: { db: Database; writer: Writer },
  options: { cutoffMs: number; batch: number; onBatch?: (progress: CompactResult) => void },
): Promise<CompactResult> {
  const result: CompactResult = { deleted: 0, batches: 0 };
  for (;;) {
    const deleted = await deps.writer.write(async (tx) => {
      const res = await tx.run(
        sql`DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox WHERE status = 'sent' AND sent_at < ${options.cutoffMs} ORDER BY seq LIMIT ${options.batch})`,
      );
      return res.rowsAffected;
    });
    if (deleted === 0) return result;
    result.deleted += deleted;
    result.batches++;
    options.onBatch?.({ ...result });
    if (deleted < options.batch) return result;
  }
}
