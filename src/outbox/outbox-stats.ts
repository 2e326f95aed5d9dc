import type { Database } from '../db/open-database.ts';
import { integerOrNull, timeMsOrNull } from '../db/column-guards.ts';

export type OutboxBacklog = { pending: number; failed: number; oldestPendingAgeMs: number };
export type OutboxStats = OutboxBacklog & { sent: number };

/**
 * How many pending rows have a matching entry in outbox_sent: published, their mark not yet folded in (see markSent).
 * The entries drive the join (CROSS JOIN), so it costs what outbox_sent holds, not what is pending.
 */
export const SENT_PENDING_COUNT = "SELECT count(*) FROM outbox_sent s CROSS JOIN outbox p ON p.seq = s.seq AND p.id = s.id WHERE p.status = 'pending'";

/** The condition that the outbox row aliased `o` has no matching entry in outbox_sent. */
const NOT_RECORDED_SENT = (o: string) => `NOT EXISTS (SELECT 1 FROM outbox_sent s WHERE s.seq = ${o}.seq AND s.id = ${o}.id)`;

/**
 * Everything in one statement, so the numbers come from one snapshot (`sent` can never come out negative), and
 * nothing reads the `sent` rows: `appended` is the outbox's AUTOINCREMENT counter (one row of sqlite_sequence; the
 * highest seq stored when a script set that counter to something no number can hold), the
 * counts are ranges of idx_outbox_status_seq that cost what the backlog holds (pending rows whose entry in
 * outbox_sent says they were published are not pending), and the oldest pending row is the
 * first entry of that index's `pending` range, not recorded as sent, whose occurred_at is a time (a row a script stored with another value
 * there, text or nanoseconds past 2^53, is skipped instead of failing the statement, and with it /metrics).
 */
export const OUTBOX_STATS_SQL = `SELECT
  coalesce((SELECT ${integerOrNull('seq', 0)} FROM sqlite_sequence WHERE name = 'outbox'), (SELECT max(seq) FROM outbox)) AS appended,
  (SELECT count(*) FROM outbox WHERE status = 'pending') - (${SENT_PENDING_COUNT}) AS pending,
  (SELECT count(*) FROM outbox WHERE status = 'failed') AS failed,
  (SELECT occurred_at FROM outbox o WHERE status = 'pending' AND ${timeMsOrNull('occurred_at')} IS NOT NULL AND ${NOT_RECORDED_SENT('o')}
    ORDER BY seq LIMIT 1) AS oldest_pending_at`;

/**
 * Pending and failed counts, the age of the oldest pending row (0 when none is pending), and `sent`: every row
 * ever appended that is neither pending nor failed, i.e. published, including rows compacted since. Costs
 * O(log n) in the table's size plus O(pending + failed): safe for the public /outbox/stats and every scrape.
 */
export async function readOutboxStats(db: Database, now: Date): Promise<OutboxStats> {
  const row = (await db.$client.execute(OUTBOX_STATS_SQL)).rows[0]!;
  const pending = Number(row.pending);
  const failed = Number(row.failed);
  const oldest = row.oldest_pending_at;
  return {
    pending,
    failed,
    sent: Math.max(0, Number(row.appended ?? 0) - pending - failed),
    oldestPendingAgeMs: oldest === null || oldest === undefined ? 0 : Math.max(0, now.getTime() - Number(oldest)),
  };
}

/** The backlog part of readOutboxStats, for the /metrics gauges. */
export async function readOutboxBacklog(db: Database, now: Date): Promise<OutboxBacklog> {
  const { pending, failed, oldestPendingAgeMs } = await readOutboxStats(db, now);
  return { pending, failed, oldestPendingAgeMs };
}
