import type { Database } from '../db/open-database.ts';

export type OutboxBacklog = { pending: number; failed: number; oldestPendingAgeMs: number };
export type OutboxStats = OutboxBacklog & { sent: number };

const countWhere = async (db: Database, status: string) =>
  Number((await db.$client.execute({ sql: 'SELECT count(*) FROM outbox WHERE status = ?', args: [status] })).rows[0]![0]);

/**
 * Pending and failed counts and the age of the oldest pending row (0 when none is pending). Each is a range of
 * idx_outbox_status_seq, so its cost follows the backlog, not the millions of `sent` rows kept until compaction:
 * cheap enough for every /metrics scrape.
 */
export async function readOutboxBacklog(db: Database, now: Date): Promise<OutboxBacklog> {
  const oldest = await db.$client.execute("SELECT occurred_at FROM outbox WHERE status = 'pending' ORDER BY seq LIMIT 1");
  const first = oldest.rows[0];
  return {
    pending: await countWhere(db, 'pending'),
    failed: await countWhere(db, 'failed'),
    oldestPendingAgeMs: first ? Math.max(0, now.getTime() - Number(first[0])) : 0,
  };
}

/** The backlog plus the number of `sent` rows (a scan of all of them: for /outbox/stats and the CLI, not scrapes). */
export async function readOutboxStats(db: Database, now: Date): Promise<OutboxStats> {
  const backlog = await readOutboxBacklog(db, now);
  return { pending: backlog.pending, failed: backlog.failed, sent: await countWhere(db, 'sent'), oldestPendingAgeMs: backlog.oldestPendingAgeMs };
}
